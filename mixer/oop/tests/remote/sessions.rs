//! The infrastructure backend: sessions in place of params, validation by the adapter, and
//! how params travel without a session.

use std::net::SocketAddr;
use std::sync::Arc;
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
