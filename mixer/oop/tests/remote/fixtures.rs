//! The client side: options with short timeouts, a handler for the test adapter, and the
//! instances sent to it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mixer_model::{FieldValue, Instance, Template, Value};
use mixer_oop::{OopOptions, RemoteAdapterFactory, RemoteHandler};
use mixer_remote::{RemoteConnection, RemoteHandlerSpec};

pub fn options() -> OopOptions {
    OopOptions {
        default_timeout: Duration::from_millis(300),
        validate_timeout: Duration::from_millis(500),
        report_backoff: Duration::from_millis(10),
        ..OopOptions::default()
    }
}

pub fn build(
    options: OopOptions,
    addr: SocketAddr,
    params: serde_json::Value,
) -> Arc<RemoteHandler> {
    let factory = RemoteAdapterFactory::new(options);
    let connection = RemoteConnection {
        address: addr.to_string(),
        timeout: None,
        authentication: None,
    };
    factory
        .build_handler(&RemoteHandlerSpec {
            handler_name: "h.istio-system".into(),
            adapter: "myadapter",
            params: &params,
            params_descriptor: None,
            session_based: None,
            connection: &connection,
            instances: &[],
            declared_templates: None,
        })
        .expect("build")
}

pub fn listentry(value: &str) -> Instance {
    Instance {
        name: "appversion.instance.istio-system".into(),
        template: Template::ListEntry,
        fields: vec![("value", FieldValue::Value(Value::string(value)))],
    }
}

pub fn metric(n: usize) -> Instance {
    Instance {
        name: format!("m{n}.instance.istio-system").into(),
        template: Template::Metric,
        fields: vec![
            ("value", FieldValue::Value(Value::Int64(1))),
            (
                "dimensions",
                FieldValue::Map(vec![("code".into(), Value::Int64(200))]),
            ),
        ],
    }
}
