//! One kubernetesenv lookup (source and destination, by uid) against a cache of 10,000 pods
//! (1,000 Deployments of 10 pods each), beside a baseline in the same run: a plain `HashMap`
//! get of the same key among 10,000. Target: a lookup <= 1 µs.
//!
//! `cargo bench -p mixer-adapter-kubernetesenv --bench lookup -- --warm-up-time 1 --measurement-time 3`

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use mixer_adapter_kubernetesenv::{KubernetesEnvHandler, OwnerKind, PodCache};
use mixer_model::KubernetesInstance;

#[path = "../tests/synthetic/mod.rs"]
mod synthetic;

fn bench(c: &mut Criterion) {
    let (pods, replicasets): (Vec<Pod>, Vec<ReplicaSet>) = synthetic::cluster(1_000, 10);
    let mut cache = PodCache::new();
    let mut baseline = HashMap::new();
    for (i, pod) in pods.iter().enumerate() {
        cache.apply_pod(pod);
        baseline.insert(PodCache::pod_key(pod).unwrap().to_string(), i);
    }
    for rs in &replicasets {
        cache.apply_owner(OwnerKind::ReplicaSet, &rs.metadata);
    }
    let h = KubernetesEnvHandler::fixed("kubernetesenv.istio-system".into(), cache);
    let src = "kubernetes://app-17-v1-5d8f7c9b6-pod3.ns-7";
    let dst = "kubernetes://app-912-v1-5d8f7c9b6-pod8.ns-2";
    let instance = KubernetesInstance {
        name: "attributes.istio-system",
        source_uid: Some(src),
        source_ip: None,
        destination_uid: Some(dst),
        destination_ip: None,
        destination_port: Some(9080),
    };
    assert_eq!(
        h.lookup(&instance).len(),
        23,
        "both sides found, every output"
    );
    let mut group = c.benchmark_group("kubernetesenv_10000_pods");
    group.bench_function("baseline_hashmap_get_two_keys", |b| {
        b.iter(|| {
            let s = black_box(src).strip_prefix("kubernetes://").unwrap();
            let d = black_box(dst).strip_prefix("kubernetes://").unwrap();
            (baseline.get(s).copied(), baseline.get(d).copied())
        })
    });
    group.bench_function("lookup_both_sides", |b| {
        b.iter(|| h.lookup(black_box(&instance)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
