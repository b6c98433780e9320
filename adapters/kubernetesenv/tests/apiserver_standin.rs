//! kubernetesenv against a stand-in API server (see `standin/mod.rs`: no Kubernetes API
//! server can be installed where these tests run, so a local HTTP server answers the list
//! and watch requests with Kubernetes JSON). The handler is built as the mixer builds it,
//! from params naming a kubeconfig file that points at the stand-in; `kube`'s real client
//! and watcher do the rest.

mod standin;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::host::decode_params;
use mixer_adapter_api::{Adapter, AttributeHandler, BuildContext, ErrorKind, Exposition, Handler};
use mixer_adapter_kubernetesenv::{KubernetesEnv, KubernetesEnvHandler, KubernetesEnvParams};
use mixer_model::{FieldValue, Instance, Template, Value};
use standin::{StandIn, fixture, items};

fn bookinfo() -> Vec<serde_json::Value> {
    let mut objects = items("pods.json");
    objects.extend(items("replicasets.json"));
    objects
}

fn build(standin: &StandIn, dir: &tempfile::TempDir) -> Arc<KubernetesEnvHandler> {
    build_with(standin.kubeconfig(dir.path()))
}

fn build_with(path: std::path::PathBuf) -> Arc<KubernetesEnvHandler> {
    let params: KubernetesEnvParams = decode_params(&serde_json::json!({
        "kubeconfigPath": path.to_str().unwrap(),
        "cacheRefreshDuration": "30s",
    }))
    .unwrap();
    let config = KubernetesEnv.compile(params).expect("valid params");
    let ctx = BuildContext {
        handler_name: "kubernetesenv.istio-system".into(),
    };
    KubernetesEnv.build_handler(&config, &ctx).expect("built")
}

/// Waits, bounded, until `cond` holds.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..200 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("not within 5s: {what}");
}

fn instance(src: (&str, Option<&str>), dst: &str) -> Instance {
    let mut fields = vec![
        ("source_uid", FieldValue::Value(Value::from(src.0))),
        ("destination_uid", FieldValue::Value(Value::from(dst))),
        ("destination_port", FieldValue::Value(Value::Int64(9080))),
    ];
    if let Some(ip) = src.1 {
        fields.push((
            "source_ip",
            FieldValue::Value(Value::IpAddress(ip.parse().unwrap())),
        ));
    }
    Instance {
        name: "attributes.istio-system".into(),
        template: Template::Kubernetes,
        fields,
    }
}

async fn outputs(h: &KubernetesEnvHandler, i: &Instance) -> Vec<(&'static str, Value)> {
    h.generate(i).await.expect("generated").outputs
}

fn text(out: &[(&'static str, Value)], name: &str) -> Option<String> {
    out.iter().find(|(n, _)| *n == name).map(|(_, v)| match v {
        Value::String(s) => s.to_string(),
        other => format!("{other:?}"),
    })
}

fn name_at(h: &KubernetesEnvHandler, ip: &str) -> Option<String> {
    let ip: IpAddr = ip.parse().unwrap();
    let out = h.lookup(&mixer_model::KubernetesInstance {
        name: "a",
        source_uid: None,
        source_ip: Some(ip),
        destination_uid: None,
        destination_ip: None,
        destination_port: None,
    });
    text(&out, "source_pod_name")
}

#[tokio::test]
async fn lists_then_looks_up_by_uid_and_ip_with_deployment_workloads() {
    let standin = StandIn::start(bookinfo()).await;
    let dir = tempfile::tempdir().unwrap();
    let h = build(&standin, &dir);
    until("listed", || h.shared().is_synced()).await;
    let out = outputs(
        &h,
        &instance(
            ("kubernetes://productpage-v1-596598f447-nn64q.default", None),
            "kubernetes://reviews-v1-79d546878f-r5ps6.default",
        ),
    )
    .await;
    assert_eq!(
        text(&out, "source_workload_name").as_deref(),
        Some("productpage-v1")
    );
    assert_eq!(
        text(&out, "destination_workload_name").as_deref(),
        Some("reviews-v1")
    );
    assert_eq!(
        text(&out, "destination_workload_uid").as_deref(),
        Some("istio://default/workloads/reviews-v1")
    );
    assert_eq!(
        text(&out, "destination_container_name").as_deref(),
        Some("reviews")
    );
    // By IP when the uid is empty, as the chart's `source_uid: source.uid | ""` sends it.
    let by_ip = outputs(&h, &instance(("", Some("10.44.0.13")), "")).await;
    assert_eq!(
        text(&by_ip, "source_pod_name").as_deref(),
        Some("reviews-v1-79d546878f-r5ps6")
    );
    let mut metrics = String::new();
    h.render(&mut metrics);
    assert!(
        metrics.contains("mixer_kubernetesenv_pods{handler=\"kubernetesenv.istio-system\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("mixer_kubernetesenv_synced{handler=\"kubernetesenv.istio-system\"} 1"),
        "{metrics}"
    );
    assert_eq!(h.readiness_note(), None);
}

#[tokio::test]
async fn watch_events_add_delete_and_replace_a_pod_at_the_same_ip() {
    let standin = StandIn::start(bookinfo()).await;
    let dir = tempfile::tempdir().unwrap();
    let h = build(&standin, &dir);
    until("listed", || h.shared().is_synced()).await;

    standin.change("ADDED", fixture("pod-ratings.json"));
    until("ratings added", || name_at(&h, "10.44.0.14").is_some()).await;
    assert_eq!(
        name_at(&h, "10.44.0.14").as_deref(),
        Some("ratings-v1-6c9dbf6b45-5bq8x")
    );

    standin.change("DELETED", fixture("pod-ratings.json"));
    until("ratings deleted", || name_at(&h, "10.44.0.14").is_none()).await;

    // productpage terminates; reviews-v2 gets its IP before productpage's deletion arrives.
    standin.change("MODIFIED", fixture("pod-productpage-terminating.json"));
    standin.change("ADDED", fixture("pod-reviews-v2-same-ip.json"));
    until("reviews-v2 at 10.44.0.12", || {
        name_at(&h, "10.44.0.12").as_deref() == Some("reviews-v2-7d79d5bd5d-x2kqp")
    })
    .await;
    standin.change("DELETED", fixture("pod-productpage-terminating.json"));
    until("productpage gone", || {
        h.shared().cache.read().unwrap().len() == 2
    })
    .await;
    assert_eq!(
        name_at(&h, "10.44.0.12").as_deref(),
        Some("reviews-v2-7d79d5bd5d-x2kqp")
    );
}

#[tokio::test]
async fn the_cache_keeps_serving_when_the_api_server_goes_away() {
    let standin = StandIn::start(bookinfo()).await;
    let dir = tempfile::tempdir().unwrap();
    let h = build(&standin, &dir);
    until("listed", || h.shared().is_synced()).await;
    standin.go_away();
    until("failure seen", || h.shared().is_failing()).await;
    let out = outputs(
        &h,
        &instance(
            ("kubernetes://productpage-v1-596598f447-nn64q.default", None),
            "",
        ),
    )
    .await;
    assert_eq!(
        text(&out, "source_workload_name").as_deref(),
        Some("productpage-v1")
    );
    let note = h.readiness_note().expect("a readiness note");
    assert!(
        note.contains("API server unreachable") && note.contains("serves the 2 pods"),
        "{note}"
    );
    let mut metrics = String::new();
    h.render(&mut metrics);
    assert!(
        metrics
            .contains("mixer_kubernetesenv_apiserver_up{handler=\"kubernetesenv.istio-system\"} 0"),
        "{metrics}"
    );
    assert!(!metrics.contains("resource=\"pods\"} 0"), "{metrics}");
}

#[tokio::test]
async fn before_the_first_list_lookups_fail_for_the_fail_policy() {
    let standin = StandIn::start(bookinfo()).await;
    standin.go_away();
    let dir = tempfile::tempdir().unwrap();
    let h = build(&standin, &dir);
    until("failure seen", || h.shared().is_failing()).await;
    let err = h
        .generate(&instance(
            ("kubernetes://productpage-v1-596598f447-nn64q.default", None),
            "",
        ))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Unavailable, "{err:?}");
    assert!(h.readiness_note().unwrap().contains("unreachable"));
}

#[test]
fn a_kubeconfig_path_that_is_not_a_kubeconfig_is_a_param_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, "clusters: [").unwrap();
    let params: KubernetesEnvParams =
        decode_params(&serde_json::json!({"kubeconfig_path": path.to_str().unwrap()})).unwrap();
    let errors = KubernetesEnv.compile(params).unwrap_err();
    assert_eq!(errors[0].path, "kubeconfigPath", "{errors:?}");
    let missing: KubernetesEnvParams =
        decode_params(&serde_json::json!({"kubeconfigPath": "/nonexistent/kubeconfig"})).unwrap();
    assert!(KubernetesEnv.compile(missing).is_err());
    let empty: KubernetesEnvParams = decode_params(&serde_json::Value::Null).unwrap();
    assert!(
        KubernetesEnv.compile(empty).is_ok(),
        "the chart's empty params: in-cluster"
    );
}

#[tokio::test]
async fn the_kubeconfigs_token_is_sent_and_a_refused_one_is_a_note() {
    let standin = StandIn::start(bookinfo()).await;
    standin.require_token("standin-token");
    let dir = tempfile::tempdir().unwrap();
    let h = build_with(standin.kubeconfig_with_token(dir.path(), Some("standin-token")));
    until("listed with the token", || h.shared().is_synced()).await;

    let other = tempfile::tempdir().unwrap();
    let refused = build_with(standin.kubeconfig_with_token(other.path(), Some("wrong")));
    until("refusal seen", || refused.shared().is_failing()).await;
    assert!(!refused.shared().is_synced());
    let note = refused.readiness_note().expect("a note");
    assert!(
        note.contains("401") || note.contains("Unauthorized"),
        "{note}"
    );
}
