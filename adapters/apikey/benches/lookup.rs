//! `generate` of an `apikey` instance against 10,000 keys (a known key and an unknown one),
//! beside the baseline that every lookup pays: the SHA-256 of the key alone. `answer_*` is the
//! lookup without the async call around it.

use std::fmt::Write as _;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use mixer_adapter_apikey::{ApiKey, ApiKeyParams, KeyDigest};
use mixer_model::{FieldValue, Instance, Template, Value};

const KEYS: usize = 10_000;

/// A key shaped like a real one: 40 characters of random-looking text.
fn key(i: usize) -> String {
    format!(
        "fake-{:035x}",
        (i as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)
    )
}

fn instance(key: &str) -> Instance {
    Instance {
        name: "apikey.instance.default".into(),
        template: Template::ApiKey,
        fields: vec![("key", FieldValue::Value(Value::from(key)))],
    }
}

fn lookup(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("keys.yaml");
    let mut text = String::from("keys:\n");
    let tiers = ["gold", "silver", "free"];
    for i in 0..KEYS {
        let tier = tiers[i % tiers.len()];
        let _ = writeln!(
            text,
            "- name: client-{i}\n  key: {}\n  labels: {{tier: {tier}, team: t{}}}",
            key(i),
            i % 50
        );
    }
    std::fs::write(&file, text).expect("write keys");
    let params: ApiKeyParams =
        serde_json::from_value(serde_json::json!({"file": file})).expect("params");
    let config = params.compile().expect("compiles");
    let ctx = mixer_adapter_api::BuildContext {
        handler_name: "keys.apikey.default".into(),
    };
    // Built outside a runtime: no reload task runs beside the measurement.
    let concrete = ApiKey.build_handler(&config, &ctx);
    let handler = mixer_adapter_api::Adapter::build(&ApiKey, &config, &ctx).expect("built");
    let generator = handler.as_attributes().expect("attribute generator");
    let known = instance(&key(KEYS / 2));
    let unknown = instance("fake-not-a-key-0000000000000000000000000");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");

    let mut group = c.benchmark_group("apikey");
    group.bench_function("baseline_sha256_of_key", |b| {
        let k = key(KEYS / 2);
        b.iter(|| black_box(KeyDigest::of(black_box(k.as_bytes()))));
    });
    // The lookup alone, without the async call (a boxed future, polled by `block_on`).
    group.bench_function("answer_known_key_10k", |b| {
        let k = key(KEYS / 2);
        b.iter(|| black_box(concrete.answer(black_box(Some(k.as_str())))));
    });
    group.bench_function("generate_known_key_10k", |b| {
        b.iter(|| rt.block_on(generator.generate(black_box(&known))));
    });
    group.bench_function("generate_unknown_key_10k", |b| {
        b.iter(|| rt.block_on(generator.generate(black_box(&unknown))));
    });
    group.finish();
}

criterion_group!(benches, lookup);
criterion_main!(benches);
