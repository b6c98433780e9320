//! Policy evaluation cost over 10, 100 and 1,000 rules with a realistic 20-attribute bag.
//!
//! `indexed`: every rule tests `destination.service.host` for equality (one rule per service,
//! as configs that scope rules per service look), plus 5 rules without a literal.
//! `scan`: the same rules, but their literal tests are written so the index cannot use them
//! (`startsWith`), so every match is evaluated: the baseline the index is measured against.

use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile};
use mixer_model::{AttributeBag, StringMap, Value, Variety};
use mixer_runtime::{CacheOptions, RuntimeMetrics, RuntimeOptions, Snapshot};

fn config(rules: usize, indexable: bool) -> String {
    let mut yaml = String::from(
        "kind: handler\nmetadata: {name: allow, namespace: istio-system}\nspec: {compiledAdapter: noop}\n---\n\
         kind: instance\nmetadata: {name: nothing, namespace: istio-system}\nspec: {compiledTemplate: checknothing}\n",
    );
    for i in 0..rules {
        let (host_test, method_test) = if indexable {
            (
                format!(r#"destination.service.host == "svc-{i}.default.svc.cluster.local""#),
                r#"request.method == "POST""#,
            )
        } else {
            (
                format!(r#"destination.service.host.startsWith("svc-{i}.")"#),
                r#"request.method.startsWith("POST")"#,
            )
        };
        yaml.push_str(&format!(
            "---\nkind: rule\nmetadata: {{name: r{i}, namespace: istio-system}}\nspec:\n  match: '{host_test} && {method_test} && (request.headers[\"x-tenant\"] | \"\") != \"blocked\"'\n  actions: [{{handler: allow, instances: [nothing]}}]\n"
        ));
    }
    for i in 0..5 {
        yaml.push_str(&format!(
            "---\nkind: rule\nmetadata: {{name: global{i}, namespace: istio-system}}\nspec:\n  match: 'match(request.path, \"/admin{i}*\") || source.ip == ip(\"10.9.9.{i}\")'\n  actions: [{{handler: allow, instances: [nothing]}}]\n"
        ));
    }
    yaml
}

fn snapshot(rules: usize, indexable: bool) -> Snapshot {
    snapshot_of(config(rules, indexable))
}

fn snapshot_of(text: String) -> Snapshot {
    snapshot_with(text, &RuntimeOptions::default())
}

fn snapshot_with(text: String, options: &RuntimeOptions) -> Snapshot {
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_noop::Noop));
    let sources = vec![SourceFile {
        name: "bench.yaml".into(),
        text,
    }];
    let validated = match mixer_config::validate(&sources, &registry, &ConfigOptions::default()) {
        Ok(v) => v,
        Err(e) => panic!("bench config invalid: {e:?}"),
    };
    match Snapshot::build(
        1,
        validated.config,
        &registry,
        None,
        options,
        &RuntimeMetrics::unregistered(),
    ) {
        Ok(b) => b.snapshot,
        Err(e) => panic!("bench snapshot: {e:?}"),
    }
}

/// A 20-attribute bag like a sidecar's check carries.
fn bag(snapshot: &Snapshot) -> AttributeBag {
    let mut bag = AttributeBag::new(snapshot.vocabulary().clone());
    let headers = StringMap::from_pairs([
        ("user-agent", "curl/8.0"),
        ("x-request-id", "8d3b4f2e-1"),
        ("x-tenant", "acme"),
        ("accept", "*/*"),
        (":authority", "svc-7.default.svc.cluster.local"),
    ]);
    let attrs: [(&str, Value); 20] = [
        ("request.headers", headers.into()),
        ("request.method", Value::from("POST")),
        ("request.path", Value::from("/api/v1/orders?limit=10")),
        ("request.url_path", Value::from("/api/v1/orders")),
        (
            "request.host",
            Value::from("svc-7.default.svc.cluster.local"),
        ),
        ("request.scheme", Value::from("http")),
        ("request.useragent", Value::from("curl/8.0")),
        ("request.id", Value::from("8d3b4f2e-1")),
        ("request.size", Value::Int64(0)),
        (
            "destination.service.host",
            Value::from("svc-7.default.svc.cluster.local"),
        ),
        ("destination.service.name", Value::from("svc-7")),
        ("destination.namespace", Value::from("default")),
        ("destination.port", Value::Int64(8080)),
        (
            "destination.principal",
            Value::from("spiffe://cluster.local/ns/default/sa/svc-7"),
        ),
        ("source.ip", Value::from("10.1.2.3")),
        ("source.namespace", Value::from("default")),
        (
            "source.principal",
            Value::from("spiffe://cluster.local/ns/default/sa/web"),
        ),
        (
            "source.labels",
            StringMap::from_pairs([("app", "web"), ("version", "v1")]).into(),
        ),
        ("context.protocol", Value::from("http")),
        ("connection.mtls", Value::Bool(true)),
    ];
    for (name, value) in attrs {
        if let Err(e) = bag.set(name, value) {
            panic!("{e}");
        }
    }
    bag
}

fn evaluation(c: &mut Criterion) {
    let mut group = c.benchmark_group("evaluate_rules");
    for rules in [10usize, 100, 1000] {
        for (label, indexable) in [("indexed", true), ("scan", false)] {
            let snap = snapshot(rules, indexable);
            let bag = bag(&snap);
            group.bench_with_input(BenchmarkId::new(label, rules), &rules, |b, _| {
                b.iter(|| {
                    mixer_runtime::evaluate(&snap, std::hint::black_box(&bag), Variety::Check)
                })
            });
        }
    }
    group.finish();
}

/// A check answered from the cache, beside the cost of driving an empty future the same way
/// (the difference is the cache's own cost), and a full evaluation with the cache off: as
/// Mixer v1 asks for it (the reads recorded for its answer) and as ext_authz does (not).
fn cache_hit(c: &mut Criterion) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("{e}"),
    };
    let snap = snapshot(10, true);
    let bag = bag(&snap);
    let mut group = c.benchmark_group("check");
    group.bench_function("cache_hit", |b| {
        b.iter(|| {
            rt.block_on(mixer_runtime::check(
                &snap,
                std::hint::black_box(&bag),
                mixer_runtime::Wants::Reads,
            ))
            .map(|c| c.cache_hit)
        })
    });
    group.bench_function("empty_future_baseline", |b| {
        b.iter(|| rt.block_on(async { std::hint::black_box(1) }))
    });
    let off = RuntimeOptions {
        cache: CacheOptions {
            max_entries: 0,
            ..CacheOptions::default()
        },
        ..RuntimeOptions::default()
    };
    let off = snapshot_with(config(10, true), &off);
    group.bench_function("cache_off_10_rules", |b| {
        b.iter(|| {
            rt.block_on(mixer_runtime::check(
                &off,
                std::hint::black_box(&bag),
                mixer_runtime::Wants::Reads,
            ))
            .map(|c| c.verdict.is_allowed())
        })
    });
    group.bench_function("cache_off_10_rules_without_reads", |b| {
        b.iter(|| {
            rt.block_on(mixer_runtime::check(
                &off,
                std::hint::black_box(&bag),
                mixer_runtime::Wants::Verdict,
            ))
            .map(|c| c.verdict.is_allowed())
        })
    });
    group.finish();
}

fn bag_building(c: &mut Criterion) {
    let snap = snapshot(10, true);
    c.bench_function("build_20_attribute_bag", |b| {
        b.iter(|| bag(std::hint::black_box(&snap)))
    });
}

/// The instances and rules of `policies/telemetry/config` (Istio's four standard metrics and
/// an access log), with no-op handlers in place of prometheus and stdio.
fn telemetry_config() -> String {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../policies/telemetry/config"
    );
    let mut docs = vec![
        "kind: handler\nmetadata: {name: prometheus, namespace: istio-system}\nspec: {compiledAdapter: noop}".to_string(),
        "kind: handler\nmetadata: {name: accesslog, namespace: istio-system}\nspec: {compiledAdapter: noop}".to_string(),
    ];
    for file in ["metrics.yaml", "accesslog.yaml"] {
        let text = std::fs::read_to_string(format!("{dir}/{file}"))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        docs.extend(
            text.split("\n---")
                .filter(|d| !d.contains("kind: handler"))
                .map(str::to_string),
        );
    }
    docs.join("\n---\n")
}

fn report_instances(c: &mut Criterion) {
    let snap = snapshot_of(telemetry_config());
    let bag = bag(&snap);
    assert_eq!(
        mixer_runtime::evaluate(&snap, &bag, Variety::Report)
            .dispatches
            .len(),
        5
    );
    c.bench_function("report_standard_telemetry_5_instances", |b| {
        b.iter(|| {
            mixer_runtime::evaluate(&snap, std::hint::black_box(&bag), Variety::Report)
                .dispatches
                .len()
        })
    });
}

criterion_group!(
    benches,
    evaluation,
    cache_hit,
    bag_building,
    report_instances
);
criterion_main!(benches);
