//! The dispatcher end to end over real config: matches, instances, verdicts, referenced
//! attributes, namespaces, match-error and fail policies.

mod common;

use common::*;
use mixer_config::MatchErrorPolicy;
use mixer_model::{Code, ListEntryInstance, Presence, Value, Variety};
use mixer_runtime::{RuntimeMetrics, RuntimeOptions};

const CONFIG: &str = r#"
kind: handler
metadata: {name: deny, namespace: istio-system}
spec:
  compiledAdapter: denier
  params: {status: {code: 7, message: "no bob"}, validDuration: 3s, validUseCount: 5}
---
kind: handler
metadata: {name: allow, namespace: istio-system}
spec: {compiledAdapter: noop}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: instance
metadata: {name: user, namespace: istio-system}
spec:
  compiledTemplate: listentry
  params: {value: 'request.headers["x-user"] | "nobody"'}
---
kind: rule
metadata: {name: deny-bob, namespace: istio-system}
spec:
  match: request.headers["x-user"] == "bob"
  actions: [{handler: deny, instances: [nothing]}]
---
kind: rule
metadata: {name: list-users, namespace: istio-system}
spec:
  match: request.method == "GET"
  actions: [{handler: allow, instances: [user]}]
  requestHeaderOperations:
  - name: x-seen-by
    values: ['"mixer"']
"#;

#[tokio::test]
async fn denial_wins_and_validity_is_the_minimum() {
    let snap = snapshot(CONFIG, &RuntimeOptions::default());
    let b = bag(
        &snap,
        &[
            ("request.headers", map(&[("x-user", "bob")])),
            ("request.method", Value::from("GET")),
        ],
    );
    let v = decide(&snap, &b).await.expect("decided");
    assert_eq!(v.status.code, Code::PermissionDenied);
    assert_eq!(v.status.message, "no bob");
    assert_eq!(v.denied_by.as_deref(), Some("deny.handler.istio-system"));
    assert_eq!(v.istio_message(), "deny.handler.istio-system:no bob");
    assert_eq!(v.valid_duration, std::time::Duration::from_secs(3));
    assert_eq!(v.valid_use_count, 5);
    let names: Vec<&str> = v.matched_rules.iter().map(|r| r.as_ref()).collect();
    assert_eq!(
        names,
        ["deny-bob.rule.istio-system", "list-users.rule.istio-system"]
    );
}

#[tokio::test]
async fn allowed_request_gets_header_operations_and_instances() {
    let snap = snapshot(CONFIG, &RuntimeOptions::default());
    let b = bag(
        &snap,
        &[
            ("request.headers", map(&[("x-user", "amy")])),
            ("request.method", Value::from("GET")),
        ],
    );
    let v = decide(&snap, &b).await.expect("decided");
    assert!(v.is_allowed());
    assert_eq!(v.request_header_ops.len(), 1);
    assert_eq!(v.request_header_ops[0].value, "mixer");
    let eval = mixer_runtime::evaluate(&snap, &b, Variety::Check);
    assert_eq!(eval.dispatches.len(), 1);
    assert_eq!(
        ListEntryInstance::of(&eval.dispatches[0].instance).and_then(|l| l.value),
        Some(&Value::from("amy"))
    );
}

#[tokio::test]
async fn referenced_attributes_are_exactly_what_was_read() {
    let snap = snapshot(CONFIG, &RuntimeOptions::default());
    let voc = snap.vocabulary().clone();
    let headers = voc.lookup("request.headers").expect("declared");
    let method = voc.lookup("request.method").expect("declared");
    let path = voc.lookup("request.path").expect("declared");
    let b = bag(
        &snap,
        &[
            (
                "request.headers",
                map(&[("x-user", "amy"), ("x-other", "1")]),
            ),
            ("request.method", Value::from("POST")),
            ("request.path", Value::from("/unread")),
        ],
    );
    let v = decide(&snap, &b).await.expect("decided");
    assert_eq!(
        v.referenced.find(headers, Some("x-user")),
        Some(Presence::Exact)
    );
    assert_eq!(v.referenced.find(method, None), Some(Presence::Exact));
    assert_eq!(v.referenced.find(headers, Some("x-other")), None);
    assert_eq!(v.referenced.find(headers, None), None);
    assert_eq!(v.referenced.find(path, None), None);

    let b = bag(&snap, &[("request.method", Value::from("GET"))]);
    let v = decide(&snap, &b).await.expect("decided");
    assert_eq!(v.referenced.find(headers, None), Some(Presence::Absent));
}

const MATCH_ERRORS: &str = r#"
kind: handler
metadata: {name: deny, namespace: istio-system}
spec: {compiledAdapter: denier}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: needs-header, namespace: istio-system}
spec:
  match: source.principal.startsWith("mallory")
  actions: [{handler: deny, instances: [nothing]}]
---
kind: rule
metadata: {name: strict, namespace: istio-system}
spec:
  match: request.host == "strict.example"
  matchErrorPolicy: DENY
  actions: [{handler: deny, instances: [nothing]}]
"#;

#[tokio::test]
async fn match_errors_are_no_match_by_default_and_can_deny() {
    let snap = snapshot(MATCH_ERRORS, &RuntimeOptions::default());
    // request.host present so the strict rule evaluates; source.principal absent makes
    // needs-header fail.
    let b = bag(&snap, &[("request.host", Value::from("other.example"))]);
    let v = decide(&snap, &b).await.expect("decided");
    assert!(v.is_allowed(), "Istio 1.4: a failed match is no match");
    let eval = mixer_runtime::evaluate(&snap, &b, Variety::Check);
    assert_eq!(eval.match_failures.len(), 1);
    assert_eq!(eval.match_failures[0].policy, MatchErrorPolicy::NoMatch);

    // The per-rule DENY applies when its own match fails.
    let b = bag(&snap, &[("source.principal", Value::from("amy"))]);
    let v = decide(&snap, &b).await.expect("decided");
    assert_eq!(v.status.code, Code::PermissionDenied);
    assert!(v.status.message.contains("strict"), "{}", v.status.message);

    // The global setting applies to rules that say nothing.
    let strict = RuntimeOptions {
        match_error_policy: MatchErrorPolicy::Deny,
        ..RuntimeOptions::default()
    };
    let snap = snapshot(MATCH_ERRORS, &strict);
    let b = bag(&snap, &[("request.host", Value::from("other.example"))]);
    let v = decide(&snap, &b).await.expect("decided");
    assert_eq!(v.status.code, Code::PermissionDenied);
    assert!(
        v.status.message.contains("needs-header"),
        "{}",
        v.status.message
    );
}

/// Log lines written to memory.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A match that fails for every request like this one would otherwise log a line per request:
/// its first failure is logged, every failure is counted.
#[test]
fn a_failing_match_is_logged_once_and_counted_every_time() {
    let metrics = RuntimeMetrics::unregistered();
    let snap = snapshot_metered(MATCH_ERRORS, &metrics);
    let b = bag(&snap, &[("request.host", Value::from("other.example"))]);
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        for _ in 0..5 {
            assert_eq!(
                mixer_runtime::evaluate(&snap, &b, Variety::Check)
                    .match_failures
                    .len(),
                1
            );
        }
    });
    let text = String::from_utf8(captured.0.lock().expect("not poisoned").clone()).expect("utf-8");
    assert_eq!(text.matches("rule match failed").count(), 1, "{text}");
    assert!(text.contains("needs-header") && text.contains("mixer_rule_match_errors_total"));
    let failures = metrics
        .match_errors
        .with_label_values(&["needs-header.rule.istio-system", "no_match"])
        .get();
    assert_eq!(failures, 5);
}

const FAILING: &str = r#"
kind: handler
metadata: {name: closed, namespace: istio-system}
spec: {compiledAdapter: broken}
---
kind: handler
metadata: {name: open, namespace: istio-system}
spec: {compiledAdapter: broken, failPolicy: OPEN}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: to-closed, namespace: istio-system}
spec:
  match: request.method == "POST"
  actions: [{handler: closed, instances: [nothing]}]
---
kind: rule
metadata: {name: to-open, namespace: istio-system}
spec:
  match: request.method == "GET"
  actions: [{handler: open, instances: [nothing]}]
"#;

#[tokio::test]
async fn failing_handlers_follow_their_fail_policy() {
    let snap = snapshot(FAILING, &RuntimeOptions::default());
    let err = decide(
        &snap,
        &bag(&snap, &[("request.method", Value::from("POST"))]),
    )
    .await
    .expect_err("cannot decide");
    assert!(
        matches!(&err, mixer_runtime::Undecided::Handler { handler, .. } if handler.as_ref() == "closed.handler.istio-system"),
        "{err}"
    );
    let v = decide(
        &snap,
        &bag(&snap, &[("request.method", Value::from("GET"))]),
    )
    .await
    .expect("fails open");
    assert!(v.is_allowed());
    assert_eq!(
        v.valid_use_count, 0,
        "a fail-open answer must not be cached"
    );
}

const NAMESPACES: &str = r#"
kind: handler
metadata: {name: deny, namespace: istio-system}
spec: {compiledAdapter: denier}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: shop-only, namespace: shop}
spec:
  actions: [{handler: deny.istio-system, instances: [nothing.istio-system]}]
"#;

#[tokio::test]
async fn rules_outside_the_default_namespace_apply_to_their_namespace_only() {
    let snap = snapshot(NAMESPACES, &RuntimeOptions::default());
    let inbound_shop = bag(&snap, &[("destination.namespace", Value::from("shop"))]);
    assert!(
        !decide(&snap, &inbound_shop)
            .await
            .expect("decided")
            .is_allowed()
    );
    let inbound_other = bag(&snap, &[("destination.namespace", Value::from("bank"))]);
    assert!(
        decide(&snap, &inbound_other)
            .await
            .expect("decided")
            .is_allowed()
    );
    let outbound_from_shop = bag(
        &snap,
        &[
            ("context.reporter.kind", Value::from("outbound")),
            ("source.namespace", Value::from("shop")),
            ("destination.namespace", Value::from("bank")),
        ],
    );
    assert!(
        !decide(&snap, &outbound_from_shop)
            .await
            .expect("decided")
            .is_allowed()
    );
}

#[tokio::test]
async fn unchanged_handlers_are_reused_across_snapshots() {
    let first = snapshot(CONFIG, &RuntimeOptions::default());
    let changed = CONFIG.replace("no bob", "no bob, really");
    let built = snapshot_after(&changed, &RuntimeOptions::default(), Some(&first));
    let second = &built.snapshot;
    let find = |s: &mixer_runtime::Snapshot, name: &str| {
        s.handlers
            .iter()
            .find(|h| h.name.as_ref() == name)
            .expect("handler")
            .handler
            .clone()
    };
    assert!(std::sync::Arc::ptr_eq(
        &find(&first, "allow.handler.istio-system"),
        &find(second, "allow.handler.istio-system")
    ));
    assert!(!std::sync::Arc::ptr_eq(
        &find(&first, "deny.handler.istio-system"),
        &find(second, "deny.handler.istio-system")
    ));
}

/// A handler whose config changed and one that stayed, behind the one rule that calls both.
fn closing_config(version: &str) -> String {
    format!(
        r#"
kind: handler
metadata: {{name: changing, namespace: istio-system}}
spec: {{compiledAdapter: closing, params: {{version: "{version}"}}}}
---
kind: handler
metadata: {{name: staying, namespace: istio-system}}
spec: {{compiledAdapter: closing}}
---
kind: instance
metadata: {{name: nothing, namespace: istio-system}}
spec: {{compiledTemplate: checknothing}}
---
kind: rule
metadata: {{name: both, namespace: istio-system}}
spec:
  actions: [{{handler: changing, instances: [nothing]}}, {{handler: staying, instances: [nothing]}}]
"#
    )
}

async fn closes_within(name: &str, want: usize) {
    let start = std::time::Instant::now();
    while closes(name) < want {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(5),
            "{name} closed {} times, wanted {want}",
            closes(name)
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert_eq!(closes(name), want, "{name} closed more than {want} times");
}

#[tokio::test]
async fn a_retired_handler_closes_when_the_last_snapshot_holding_it_drops() {
    const CHANGING: &str = "changing.handler.istio-system";
    const STAYING: &str = "staying.handler.istio-system";
    let options = RuntimeOptions::default();
    let first = std::sync::Arc::new(snapshot(&closing_config("1"), &options));
    // A request still running on the first snapshot holds it.
    let request = first.clone();
    let second = snapshot_after(&closing_config("2"), &options, Some(&first)).snapshot;
    drop(first);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert_eq!(closes(CHANGING), 0, "closed while a request still held it");
    drop(request);
    closes_within(CHANGING, 1).await;
    assert_eq!(closes(STAYING), 0, "the reused handler was closed");
    // The second snapshot's own handlers close when it goes, the reused one among them.
    drop(second);
    closes_within(CHANGING, 2).await;
    closes_within(STAYING, 1).await;
}

#[tokio::test]
async fn checks_and_handler_calls_are_counted_by_outcome() {
    let metrics = RuntimeMetrics::unregistered();
    let snap = snapshot_metered(CONFIG, &metrics);
    let checked = |user: &str| {
        bag(
            &snap,
            &[
                ("request.headers", map(&[("x-user", user)])),
                ("request.method", Value::from("GET")),
            ],
        )
    };
    for user in ["amy", "bob", "cid"] {
        decide(&snap, &checked(user)).await.expect("decided");
    }
    let calls = |handler: &str, result: &str| {
        metrics
            .handler_calls
            .with_label_values(&[handler, "check", result])
            .get()
    };
    // bob is denied by `deny` before `allow` is called; amy and cid reach `allow` only.
    assert_eq!(calls("deny.handler.istio-system", "denied"), 1);
    assert_eq!(calls("deny.handler.istio-system", "ok"), 0);
    assert_eq!(calls("allow.handler.istio-system", "ok"), 2);
    assert_eq!(metrics.checks.with_label_values(&["allowed"]).get(), 2);
    assert_eq!(metrics.checks.with_label_values(&["denied"]).get(), 1);
    assert_eq!(metrics.checks.with_label_values(&["error"]).get(), 0);
}

#[test]
fn a_handler_that_cannot_answer_its_declared_template_is_refused_at_build() {
    let yaml = r#"
kind: handler
metadata: {name: hollow, namespace: istio-system}
spec: {compiledAdapter: hollow}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: all, namespace: istio-system}
spec:
  actions: [{handler: hollow, instances: [nothing]}]
"#;
    let errors = match try_build_in(
        &registry(),
        yaml,
        &RuntimeOptions::default(),
        None,
        &RuntimeMetrics::unregistered(),
    ) {
        Ok(_) => panic!("a handler that answers no checks was built"),
        Err(errors) => errors,
    };
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].handler, "hollow.handler.istio-system");
    assert_eq!(
        errors[0].message,
        "adapter \"hollow\" declares template checknothing but its handler does not answer checks"
    );
}
