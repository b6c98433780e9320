//! What sealing adds to a shared hit: reading a verdict found in Redis as it is (the
//! baseline, run beside it) against opening its seal first (one HMAC-SHA256 over the Redis
//! key, the expiry and the value) and then reading it. Storing pays the same on the way in.
//!
//! `cargo bench -p mixer-shared-cache --bench seal`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use mixer_model::{Code, Presence, ReferencedAttributes, Status, Verdict, Vocabulary};
use mixer_shared_cache::codec;
use mixer_shared_cache::seal::Keys;

/// A listchecker's denial that read one header and the source namespace: the usual size of
/// an entry.
fn verdict(vocabulary: &Vocabulary) -> Verdict {
    let mut referenced = ReferencedAttributes::new();
    referenced.record_key(
        vocabulary.lookup("request.headers").expect("declared"),
        Arc::from("x-user"),
        Presence::Exact,
    );
    referenced.record(
        vocabulary.lookup("source.namespace").expect("declared"),
        Presence::Exact,
    );
    Verdict {
        status: Status::new(Code::PermissionDenied, "carol is not on the list"),
        denied_by: Some(Arc::from("users.listchecker.istio-system")),
        valid_duration: Duration::from_secs(60),
        valid_use_count: 10_000,
        referenced,
        matched_rules: vec![Arc::from("users.rule.istio-system")],
        request_header_ops: Vec::new(),
        response_header_ops: Vec::new(),
        dry_run: Vec::new(),
        failed_open: Vec::new(),
    }
}

fn shared_hit(c: &mut Criterion) {
    let vocabulary = Vocabulary::istio();
    let value = codec::encode_verdict(&verdict(&vocabulary), &vocabulary);
    let keys = Keys::parse("0123456789abcdef0123456789abcdef").expect("key");
    let key = format!(
        "mixer:cache:{{5f0c9a1e2b3d4c5e6f708192-sealed:{}}}",
        "ab".repeat(32)
    );
    let sealed = keys.seal(key.as_bytes(), &value, u64::MAX - 1);
    let mut group = c.benchmark_group("shared-hit");
    group.bench_function("decode (baseline)", |b| {
        b.iter(|| codec::decode_verdict(black_box(&value), &vocabulary))
    });
    group.bench_function("open seal + decode", |b| {
        b.iter(|| {
            let opened = keys
                .open(black_box(key.as_bytes()), black_box(&sealed), 1)
                .expect("sealed by this key");
            codec::decode_verdict(opened, &vocabulary)
        })
    });
    group.bench_function("seal (store)", |b| {
        b.iter(|| keys.seal(black_box(key.as_bytes()), black_box(&value), 1))
    });
    group.finish();
}

criterion_group!(benches, shared_hit);
criterion_main!(benches);
