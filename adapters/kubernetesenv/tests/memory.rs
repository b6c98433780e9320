//! Memory per 1,000 watched pods: the bytes the cache holds (allocated minus freed, counted
//! by an instrumented global allocator) after loading 10,000 synthetic pods of 1,000
//! Deployments (`synthetic/mod.rs`), with their ReplicaSets. One test in its own binary, so
//! no other test's allocations are counted. The figure is printed (`--nocapture`) and is in
//! the README.

#[path = "synthetic/mod.rs"]
mod synthetic;

use std::alloc::System;

use mixer_adapter_kubernetesenv::{OwnerKind, PodCache};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

#[test]
fn ten_thousand_pods_cost_what_the_readme_says() {
    let (pods, replicasets) = synthetic::cluster(1_000, 10);
    let region = Region::new(GLOBAL);
    let mut cache = PodCache::new();
    for pod in &pods {
        cache.apply_pod(pod);
    }
    for rs in &replicasets {
        cache.apply_owner(OwnerKind::ReplicaSet, &rs.metadata);
    }
    let change = region.change();
    let held = change.bytes_allocated as i64 - change.bytes_deallocated as i64;
    assert_eq!(cache.len(), 10_000);
    let per_thousand = held / 10;
    println!(
        "kubernetesenv cache: {held} bytes for 10,000 pods and 1,000 ReplicaSets: {} KiB per 1,000 pods",
        per_thousand / 1024
    );
    // The README states about 0.8 MiB per 1,000 pods; fail if it grows far past that.
    assert!(
        per_thousand < 1200 * 1024,
        "{per_thousand} bytes per 1,000 pods"
    );
    drop(cache);
}
