//! The cache and the handler's outputs, on the fixtures under `tests/data/` (Kubernetes JSON
//! as `kubectl get -o json` prints it).

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use mixer_adapter_api::{AttributeHandler, ErrorKind};
use mixer_model::{FieldValue, Instance, KubernetesInstance, StringMap, Template, Value};

use crate::{KubernetesEnvHandler, OwnerKind, PodCache, Shared};

fn items<T: serde::de::DeserializeOwned>(file: &str) -> Vec<T> {
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    let list: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    serde_json::from_value(list["items"].clone()).unwrap()
}

fn one<T: serde::de::DeserializeOwned>(file: &str) -> T {
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn bookinfo() -> PodCache {
    let mut cache = PodCache::new();
    for pod in items::<Pod>("pods.json") {
        cache.apply_pod(&pod);
    }
    for rs in items::<ReplicaSet>("replicasets.json") {
        cache.apply_owner(OwnerKind::ReplicaSet, &rs.metadata);
    }
    cache
}

fn handler(cache: PodCache) -> KubernetesEnvHandler {
    KubernetesEnvHandler::fixed("kubernetesenv.istio-system".into(), cache)
}

fn ask(
    h: &KubernetesEnvHandler,
    src: Option<&str>,
    dst: Option<&str>,
) -> Vec<(&'static str, Value)> {
    h.lookup(&KubernetesInstance {
        name: "attributes.istio-system",
        source_uid: src,
        source_ip: None,
        destination_uid: dst,
        destination_ip: None,
        destination_port: Some(9080),
    })
}

fn get<'a>(out: &'a [(&'static str, Value)], name: &str) -> Option<&'a Value> {
    out.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
}

fn text(out: &[(&'static str, Value)], name: &str) -> Option<String> {
    match get(out, name)? {
        Value::String(s) => Some(s.to_string()),
        other => panic!("{name} is {other:?}"),
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn by_uid_both_sides_with_workloads_through_replicasets() {
    let h = handler(bookinfo());
    let out = ask(
        &h,
        Some("kubernetes://productpage-v1-596598f447-nn64q.default"),
        Some("kubernetes://reviews-v1-79d546878f-r5ps6.default"),
    );
    let t = |n| text(&out, n);
    assert_eq!(t("source_workload_name").as_deref(), Some("productpage-v1"));
    assert_eq!(
        t("source_workload_uid").as_deref(),
        Some("istio://default/workloads/productpage-v1")
    );
    assert_eq!(t("source_workload_namespace").as_deref(), Some("default"));
    assert_eq!(
        t("source_owner").as_deref(),
        Some("kubernetes://apis/apps/v1/namespaces/default/deployments/productpage-v1")
    );
    assert_eq!(
        t("source_pod_uid").as_deref(),
        Some("kubernetes://productpage-v1-596598f447-nn64q.default")
    );
    assert_eq!(
        t("source_pod_name").as_deref(),
        Some("productpage-v1-596598f447-nn64q")
    );
    assert_eq!(t("source_namespace").as_deref(), Some("default"));
    assert_eq!(
        t("source_service_account_name").as_deref(),
        Some("bookinfo-productpage")
    );
    assert_eq!(
        get(&out, "source_pod_ip"),
        Some(&Value::IpAddress(ip("10.44.0.12")))
    );
    assert_eq!(
        get(&out, "source_host_ip"),
        Some(&Value::IpAddress(ip("10.128.0.5")))
    );
    let labels = StringMap::from_pairs([
        ("app", "productpage"),
        ("pod-template-hash", "596598f447"),
        ("version", "v1"),
    ]);
    assert_eq!(
        get(&out, "source_labels"),
        Some(&Value::StringMap(Arc::new(labels)))
    );
    assert_eq!(
        t("destination_workload_name").as_deref(),
        Some("reviews-v1")
    );
    assert_eq!(t("destination_container_name").as_deref(), Some("reviews"));
    assert_eq!(
        t("destination_service_account_name").as_deref(),
        Some("bookinfo-reviews")
    );
    assert_eq!(
        t("destination_owner").as_deref(),
        Some("kubernetes://apis/apps/v1/namespaces/default/deployments/reviews-v1")
    );
    // Every name is one of the template's outputs, of its declared type.
    for (name, value) in &out {
        let spec = Template::Kubernetes
            .output(name)
            .unwrap_or_else(|| panic!("{name}"));
        assert_eq!(
            mixer_model::FieldKind::Value(Some(value.value_type())),
            spec.kind,
            "{name}"
        );
    }
}

#[test]
fn by_ip_and_by_an_ip_as_uid() {
    let h = handler(bookinfo());
    let out = h.lookup(&KubernetesInstance {
        name: "a",
        source_uid: Some(""),
        source_ip: Some(ip("10.44.0.13")),
        destination_uid: Some("10.44.0.12"),
        destination_ip: None,
        destination_port: Some(15090),
    });
    assert_eq!(
        text(&out, "source_workload_name").as_deref(),
        Some("reviews-v1")
    );
    assert_eq!(
        text(&out, "destination_workload_name").as_deref(),
        Some("productpage-v1")
    );
    assert_eq!(
        text(&out, "destination_container_name").as_deref(),
        Some("istio-proxy")
    );
    // The unspecified address (the chart's default) looks nothing up.
    let none = h.lookup(&KubernetesInstance {
        name: "a",
        source_uid: None,
        source_ip: Some(ip("0.0.0.0")),
        destination_uid: None,
        destination_ip: None,
        destination_port: None,
    });
    assert!(none.is_empty(), "{none:?}");
}

#[test]
fn an_unknown_pod_gives_no_outputs_for_its_side_only() {
    let h = handler(bookinfo());
    let out = ask(
        &h,
        Some("kubernetes://gone-1.default"),
        Some("kubernetes://reviews-v1-79d546878f-r5ps6.default"),
    );
    assert!(
        out.iter().all(|(n, _)| n.starts_with("destination_")),
        "{out:?}"
    );
    assert!(!out.is_empty());
    // A namespace that differs is another pod; a name without namespace is nothing.
    assert!(
        ask(
            &h,
            Some("kubernetes://reviews-v1-79d546878f-r5ps6.prod"),
            None
        )
        .is_empty()
    );
    assert!(ask(&h, Some("reviews-v1-79d546878f-r5ps6"), None).is_empty());
}

#[test]
fn without_its_replicaset_a_pod_is_the_replicasets_workload() {
    let mut cache = PodCache::new();
    for pod in items::<Pod>("pods.json") {
        cache.apply_pod(&pod);
    }
    let h = handler(cache);
    let out = ask(
        &h,
        Some("kubernetes://reviews-v1-79d546878f-r5ps6.default"),
        None,
    );
    assert_eq!(
        text(&out, "source_workload_name").as_deref(),
        Some("reviews-v1-79d546878f")
    );
    assert_eq!(
        text(&out, "source_owner").as_deref(),
        Some("kubernetes://apis/apps/v1/namespaces/default/replicasets/reviews-v1-79d546878f")
    );
}

#[test]
fn a_bare_pod_and_a_job_pod_are_their_own_workloads() {
    let mut bare: Pod = one("pod-ratings.json");
    bare.metadata.owner_references = None;
    bare.metadata.self_link =
        Some("/api/v1/namespaces/default/pods/ratings-v1-6c9dbf6b45-5bq8x".into());
    let mut job: Pod = one("pod-ratings.json");
    job.metadata.name = Some("backup-1597050000-kx2zq".into());
    job.status.as_mut().unwrap().pod_ip = Some("10.44.0.40".into());
    let owner = &mut job.metadata.owner_references.as_mut().unwrap()[0];
    owner.api_version = "batch/v1".into();
    owner.kind = "Job".into();
    owner.name = "backup-1597050000".into();
    let mut cache = PodCache::new();
    cache.apply_pod(&bare);
    cache.apply_pod(&job);
    let h = handler(cache);
    let out = ask(
        &h,
        Some("kubernetes://ratings-v1-6c9dbf6b45-5bq8x.default"),
        Some("kubernetes://backup-1597050000-kx2zq.default"),
    );
    assert_eq!(
        text(&out, "source_workload_name").as_deref(),
        Some("ratings-v1-6c9dbf6b45-5bq8x")
    );
    assert_eq!(
        text(&out, "source_owner").as_deref(),
        Some("/api/v1/namespaces/default/pods/ratings-v1-6c9dbf6b45-5bq8x")
    );
    // Istio 1.4 watched no Jobs: a CronJob's pod has its Job as workload.
    assert_eq!(
        text(&out, "destination_workload_name").as_deref(),
        Some("backup-1597050000")
    );
    assert_eq!(
        text(&out, "destination_owner").as_deref(),
        Some("kubernetes://apis/batch/v1/namespaces/default/jobs/backup-1597050000")
    );
}

#[test]
fn a_pod_replaced_at_the_same_ip_is_found_by_that_ip() {
    let mut cache = bookinfo();
    let at = |c: &PodCache| {
        let mut out = Vec::new();
        if let Some(found) = c.find_uid("10.44.0.12") {
            found.fill(&crate::cache::SOURCE, &mut out);
        }
        text(&out, "source_pod_name")
    };
    // The new pod arrives while the old one still holds the IP (terminating).
    cache.apply_pod(&one("pod-productpage-terminating.json"));
    cache.apply_pod(&one("pod-reviews-v2-same-ip.json"));
    assert_eq!(at(&cache).as_deref(), Some("reviews-v2-7d79d5bd5d-x2kqp"));
    // A late update of the old pod does not take the IP back.
    cache.apply_pod(&one("pod-productpage-terminating.json"));
    assert_eq!(at(&cache).as_deref(), Some("reviews-v2-7d79d5bd5d-x2kqp"));
    cache.delete_pod(&one("pod-productpage-terminating.json"));
    assert_eq!(at(&cache).as_deref(), Some("reviews-v2-7d79d5bd5d-x2kqp"));
    cache.delete_pod(&one("pod-reviews-v2-same-ip.json"));
    assert_eq!(at(&cache), None);
}

#[test]
fn a_relist_drops_what_was_deleted_meanwhile_and_label_sets_are_shared() {
    let mut cache = bookinfo();
    let mut twin: Pod = one("pod-productpage-terminating.json");
    twin.metadata.name = Some("productpage-v1-596598f447-z9z9z".into());
    twin.metadata.deletion_timestamp = None;
    twin.status.as_mut().unwrap().pod_ip = Some("10.44.0.99".into());
    cache.apply_pod(&twin);
    assert_eq!(cache.len(), 3);
    assert_eq!(cache.label_sets_for_test(), 2);
    let keep: HashSet<Box<str>> = ["reviews-v1-79d546878f-r5ps6.default".into()].into();
    cache.retain_pods(&keep);
    assert_eq!(cache.len(), 1);
    assert_eq!(cache.label_sets_for_test(), 1);
    let h = handler(cache);
    assert!(ask(&h, Some("10.44.0.99"), None).is_empty());
}

#[tokio::test]
async fn generate_fails_until_listed_and_refuses_other_templates() {
    let shared = Shared::fixed(PodCache::new());
    assert!(shared.is_synced());
    let h = handler(bookinfo());
    let instance = Instance {
        name: "attributes.istio-system".into(),
        template: Template::Kubernetes,
        fields: vec![(
            "destination_uid",
            FieldValue::Value(Value::from(
                "kubernetes://reviews-v1-79d546878f-r5ps6.default",
            )),
        )],
    };
    let generated = h.generate(&instance).await.unwrap();
    assert_eq!(
        text(&generated.outputs, "destination_workload_name").as_deref(),
        Some("reviews-v1")
    );
    assert_eq!(generated.denial, None);
    // Found by uid: one pod ever, no bound of the handler's own on caching.
    assert_eq!(generated.valid_duration, None);
    // Found by IP: the next pod may get the IP, so a verdict on it is cached briefly.
    let by_ip = Instance {
        fields: vec![(
            "source_ip",
            FieldValue::Value(Value::IpAddress("10.44.0.13".parse().unwrap())),
        )],
        ..instance.clone()
    };
    let generated = h.generate(&by_ip).await.unwrap();
    assert_eq!(
        text(&generated.outputs, "source_workload_name").as_deref(),
        Some("reviews-v1")
    );
    assert_eq!(generated.valid_duration, Some(crate::BY_IP_VALIDITY));
    let other = Instance {
        template: Template::Jwt,
        ..instance.clone()
    };
    assert_eq!(
        h.generate(&other).await.unwrap_err().kind,
        ErrorKind::InvalidInstance
    );
}
