//! The decision log in the runtime: a decision-log rule's instance is filled from the decision
//! (never sent by report evaluation), reaches its handler through the report queue, and
//! carries what the decision read even when the cache is off and the front end wants only the
//! verdict.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::{Broken, bag, snapshot_in_with};
use mixer_adapter_api::host::Params;
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, ReportHandler, Stability,
};
use mixer_config::AdapterRegistry;
use mixer_model::{FieldValue, Instance, StringMap, Template, Value};
use mixer_runtime::{
    CacheOptions, Decision, DecisionId, DecisionOutcome, RuntimeMetrics, RuntimeOptions, Snapshot,
    Wants,
};

/// Keeps every report instance it is sent.
struct Keeper(Arc<Mutex<Vec<Instance>>>);

static KEEPER: AdapterInfo = AdapterInfo {
    name: "keeper",
    description: "keeps what it is sent",
    templates: &[Template::LogEntry],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for Keeper {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &KEEPER
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(KeeperHandler(self.0.clone())))
    }
}

struct KeeperHandler(Arc<Mutex<Vec<Instance>>>);

impl Handler for KeeperHandler {
    fn as_report(&self) -> Option<&dyn ReportHandler> {
        Some(self)
    }
}

#[async_trait]
impl ReportHandler for KeeperHandler {
    async fn report(&self, instances: &[Instance]) -> Result<(), AdapterError> {
        self.0.lock().expect("lock").extend_from_slice(instances);
        Ok(())
    }
}

const CONFIG: &str = r#"
kind: handler
metadata: {name: deny, namespace: istio-system}
spec: {compiledAdapter: denier, params: {status: {code: 7, message: "no Bearer abc here"}}}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: deny-admin, namespace: istio-system}
spec:
  match: request.path == "/admin" && (request.headers["authorization"] | "") != ""
  actions: [{handler: deny, instances: [nothing]}]
---
kind: handler
metadata: {name: keep, namespace: istio-system}
spec: {compiledAdapter: keeper}
---
kind: instance
metadata: {name: decisions, namespace: istio-system}
spec: {compiledTemplate: decisionlog}
---
kind: rule
metadata: {name: log, namespace: istio-system}
spec:
  actions: [{handler: keep, instances: [decisions]}]
"#;

fn snapshot(kept: &Arc<Mutex<Vec<Instance>>>) -> Snapshot {
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(Keeper(kept.clone())));
    registry.register(Arc::new(mixer_adapter_denier::Denier));
    // The cache off: nothing would record the reads but the decision log.
    let options = RuntimeOptions {
        cache: CacheOptions {
            max_entries: 0,
            ..CacheOptions::default()
        },
        ..RuntimeOptions::default()
    };
    snapshot_in_with(&registry, CONFIG, &options, &RuntimeMetrics::unregistered())
}

fn variables(instance: &Instance) -> &[(Arc<str>, Value)] {
    match instance.field("variables") {
        // What the decision log sends: a record, read as any logentry's variables are.
        Some(FieldValue::Decision(record)) => record.entries(),
        other => panic!("no decision record: {other:?}"),
    }
}

fn variable<'a>(instance: &'a Instance, name: &str) -> Option<&'a Value> {
    variables(instance)
        .iter()
        .find(|(k, _)| &**k == name)
        .map(|(_, v)| v)
}

#[tokio::test]
async fn a_decision_reaches_the_log_handler_with_what_it_read_and_no_credential() {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let snap = snapshot(&kept);
    assert!(snap.logs_decisions());
    let headers = StringMap::from_pairs([("authorization", "Bearer abc"), ("x-user", "bob")]);
    let b = bag(
        &snap,
        &[
            ("request.path", Value::from("/admin")),
            ("request.headers", Value::from(headers)),
        ],
    );
    // A report sends nothing to the decision log: only decisions do.
    let report = mixer_runtime::report(&snap, &b).await;
    assert_eq!(report.queued, 0);

    let started = Instant::now();
    let checked = mixer_runtime::check(&snap, &b, Wants::Verdict)
        .await
        .expect("decided");
    assert!(!checked.verdict.is_allowed());
    let id = DecisionId::next();
    let decision = Decision {
        id,
        front_end: "test",
        started,
        outcome: DecisionOutcome::Verdict {
            verdict: &checked.verdict,
            cache: mixer_runtime::CacheTier::None,
        },
    };
    assert_eq!(snap.log_decision(&b, &decision), 1);
    snap.close_report_queues(Duration::from_secs(5)).await;
    let kept = kept.lock().expect("lock").clone();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let record = &kept[0];
    assert_eq!(record.template, Template::LogEntry);
    assert_eq!(&*record.name, "decisions.instance.istio-system");
    assert_eq!(
        variable(record, "decision_id"),
        Some(&Value::from(id.to_string().as_str()))
    );
    assert_eq!(
        variable(record, "rule"),
        Some(&Value::from("deny-admin.rule.istio-system"))
    );
    assert_eq!(
        variable(record, "handler"),
        Some(&Value::from("deny.handler.istio-system"))
    );
    assert_eq!(variable(record, "verdict"), Some(&Value::from("deny")));
    let Some(Value::StringMap(read)) = variable(record, "attributes") else {
        panic!("no attributes: {record:?}");
    };
    assert_eq!(read.get("request.path"), Some("/admin"));
    assert_eq!(read.get("request.headers[authorization]"), Some("***"));
    // Only what the decision read.
    assert_eq!(read.get("request.headers[x-user]"), None);
    // The denial's message quoted a bearer token: not written either.
    let text = format!("{record:?}");
    assert!(!text.contains("abc"), "{text}");
    // In name order, as the stdio handler writes a line: its sort then has nothing to move.
    let names: Vec<&str> = variables(record).iter().map(|(k, _)| &**k).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
}

/// `broken` fails open on `/open`, closed on `/closed`; every decision is logged, except
/// that `percentSampled: 0` keeps the allowances of `/quiet` out.
const FAILING: &str = r#"
kind: handler
metadata: {name: open, namespace: istio-system}
spec: {compiledAdapter: broken, failPolicy: OPEN}
---
kind: handler
metadata: {name: closed, namespace: istio-system}
spec: {compiledAdapter: broken, failPolicy: CLOSED}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: open, namespace: istio-system}
spec:
  match: request.path == "/open"
  actions: [{handler: open, instances: [nothing]}]
---
kind: rule
metadata: {name: closed, namespace: istio-system}
spec:
  match: request.path == "/closed"
  actions: [{handler: closed, instances: [nothing]}]
---
kind: handler
metadata: {name: keep, namespace: istio-system}
spec: {compiledAdapter: keeper}
---
kind: instance
metadata: {name: decisions, namespace: istio-system}
spec: {compiledTemplate: decisionlog}
---
kind: rule
metadata: {name: log, namespace: istio-system}
spec:
  match: request.path != "/quiet"
  actions: [{handler: keep, instances: [decisions]}]
---
kind: instance
metadata: {name: sampled, namespace: istio-system}
spec: {compiledTemplate: decisionlog, params: {percentSampled: 0, alwaysLogDenials: false}}
---
kind: rule
metadata: {name: quiet, namespace: istio-system}
spec:
  match: request.path == "/quiet"
  actions: [{handler: keep, instances: [sampled]}]
"#;

fn failing_snapshot(kept: &Arc<Mutex<Vec<Instance>>>, metrics: &RuntimeMetrics) -> Snapshot {
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(Keeper(kept.clone())));
    registry.register(Arc::new(Broken));
    snapshot_in_with(&registry, FAILING, &RuntimeOptions::default(), metrics)
}

/// Checks `path` and returns the record its decision gives.
async fn record_of(snap: &Snapshot, path: &str) -> Instance {
    let b = bag(snap, &[("request.path", Value::from(path))]);
    let checked = mixer_runtime::check(snap, &b, Wants::Verdict).await;
    let decision = Decision {
        id: DecisionId::next(),
        front_end: "test",
        started: Instant::now(),
        outcome: DecisionOutcome::of_check(&checked),
    };
    let mut records = snap.decision_records(&b, &decision);
    assert_eq!(records.len(), 1, "{records:?}");
    records.remove(0)
}

#[tokio::test]
async fn a_failed_handler_and_the_fail_policy_applied_are_in_the_record() {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let metrics = RuntimeMetrics::unregistered();
    let snap = failing_snapshot(&kept, &metrics);

    // Failing open: allowed, never reused, and the record names the handler and its error.
    let open = record_of(&snap, "/open").await;
    assert_eq!(variable(&open, "verdict"), Some(&Value::from("allow")));
    assert_eq!(variable(&open, "fail_policy"), Some(&Value::from("open")));
    let Some(Value::StringMap(errors)) = variable(&open, "handler_errors") else {
        panic!("no handler errors: {open:?}");
    };
    let error = errors
        .get("open.handler.istio-system")
        .expect("the handler");
    assert!(error.contains("backend down"), "{error}");
    assert_eq!(variable(&open, "cache"), Some(&Value::from("none")));

    // Failing closed: undecided, the same fields with the other policy.
    let closed = record_of(&snap, "/closed").await;
    assert_eq!(
        variable(&closed, "verdict"),
        Some(&Value::from("undecided"))
    );
    assert_eq!(
        variable(&closed, "fail_policy"),
        Some(&Value::from("close"))
    );
    let Some(Value::StringMap(errors)) = variable(&closed, "handler_errors") else {
        panic!("no handler errors: {closed:?}");
    };
    let error = errors
        .get("closed.handler.istio-system")
        .expect("the handler");
    assert!(error.contains("backend down"), "{error}");
}

#[tokio::test]
async fn decisions_sampled_out_are_counted_by_rule() {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let metrics = RuntimeMetrics::unregistered();
    let snap = failing_snapshot(&kept, &metrics);
    let sampled_out = |rule: &str| {
        metrics
            .decision_log_sampled_out
            .with_label_values(&[rule])
            .get()
    };
    let b = bag(&snap, &[("request.path", Value::from("/quiet"))]);
    for _ in 0..3 {
        let checked = mixer_runtime::check(&snap, &b, Wants::Verdict).await;
        let decision = Decision {
            id: DecisionId::next(),
            front_end: "test",
            started: Instant::now(),
            outcome: DecisionOutcome::of_check(&checked),
        };
        assert_eq!(snap.log_decision(&b, &decision), 0);
    }
    assert_eq!(sampled_out("quiet.rule.istio-system"), 3);
    // A rule whose match does not hold samples nothing out.
    assert_eq!(sampled_out("log.rule.istio-system"), 0);
    record_of(&snap, "/open").await;
    assert_eq!(sampled_out("log.rule.istio-system"), 0);
}

/// A quota charged after each check, by a handler that never answers and fails open.
const QUOTA_FAILING: &str = r#"
kind: handler
metadata: {name: stuck-open, namespace: istio-system}
spec: {compiledAdapter: stalled, failPolicy: OPEN}
---
kind: instance
metadata: {name: requestcount, namespace: istio-system}
spec: {compiledTemplate: quota}
---
kind: rule
metadata: {name: count, namespace: istio-system}
spec:
  actions: [{handler: stuck-open, instances: [requestcount]}]
---
kind: handler
metadata: {name: keep, namespace: istio-system}
spec: {compiledAdapter: keeper}
---
kind: instance
metadata: {name: decisions, namespace: istio-system}
spec: {compiledTemplate: decisionlog}
---
kind: rule
metadata: {name: log, namespace: istio-system}
spec:
  actions: [{handler: keep, instances: [decisions]}]
"#;

// The paused clock jumps to the handler's deadline: no real waiting.
#[tokio::test(start_paused = true)]
async fn a_quota_handler_that_failed_open_is_in_the_record() {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(Keeper(kept.clone())));
    registry.register(Arc::new(common::Stalled));
    let options = RuntimeOptions {
        handler_timeout: Duration::from_millis(50),
        ..RuntimeOptions::default()
    };
    let snap = snapshot_in_with(
        &registry,
        QUOTA_FAILING,
        &options,
        &RuntimeMetrics::unregistered(),
    );
    let b = bag(&snap, &[("request.path", Value::from("/"))]);
    let charged = mixer_runtime::check_with_quota(&snap, &b, Wants::Verdict)
        .await
        .expect("failed open");
    let mixer_runtime::QuotaAfterCheck::Checked(checked) = charged else {
        panic!("granted without a limit, got {charged:?}");
    };
    assert!(checked.verdict.is_allowed());
    let decision = Decision {
        id: DecisionId::next(),
        front_end: "test",
        started: Instant::now(),
        outcome: DecisionOutcome::Verdict {
            verdict: &checked.verdict,
            cache: checked.tier,
        },
    };
    let records = snap.decision_records(&b, &decision);
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(variable(record, "fail_policy"), Some(&Value::from("open")));
    let Some(Value::StringMap(errors)) = variable(record, "handler_errors") else {
        panic!("no handler errors: {record:?}");
    };
    let error = errors
        .get("stuck-open.handler.istio-system")
        .expect("the quota handler");
    assert!(error.contains("50ms"), "{error}");
}
