//! Mixer v1 Check, the front end's share: the encoded `CheckRequest` of a typical inbound call
//! (twelve attributes, ten headers, compressed with the global dictionary as an Istio proxy
//! compresses them) into an attribute bag (decoded by prost, or read in place as the server
//! does), and a verdict that read six attributes, two of them
//! header keys, into the encoded `CheckResponse`.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use mixer_frontends::mixer_v1::{
    GLOBAL_WORD_COUNT, check_response, decode_check_in_place, decode_into, encode,
    framed_check_response,
};
use mixer_model::{
    AttributeBag, Presence, ReferencedAttributes, StringMap, Value, Verdict, Vocabulary,
};
use mixer_proto::istio::mixer::v1 as pb;
use prost::Message;

fn request() -> pb::CheckRequest {
    let headers = StringMap::from_pairs([
        (":authority", "svc-3.default.svc.cluster.local"),
        (":method", "GET"),
        (":path", "/api/v1/users?page=4"),
        ("user-agent", "curl/8.5.0"),
        ("accept", "application/json"),
        ("x-request-id", "9b7c0c51-1f1e-4a5e-9a57-6f3f3c1c2a10"),
        ("x-user", "alice"),
        ("x-b3-traceid", "80f198ee56343ba864fe8b2a57d3eff7"),
        ("content-type", "application/json"),
        ("x-forwarded-proto", "http"),
    ]);
    let attrs: Vec<(&str, Value)> = vec![
        ("request.headers", headers.into()),
        ("request.method", Value::from("GET")),
        ("request.path", Value::from("/api/v1/users?page=4")),
        ("request.url_path", Value::from("/api/v1/users")),
        (
            "request.host",
            Value::from("svc-3.default.svc.cluster.local"),
        ),
        ("request.scheme", Value::from("http")),
        ("source.ip", Value::from("10.0.3.17")),
        (
            "source.principal",
            Value::from("spiffe://cluster.local/ns/default/sa/frontend"),
        ),
        (
            "destination.service.host",
            Value::from("svc-3.default.svc.cluster.local"),
        ),
        ("destination.port", Value::Int64(8080)),
        ("context.protocol", Value::from("http")),
        ("context.reporter.kind", Value::from("inbound")),
    ];
    pb::CheckRequest {
        attributes: Some(encode(
            attrs.iter().map(|(k, v)| (*k, v)),
            GLOBAL_WORD_COUNT,
        )),
        global_word_count: GLOBAL_WORD_COUNT as u32,
        deduplication_id: "bench-1".into(),
        ..Default::default()
    }
}

fn bench(c: &mut Criterion) {
    let vocabulary = Arc::new(Vocabulary::istio());
    let mut bag = AttributeBag::new(vocabulary.clone());
    let wire = request().encode_to_vec();
    c.bench_function("mixer_v1_decode_into", |b| {
        b.iter(|| {
            bag.clear();
            let request = pb::CheckRequest::decode(wire.as_slice()).expect("decodes");
            let attributes = request.attributes.as_ref().expect("has attributes");
            decode_into(attributes, &attributes.words, &mut bag).expect("valid");
        })
    });
    c.bench_function("mixer_v1_decode_in_place", |b| {
        b.iter(|| {
            bag.clear();
            decode_check_in_place(&wire, &mut bag)
                .expect("read in place")
                .expect("valid");
        })
    });

    let id = |name: &str| vocabulary.lookup(name).expect("declared");
    let mut referenced = ReferencedAttributes::new();
    referenced.record(id("source.principal"), Presence::Exact);
    referenced.record(id("request.method"), Presence::Exact);
    referenced.record(id("request.path"), Presence::Exact);
    referenced.record(id("source.labels"), Presence::Absent);
    referenced.record_key(id("request.headers"), "x-user".into(), Presence::Exact);
    referenced.record_key(id("request.headers"), "x-tenant".into(), Presence::Absent);
    let verdict = Verdict {
        valid_duration: std::time::Duration::from_secs(10),
        valid_use_count: 1000,
        referenced,
        ..Verdict::default()
    };
    c.bench_function("mixer_v1_check_response_encoded", |b| {
        b.iter(|| check_response(&verdict, &vocabulary, &bag, GLOBAL_WORD_COUNT).encode_to_vec())
    });
    c.bench_function("mixer_v1_check_response_framed_directly", |b| {
        b.iter(|| framed_check_response(&verdict, &vocabulary, &bag, GLOBAL_WORD_COUNT))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
