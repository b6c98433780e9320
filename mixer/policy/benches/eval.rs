//! Evaluates ten typical rule matches against a 20-attribute bag.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use mixer_model::{AttributeBag, ReferencedAttributes, StringMap, Value, ValueType, Vocabulary};
use mixer_policy::{Expression, Syntax};

const MATCHES: [&str; 10] = [
    r#"request.method == "GET""#,
    r#"request.headers["x-user"] == "alice""#,
    r#"match(request.path, "/api/*")"#,
    r#"destination.service.host == "reviews.default.svc.cluster.local" && request.method == "POST""#,
    r#"(request.headers["x-forwarded-proto"] | "http") == "https""#,
    r#"source.ip == "10.0.0.1" || source.namespace == "istio-system""#,
    r#"request.path.startsWith("/health") || request.useragent == "kube-probe""#,
    r#"!has(request.headers.authorization) && request.method in ["POST", "PUT", "DELETE"]"#,
    r#"response.code >= 500 || response.duration > "100ms""#,
    r#""^/api/v[0-9]+/users$".matches(request.path) && connection.mtls"#,
];

fn bag(vocabulary: &Arc<Vocabulary>) -> AttributeBag {
    let mut b = AttributeBag::new(vocabulary.clone());
    let attrs: [(&str, Value); 19] = [
        ("request.method", Value::from("GET")),
        ("request.path", Value::from("/api/v1/users")),
        ("request.host", Value::from("reviews")),
        ("request.scheme", Value::from("http")),
        ("request.useragent", Value::from("curl/7.68")),
        ("request.id", Value::from("3f2a-11")),
        ("request.size", Value::Int64(512)),
        ("request.time", Value::from("2020-01-01T00:00:00Z")),
        ("source.ip", Value::from("10.0.0.7")),
        ("source.namespace", Value::from("default")),
        (
            "source.principal",
            Value::from("cluster.local/ns/default/sa/productpage"),
        ),
        (
            "destination.service.host",
            Value::from("reviews.default.svc.cluster.local"),
        ),
        ("destination.port", Value::Int64(9080)),
        ("destination.namespace", Value::from("default")),
        ("response.code", Value::Int64(200)),
        ("response.duration", Value::from("12ms")),
        ("response.size", Value::Int64(2048)),
        ("connection.mtls", Value::Bool(true)),
        ("context.protocol", Value::from("http")),
    ];
    for (name, value) in attrs {
        b.set(name, value).expect("valid attribute");
    }
    let headers = StringMap::from_pairs([
        ("x-user", "alice"),
        ("x-forwarded-proto", "https"),
        ("content-type", "application/json"),
        (":authority", "reviews"),
    ]);
    b.set("request.headers", Value::from(headers))
        .expect("headers");
    b
}

fn bench(c: &mut Criterion) {
    let vocabulary = Arc::new(Vocabulary::istio());
    let exprs: Vec<Expression> = MATCHES
        .iter()
        .map(|src| {
            Expression::compile_expecting(src, Syntax::Compat, &vocabulary, ValueType::Bool)
                .expect("compiles")
        })
        .collect();
    let bag = bag(&vocabulary);
    let mut refs = ReferencedAttributes::new();
    c.bench_function("ten typical matches", |b| {
        b.iter(|| {
            refs.clear();
            let mut n = 0;
            for e in &exprs {
                if e.eval_bool(black_box(&bag), &mut refs).unwrap_or(false) {
                    n += 1;
                }
            }
            black_box(n)
        })
    });
    c.bench_function("one header comparison", |b| {
        b.iter(|| {
            refs.clear();
            black_box(exprs[1].eval_bool(black_box(&bag), &mut refs))
        })
    });
    c.bench_function("compile a match", |b| {
        b.iter(|| Expression::compile(black_box(MATCHES[3]), Syntax::Compat, &vocabulary))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
