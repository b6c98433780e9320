//! The SDK against the mixer's own out-of-process client (`mixer-oop`): an adapter's error
//! reaches the mixer as the same kind, with the retryability that kind has, so the handler's
//! fail policy and the report retries apply as they would to the adapter built in.

mod support;

use std::time::Duration;

use mixer_adapter_sdk::api::{AdapterError, AdapterInfo, CheckHandler, ErrorKind, Stability};
use mixer_adapter_sdk::model::{
    CheckResult, FieldValue, Instance, ListEntryInstance, Template, Value,
};
use mixer_adapter_sdk::{Server, async_trait};
use mixer_oop::{BreakerOptions, OopOptions, RemoteAdapterFactory};
use mixer_remote::{RemoteConnection, RemoteHandlerSpec, RemoteInstance};
use support::CheckAdapter;

const KINDS: [ErrorKind; 7] = [
    ErrorKind::Unavailable,
    ErrorKind::Timeout,
    ErrorKind::InvalidResponse,
    ErrorKind::InvalidInstance,
    ErrorKind::Overloaded,
    ErrorKind::CircuitOpen,
    ErrorKind::Internal,
];

/// Whether a retry may help, for each kind as the adapter API has it.
fn retryable(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Unavailable
            | ErrorKind::Timeout
            | ErrorKind::Overloaded
            | ErrorKind::CircuitOpen
    )
}

static INFO: AdapterInfo = AdapterInfo {
    name: "failing",
    description: "fails as asked",
    templates: &[Template::ListEntry],
    cacheable: true,
    stability: Stability::Alpha,
};

/// Fails a check of the value that names an error kind (`unavailable`...) with that kind.
struct FailingHandler;

#[async_trait]
impl CheckHandler for FailingHandler {
    async fn check(&self, instance: &Instance) -> Result<CheckResult, AdapterError> {
        let asked = ListEntryInstance::of(instance)
            .and_then(|i| i.value)
            .and_then(Value::as_str)
            .unwrap_or_default();
        match KINDS.into_iter().find(|k| k.label() == asked) {
            Some(kind) => Err(AdapterError {
                kind,
                retryable: retryable(kind),
                message: format!("failed as {asked}"),
            }),
            None => Ok(CheckResult::ok(Duration::from_secs(1), 1)),
        }
    }
}

#[tokio::test]
async fn each_error_kind_reaches_the_mixer_as_that_kind() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        Server::new(CheckAdapter::new(&INFO, FailingHandler))
            .serve_with_shutdown(listener, std::future::pending()),
    );

    let factory = RemoteAdapterFactory::new(OopOptions {
        validate: false,
        // Every call fails here: keep the breaker from answering for the adapter.
        breaker: BreakerOptions {
            failure_threshold: 0,
            ..BreakerOptions::default()
        },
        ..OopOptions::default()
    });
    let connection = RemoteConnection {
        address: addr.to_string(),
        timeout: Some(Duration::from_secs(5)),
        authentication: None,
    };
    let instances = [RemoteInstance {
        name: "value.instance.default".into(),
        template: Template::ListEntry,
        fields: vec![],
    }];
    let handler = factory
        .build_handler(&RemoteHandlerSpec {
            handler_name: "failing.default".into(),
            adapter: "failing",
            params: &serde_json::Value::Null,
            params_descriptor: None,
            session_based: None,
            connection: &connection,
            instances: &instances,
            declared_templates: None,
        })
        .expect("built");
    let check = |value: &'static str| {
        let handler = handler.clone();
        async move {
            let instance = Instance {
                name: "value.instance.default".into(),
                template: Template::ListEntry,
                fields: vec![("value", FieldValue::Value(Value::from(value)))],
            };
            handler.check(&instance).await
        }
    };
    assert!(check("fine").await.expect("no error").status.is_ok());
    for kind in KINDS {
        let error = check(kind.label()).await.expect_err("an error");
        // The circuit breaker's kind is the mixer's own: the adapter's open breaker reads as
        // its backend out of reach.
        let expected = match kind {
            ErrorKind::CircuitOpen => ErrorKind::Unavailable,
            other => other,
        };
        assert_eq!(
            (error.kind, error.retryable),
            (expected, retryable(kind)),
            "{kind:?}: {error}"
        );
        assert!(
            error
                .message
                .contains(&format!("failed as {}", kind.label())),
            "{kind:?}: {error}"
        );
    }
}
