//! Report work moves to the low-priority report threads while checks are being served, and
//! stays where it arrives when they are not.

mod common;

use std::sync::Arc;

use common::*;
use mixer_config::{ConfigOptions, SourceFile};
use mixer_model::Value;
use mixer_runtime::{ConfigOrigin, REPORT_NICE, Runtime, RuntimeMetrics, RuntimeOptions};

const CONFIG: &str = r#"
kind: handler
metadata: {name: deny, namespace: istio-system}
spec: {compiledAdapter: denier, params: {status: {code: 7}}}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: deny-all, namespace: istio-system}
spec:
  actions: [{handler: deny, instances: [nothing]}]
"#;

fn runtime(report_threads: usize) -> Arc<Runtime> {
    let runtime = Arc::new(Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile {
            name: "t.yaml".into(),
            text: CONFIG.into(),
        }]),
        registry(),
        ConfigOptions::default(),
        RuntimeOptions {
            report_threads,
            ..RuntimeOptions::default()
        },
        RuntimeMetrics::unregistered(),
    ));
    runtime.reload().expect("valid config");
    runtime
}

/// The name and nice value of the thread the work ran on.
async fn where_it_ran(runtime: &Runtime) -> (Option<String>, i32) {
    runtime
        .run_report(async {
            (
                std::thread::current().name().map(str::to_owned),
                rustix::process::getpriority_process(None).expect("priority"),
            )
        })
        .await
        .expect("report threads running")
}

#[tokio::test]
async fn reports_yield_to_checks_only_while_checks_are_served() {
    let runtime = runtime(1);
    let here = std::thread::current().name().map(str::to_owned);
    let own_nice = rustix::process::getpriority_process(None).expect("priority");

    let (thread, nice) = where_it_ran(&runtime).await;
    assert_eq!(
        (thread, nice),
        (here.clone(), own_nice),
        "no checks yet: inline"
    );

    let snapshot = runtime.snapshot();
    let checked = snapshot
        .check_cached(&bag(&snapshot, &[("request.method", Value::from("GET"))]))
        .await
        .expect("decided");
    assert!(!checked.verdict.is_allowed());

    let (thread, nice) = where_it_ran(&runtime).await;
    assert_eq!(thread.as_deref(), Some("mixer-report"));
    assert_eq!(nice, own_nice + REPORT_NICE);
}

#[tokio::test]
async fn without_report_threads_reports_run_inline_even_during_checks() {
    let runtime = runtime(0);
    let snapshot = runtime.snapshot();
    snapshot
        .check_cached(&bag(&snapshot, &[]))
        .await
        .expect("decided");
    let (thread, _) = where_it_ran(&runtime).await;
    assert_eq!(thread, std::thread::current().name().map(str::to_owned));
}
