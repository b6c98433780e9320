//! Report work moves to the low-priority report threads while checks are being served, and
//! stays where it arrives when they are not.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use mixer_adapter_api::host::Params;
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, ReportHandler, Stability,
};
use mixer_config::{ConfigOptions, SourceFile};
use mixer_model::{Instance, Template, Value};
use mixer_runtime::{ConfigOrigin, REPORT_NICE, Runtime, RuntimeMetrics, RuntimeOptions};

/// Notes the name of the thread each report batch is delivered on.
#[derive(Clone, Default)]
struct Threads(Arc<Mutex<Vec<Option<String>>>>);

static THREADS: AdapterInfo = AdapterInfo {
    name: "threads",
    description: "notes the delivering thread",
    templates: &[Template::ReportNothing],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for Threads {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &THREADS
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(self.clone()))
    }
}

impl Handler for Threads {
    fn as_report(&self) -> Option<&dyn ReportHandler> {
        Some(self)
    }
}

#[async_trait]
impl ReportHandler for Threads {
    async fn report(&self, _: &[Instance]) -> Result<(), AdapterError> {
        let name = std::thread::current().name().map(str::to_owned);
        self.0.lock().expect("lock").push(name);
        Ok(())
    }
}

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
---
kind: handler
metadata: {name: threads, namespace: istio-system}
spec: {compiledAdapter: threads}
---
kind: instance
metadata: {name: reported, namespace: istio-system}
spec: {compiledTemplate: reportnothing}
---
kind: rule
metadata: {name: report-all, namespace: istio-system}
spec:
  actions: [{handler: threads, instances: [reported]}]
"#;

fn runtime(report_threads: usize) -> Arc<Runtime> {
    runtime_noting(report_threads, Threads::default())
}

fn runtime_noting(report_threads: usize, threads: Threads) -> Arc<Runtime> {
    let mut registry = registry();
    registry.register(Arc::new(threads));
    let runtime = Arc::new(Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile {
            name: "t.yaml".into(),
            text: CONFIG.into(),
        }]),
        registry,
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
    let checked = mixer_runtime::check(
        &snapshot,
        &bag(&snapshot, &[("request.method", Value::from("GET"))]),
        mixer_runtime::Wants::Reads,
    )
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
    mixer_runtime::check(&snapshot, &bag(&snapshot, &[]), mixer_runtime::Wants::Reads)
        .await
        .expect("decided");
    let (thread, _) = where_it_ran(&runtime).await;
    assert_eq!(thread, std::thread::current().name().map(str::to_owned));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn records_queued_on_the_report_threads_are_delivered_from_the_serving_runtime() {
    let threads = Threads::default();
    let runtime = runtime_noting(1, threads.clone());
    let snapshot = runtime.snapshot();
    mixer_runtime::check(&snapshot, &bag(&snapshot, &[]), mixer_runtime::Wants::Reads)
        .await
        .expect("decided");
    let queued = runtime
        .run_report(async move {
            let on = std::thread::current().name().map(str::to_owned);
            (
                on,
                mixer_runtime::report(&snapshot, &bag(&snapshot, &[])).await,
            )
        })
        .await
        .expect("report threads running");
    assert_eq!(queued.0.as_deref(), Some("mixer-report"));
    assert_eq!((queued.1.queued, queued.1.dropped), (1, 0));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let delivered_on = loop {
        if let Some(first) = threads.0.lock().expect("lock").first().cloned() {
            break first;
        }
        assert!(tokio::time::Instant::now() < deadline, "never delivered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // The queue's worker (and any connection a handler opens from it) stays on the runtime
    // the snapshot was built on, away from the low-priority threads.
    assert_ne!(delivered_on.as_deref(), Some("mixer-report"));
}
