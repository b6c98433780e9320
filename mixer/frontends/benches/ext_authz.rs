//! ext_authz `CheckRequest` -> attribute bag, the front end's share of every check: a request
//! as Envoy sends it for a typical API call (peers with SPIFFE principals, ten headers),
//! decoded or encoded.

use std::collections::HashMap;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{
    HttpRequest, Request as AttrRequest,
};
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest};
use mixer_frontends::ext_authz::{fill_bag, fill_bag_from_wire, socket_peer};
use mixer_model::{AttributeBag, Timestamp, Vocabulary};

fn request() -> CheckRequest {
    let headers: HashMap<String, String> = [
        (":authority", "svc-3.default.svc.cluster.local"),
        (":method", "GET"),
        (":path", "/api/v1/users?page=4"),
        (":scheme", "http"),
        ("user-agent", "curl/8.5.0"),
        ("accept", "application/json"),
        ("x-request-id", "9b7c0c51-1f1e-4a5e-9a57-6f3f3c1c2a10"),
        ("x-user", "alice"),
        ("x-tenant", "acme"),
        ("x-forwarded-proto", "http"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(socket_peer(
                "10.1.2.3",
                43210,
                "spiffe://cluster.local/ns/default/sa/web",
            )),
            destination: Some(socket_peer(
                "10.0.0.1",
                8080,
                "spiffe://cluster.local/ns/default/sa/api",
            )),
            request: Some(AttrRequest {
                http: Some(HttpRequest {
                    id: "9b7c0c51-1f1e-4a5e-9a57-6f3f3c1c2a10".into(),
                    method: "GET".into(),
                    headers,
                    path: "/api/v1/users?page=4".into(),
                    host: "svc-3.default.svc.cluster.local".into(),
                    scheme: "http".into(),
                    protocol: "HTTP/1.1".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

fn bench(c: &mut Criterion) {
    let request = request();
    let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
    let now = Timestamp::now();
    c.bench_function("ext_authz_fill_bag", |b| {
        b.iter(|| {
            bag.clear();
            fill_bag(&mut bag, &request, now);
        })
    });
    // From the encoded message, as the gRPC method receives it: decoded by the generated
    // code and then mapped (the baseline), or read in place.
    let wire = prost::Message::encode_to_vec(&request);
    c.bench_function("ext_authz_decode_then_fill_bag", |b| {
        b.iter(|| {
            bag.clear();
            let request = <CheckRequest as prost::Message>::decode(wire.as_slice());
            fill_bag(&mut bag, &request.expect("decodes"), now);
        })
    });
    c.bench_function("ext_authz_fill_bag_from_wire", |b| {
        b.iter(|| {
            bag.clear();
            fill_bag_from_wire(&mut bag, &wire, now).expect("reads");
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
