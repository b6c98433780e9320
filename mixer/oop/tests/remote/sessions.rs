//! The infrastructure backend: sessions in place of params, validation by the adapter, and
//! how params travel without a session.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mixer_adapter_api::Handler;
use mixer_oop::RemoteAdapterFactory;
use mixer_remote::{RemoteAdapter, RemoteConnection, RemoteHandlerSpec};

use crate::adapter::{State, serve};
use crate::fixtures::*;

#[tokio::test]
async fn sessions_replace_params_and_are_closed_with_the_handler() {
    let state = Arc::new(State {
        sessions: true,
        ..State::default()
    });
    let (addr, _server) = serve(state.clone(), "127.0.0.1:0".parse().unwrap()).await;
    let h = build(options(), addr, serde_json::json!({"list": ["good"]}));
    for _ in 0..2 {
        h.as_check()
            .unwrap()
            .check(&listentry("good"))
            .await
            .expect("ok");
    }
    let configs = state.configs.lock().unwrap().clone();
    assert_eq!(configs.len(), 2);
    for c in &configs {
        assert_eq!(c.type_url, mixer_oop::SESSION_TYPE_URL);
        assert_eq!(c.value, b"s-1");
    }
    assert_eq!(h.metrics().calls("create_session", "ok"), 1);
    h.close().await;
    assert_eq!(*state.closed.lock().unwrap(), ["s-1"]);
}

fn spec_validate(
    factory: &RemoteAdapterFactory,
    addr: SocketAddr,
    params: serde_json::Value,
) -> Result<(), Vec<mixer_adapter_api::ParamError>> {
    let connection = RemoteConnection {
        address: addr.to_string(),
        timeout: None,
        authentication: None,
    };
    factory
        .compile_remote(&RemoteHandlerSpec {
            handler_name: "h.istio-system".into(),
            adapter: "myadapter",
            params: &params,
            params_descriptor: None,
            session_based: None,
            connection: &connection,
            instances: &[],
            declared_templates: None,
        })
        .map(|_| ())
}

// Validation blocks its thread: the adapter must be served by other worker threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_reports_the_adapters_refusal_and_accepts_an_unreachable_adapter() {
    let state = Arc::new(State {
        sessions: true,
        ..State::default()
    });
    let (addr, _server) = serve(state, "127.0.0.1:0".parse().unwrap()).await;
    let factory = RemoteAdapterFactory::new(options());
    let errors = tokio::task::block_in_place(|| {
        spec_validate(&factory, addr, serde_json::json!({"bad": true}))
    })
    .unwrap_err();
    assert_eq!(errors[0].message, "params.bad: not allowed here");
    tokio::task::block_in_place(|| spec_validate(&factory, addr, serde_json::json!({"good": 1})))
        .expect("accepted");

    let nobody = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let started = std::time::Instant::now();
    tokio::task::block_in_place(|| spec_validate(&factory, nobody, serde_json::Value::Null))
        .expect("unreachable adapters are accepted with a warning");
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn params_travel_as_a_struct() {
    let any = mixer_oop::params_any(&serde_json::json!({"a": [1, "x"], "b": {"c": true}}));
    assert_eq!(any.type_url, "type.googleapis.com/google.protobuf.Struct");
    let s = <prost_types::Struct as prost::Message>::decode(any.value.as_slice()).unwrap();
    assert_eq!(s.fields.len(), 2);
}

fn quota_instance() -> mixer_model::Instance {
    mixer_model::Instance {
        name: "requestcount.instance.istio-system".into(),
        template: mixer_model::Template::Quota,
        fields: vec![],
    }
}

fn quota_args() -> mixer_adapter_api::QuotaArgs {
    mixer_adapter_api::QuotaArgs {
        amount: 1,
        best_effort: false,
        deduplication_id: "q1".into(),
        limit_override: None,
    }
}

/// An adapter that restarted answers NOT_FOUND for the session: the mixer creates a new one
/// and sends the call again, so the restart costs no request.
#[tokio::test]
async fn a_session_the_adapter_lost_is_created_again_and_the_call_sent_once_more() {
    let state = Arc::new(State {
        sessions: true,
        ..State::default()
    });
    let (addr, _server) = serve(state.clone(), "127.0.0.1:0".parse().unwrap()).await;
    let h = build(options(), addr, serde_json::json!({"list": ["good"]}));
    let check = h.as_check().expect("check");
    check.check(&listentry("good")).await.expect("first");

    state.lose_sessions.store(1, Ordering::SeqCst);
    let answer = check.check(&listentry("good")).await.expect("decided");
    assert!(answer.status.is_ok());
    assert_eq!(h.metrics().calls("create_session", "ok"), 2);
    assert_eq!(h.metrics().calls("check", "session_lost"), 1);
    assert_eq!(h.metrics().calls("check", "ok"), 2);

    // Once only: an adapter that keeps refusing sessions gets the fail policy.
    state.lose_sessions.store(2, Ordering::SeqCst);
    let refused = check
        .check(&listentry("good"))
        .await
        .expect_err("lost twice");
    assert!(refused.message.contains("NotFound"), "{refused}");
    assert_eq!(h.metrics().calls("create_session", "ok"), 3);
}

/// A quota allocation goes once more only when the adapter cannot have charged it (it did
/// not know the session), under the same dedup id; an allocation it may have charged (an
/// UNAVAILABLE answer after it saw the call) is never sent again.
#[tokio::test]
async fn a_quota_allocation_is_sent_again_only_if_it_cannot_have_been_charged() {
    let state = Arc::new(State {
        sessions: true,
        ..State::default()
    });
    let (addr, _server) = serve(state.clone(), "127.0.0.1:0".parse().unwrap()).await;
    let h = build(options(), addr, serde_json::Value::Null);
    let quota = h.as_quota().expect("quota");

    state.fail_quota.store(true, Ordering::SeqCst);
    quota
        .allocate(&quota_instance(), &quota_args())
        .await
        .expect_err("unavailable");
    assert_eq!(*state.quotas.lock().unwrap(), ["q1"], "sent once");

    state.fail_quota.store(false, Ordering::SeqCst);
    state.lose_sessions.store(1, Ordering::SeqCst);
    let granted = quota
        .allocate(&quota_instance(), &quota_args())
        .await
        .expect("granted after a new session");
    assert_eq!(granted.granted_amount, 1);
    // The refused call was not charged (NOT_FOUND comes before the adapter records it).
    assert_eq!(*state.quotas.lock().unwrap(), ["q1", "q1"]);
    assert_eq!(h.metrics().calls("quota", "session_lost"), 1);
}

/// Without sessions NOT_FOUND is the adapter's own answer, not a lost session: not retried.
#[tokio::test]
async fn not_found_without_a_session_is_final() {
    let state = Arc::new(State::default());
    let (addr, _server) = serve(state.clone(), "127.0.0.1:0".parse().unwrap()).await;
    let h = build(options(), addr, serde_json::Value::Null);
    state.lose_sessions.store(1, Ordering::SeqCst);
    h.as_check()
        .expect("check")
        .check(&listentry("good"))
        .await
        .expect("params, not a session: nothing to lose");
    assert_eq!(h.metrics().calls("check", "session_lost"), 0);
}

/// A report batch meets a lost session as a check does: a new session, the batch sent once
/// more at once, not after the report backoff.
#[tokio::test]
async fn a_report_batch_with_a_lost_session_goes_again_at_once() {
    let state = Arc::new(State {
        sessions: true,
        ..State::default()
    });
    let (addr, _server) = serve(state.clone(), "127.0.0.1:0".parse().unwrap()).await;
    let h = build(options(), addr, serde_json::Value::Null);
    let report = h.as_report().expect("report");
    report.report(&[metric(1)]).await.expect("delivered");
    state.lose_sessions.store(1, Ordering::SeqCst);
    report.report(&[metric(2)]).await.expect("delivered");
    assert_eq!(
        state.reports.lock().unwrap().len(),
        2,
        "each batch seen once"
    );
    assert_eq!(h.metrics().calls("report", "session_lost"), 1);
    assert_eq!(h.metrics().calls("create_session", "ok"), 2);
    let mut text = String::new();
    h.as_exposition().expect("metrics").render(&mut text);
    assert!(
        text.contains("mixer_oop_report_retries_total{handler=\"h.istio-system\"} 0"),
        "{text}"
    );
}
