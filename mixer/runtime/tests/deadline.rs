//! The per-handler deadline: a built-in handler that does not answer in time is cancelled
//! and its fail policy decides, for checks and for quota.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use mixer_adapter_api::{ErrorKind, QuotaArgs};
use mixer_runtime::{RuntimeOptions, Undecided};

const CONFIG: &str = r#"
kind: handler
metadata: {name: stuck, namespace: istio-system}
spec: {compiledAdapter: stalled}
---
kind: handler
metadata: {name: stuck-open, namespace: istio-system}
spec: {compiledAdapter: stalled, failPolicy: OPEN}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: instance
metadata: {name: requestcount, namespace: istio-system}
spec: {compiledTemplate: quota}
---
kind: rule
metadata: {name: ask-stuck, namespace: istio-system}
spec:
  match: request.path == "/closed"
  actions: [{handler: stuck, instances: [nothing, requestcount]}]
---
kind: rule
metadata: {name: ask-stuck-open, namespace: istio-system}
spec:
  match: request.path == "/open"
  actions: [{handler: stuck-open, instances: [nothing]}]
"#;

fn options() -> RuntimeOptions {
    RuntimeOptions {
        handler_timeout: Duration::from_millis(50),
        ..RuntimeOptions::default()
    }
}

// The paused clock jumps to the deadline: no real waiting, and the handler would otherwise
// never answer.
#[tokio::test(start_paused = true)]
async fn a_handler_past_its_deadline_is_cancelled_and_its_fail_policy_decides() {
    let snap = snapshot(CONFIG, &options());
    let before = STALLED_CANCELLED.load(Ordering::SeqCst);

    let closed = bag(&snap, &[("request.path", "/closed".into())]);
    let started = tokio::time::Instant::now();
    match decide(&snap, &closed).await {
        Err(Undecided::Handler { handler, error }) => {
            assert_eq!(handler.as_ref(), "stuck.handler.istio-system");
            assert_eq!(error.kind, ErrorKind::Timeout);
            assert!(error.retryable);
            assert!(error.message.contains("50ms"), "{error}");
        }
        other => panic!("a check past the deadline fails closed, got {other:?}"),
    }
    assert_eq!(started.elapsed(), Duration::from_millis(50));
    assert_eq!(STALLED_CANCELLED.load(Ordering::SeqCst), before + 1);

    // Failing open: allowed, and the answer is not to be reused.
    let open = bag(&snap, &[("request.path", "/open".into())]);
    let verdict = decide(&snap, &open).await.expect("failed open");
    assert!(verdict.is_allowed());
    assert_eq!(verdict.valid_duration, Duration::ZERO);
    assert_eq!(STALLED_CANCELLED.load(Ordering::SeqCst), before + 2);

    // Quota fails open by default: the whole amount granted, the call cancelled.
    let args = QuotaArgs {
        amount: 3,
        best_effort: false,
        deduplication_id: String::new(),
        limit_override: None,
    };
    let outcome = allocate(&snap, &closed, Some("requestcount"), &args)
        .await
        .expect("quota fails open");
    assert_eq!(outcome.result.granted_amount, 3);
    assert_eq!(STALLED_CANCELLED.load(Ordering::SeqCst), before + 3);
}
