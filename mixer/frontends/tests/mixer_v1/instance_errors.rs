//! Instances that cannot be built from the request, answered as Istio 1.4 answers them
//! (istio/istio release-1.4 `mixer/pkg/runtime/dispatcher/session.go` and
//! `mixer/pkg/api/grpcServer.go`): a Check fails INTERNAL naming the attribute, so the proxy's
//! network fail policy applies; a Report sends the instances it can build, not the one it
//! cannot, and fails UNKNOWN.

use std::sync::{Arc, Mutex};

use mixer_model::Value;
use tonic::Code;

use super::{check_request, common, runtime_with, serve};
use mixer_frontends::mixer_v1::{GLOBAL_WORD_COUNT, encode};
use mixer_proto::istio::mixer::v1 as pb;

const CONFIG: &str = r#"
kind: handler
metadata: {name: allow, namespace: istio-system}
spec: {compiledAdapter: noop}
---
kind: handler
metadata: {name: recorder, namespace: istio-system}
spec: {compiledAdapter: recorder}
---
kind: instance
metadata: {name: principal, namespace: istio-system}
spec:
  compiledTemplate: listentry
  params: {value: source.principal}
---
kind: rule
metadata: {name: check-principal, namespace: istio-system}
spec:
  match: request.method == "GET"
  actions: [{handler: allow, instances: [principal]}]
---
kind: instance
metadata: {name: accesslog, namespace: istio-system}
spec:
  compiledTemplate: logentry
  params:
    timestamp: request.time
    variables: {method: request.method | "none"}
---
kind: instance
metadata: {name: always, namespace: istio-system}
spec:
  compiledTemplate: logentry
  params:
    variables: {method: request.method | "none"}
---
kind: rule
metadata: {name: log-all, namespace: istio-system}
spec:
  actions: [{handler: recorder, instances: [accesslog, always]}]
"#;

#[tokio::test]
async fn a_check_whose_instance_cannot_be_built_fails_internal_naming_the_attribute() {
    let records = Arc::new(Mutex::new(Vec::new()));
    let runtime = runtime_with(CONFIG, records);
    runtime.reload().expect("config loads");
    let metrics = runtime.metrics().clone();
    let mut h = serve(runtime).await;

    let err = h
        .client
        .check(check_request(
            &[("request.method", Value::from("GET"))],
            GLOBAL_WORD_COUNT,
        ))
        .await
        .expect_err("not decided");
    assert_eq!(err.code(), Code::Internal);
    assert!(
        err.message().contains("principal.instance.istio-system")
            && err.message().contains("source.principal"),
        "{}",
        err.message()
    );
    assert_eq!(
        metrics
            .instance_errors
            .with_label_values(&["principal.instance.istio-system"])
            .get(),
        1
    );
    // With the attribute the same check is decided.
    let answer = h
        .client
        .check(check_request(
            &[
                ("request.method", Value::from("GET")),
                (
                    "source.principal",
                    Value::from("spiffe://cluster.local/ns/a/sa/b"),
                ),
            ],
            GLOBAL_WORD_COUNT,
        ))
        .await
        .expect("decided")
        .into_inner();
    assert_eq!(
        answer
            .precondition
            .expect("precondition")
            .status
            .expect("status")
            .code,
        0
    );
}

#[tokio::test]
async fn a_report_sends_what_it_can_build_and_fails_unknown() {
    let records = Arc::new(Mutex::new(Vec::new()));
    let runtime = runtime_with(CONFIG, records.clone());
    runtime.reload().expect("config loads");
    let metrics = runtime.metrics().clone();
    let mut h = serve(runtime).await;

    // No request.time: the access log's timestamp cannot be evaluated.
    let method = Value::from("POST");
    let request = pb::ReportRequest {
        attributes: vec![encode([("request.method", &method)], GLOBAL_WORD_COUNT)],
        global_word_count: GLOBAL_WORD_COUNT as u32,
        ..Default::default()
    };
    let err = h
        .client
        .report(request)
        .await
        .expect_err("an instance failed");
    assert_eq!(err.code(), Code::Unknown);
    assert!(
        err.message().contains("accesslog.instance.istio-system")
            && err.message().contains("request.time"),
        "{}",
        err.message()
    );
    // The record's other instance was sent; the one that could not be built was not.
    let got = common::wait_recorded(&records, 1).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let names: Vec<String> = records
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|i| i.name.to_string())
        .collect();
    assert_eq!(names, ["always.instance.istio-system"]);
    assert_eq!(
        metrics
            .instance_errors
            .with_label_values(&["accesslog.instance.istio-system"])
            .get(),
        1
    );
}
