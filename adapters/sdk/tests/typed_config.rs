//! An adapter whose params the mixer sends as its own config message
//! (`testadapter.config.Params`, from `proto/testdata/typed_params.proto`): given the message's
//! descriptor, the SDK reads it by the protobuf JSON mapping into the adapter's serde config,
//! the same config a mixer would decode from YAML, in Validate, in a session and on calls
//! without one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mixer_adapter_sdk::api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, CheckHandler, DurationParam, Handler,
    ParamError, Stability,
};
use mixer_adapter_sdk::model::{
    CheckResult, Code, Instance, ListEntryInstance, Status, Template, Value,
};
use mixer_adapter_sdk::proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_adapter_sdk::proto::listentry;
use mixer_adapter_sdk::{Server, async_trait};
use mixer_proto::testdata::{self, params};
use model::infrastructure_backend_client::InfrastructureBackendClient;
use prost::Message;
use serde::Deserialize;
use tonic::transport::Channel;

const TYPE_URL: &str = "type.googleapis.com/testadapter.config.Params";

/// `testadapter.config.Params` as a serde config, in the JSON mapping's names. Proto3 leaves
/// fields at their default out, so every field has one.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
struct Params {
    backend_address: String,
    mode: Mode,
    refresh_interval: Option<DurationParam>,
    allowed: Vec<String>,
    limits: HashMap<String, i64>,
    backend: Option<Backend>,
    fallbacks: Vec<Backend>,
    ratio: f64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
enum Mode {
    #[default]
    #[serde(rename = "MODE_UNSPECIFIED")]
    Unspecified,
    Allow,
    Deny,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Backend {
    host: String,
    port: i32,
    tls: bool,
}

/// What a handler is built from: the params, checked, with the refresh interval parsed.
#[derive(Clone, Debug, PartialEq)]
struct Compiled {
    params: Params,
    refresh: Option<Duration>,
}

/// Allows the listed values (all of them in mode ALLOW); keeps what it compiled.
#[derive(Default)]
struct Typed {
    compiled: Arc<Mutex<Vec<Compiled>>>,
}

static INFO: AdapterInfo = AdapterInfo {
    name: "typed",
    description: "reads its params as testadapter.config.Params",
    templates: &[Template::ListEntry],
    cacheable: true,
    stability: Stability::Alpha,
};

impl Adapter for Typed {
    type Config = Params;
    type Compiled = Compiled;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, params: Params) -> Result<Compiled, Vec<ParamError>> {
        let mut errors = Vec::new();
        if params.backend.as_ref().is_none_or(|b| b.host.is_empty()) {
            errors.push(ParamError::new("backend.host", "required"));
        }
        let refresh = params
            .refresh_interval
            .as_ref()
            .and_then(|d| ParamError::collect(d.positive("refreshInterval"), &mut errors));
        if !errors.is_empty() {
            return Err(errors);
        }
        let compiled = Compiled { params, refresh };
        self.compiled.lock().unwrap().push(compiled.clone());
        Ok(compiled)
    }

    fn build(&self, c: &Compiled, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(TypedHandler(c.params.clone())))
    }
}

struct TypedHandler(Params);

impl Handler for TypedHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }
}

#[async_trait]
impl CheckHandler for TypedHandler {
    async fn check(&self, instance: &Instance) -> Result<CheckResult, AdapterError> {
        let value = ListEntryInstance::of(instance)
            .and_then(|i| i.value)
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut answer = CheckResult::ok(Duration::from_secs(5), 1000);
        if self.0.mode != Mode::Allow && !self.0.allowed.iter().any(|a| a == value) {
            answer.status = Status::new(Code::PermissionDenied, format!("{value} is not allowed"));
        }
        Ok(answer)
    }
}

fn typed(params: &testdata::Params) -> prost_types::Any {
    prost_types::Any {
        type_url: TYPE_URL.into(),
        value: params.encode_to_vec(),
    }
}

/// Params the adapter accepts, with a field of each shape. The bytes of their encoding
/// are valid UTF-8: the SDK must not take them for a session id.
fn good() -> testdata::Params {
    testdata::Params {
        backend_address: "db:5432".into(),
        mode: params::Mode::Deny as i32,
        refresh_interval: Some(prost_types::Duration {
            seconds: 1,
            nanos: 500_000_000,
        }),
        allowed: vec!["alice".into()],
        limits: [("alice".to_string(), 3)].into(),
        backend: Some(params::Backend {
            host: "db".into(),
            port: 5432,
            tls: true,
        }),
        fallbacks: vec![params::Backend {
            host: "f1".into(),
            ..Default::default()
        }],
        ratio: 0.25,
    }
}

/// What the adapter compiles from [`good`].
fn good_compiled() -> Compiled {
    Compiled {
        params: Params {
            backend_address: "db:5432".into(),
            mode: Mode::Deny,
            refresh_interval: Some(DurationParam::new("1.500s")),
            allowed: vec!["alice".into()],
            limits: [("alice".to_string(), 3)].into(),
            backend: Some(Backend {
                host: "db".into(),
                port: 5432,
                tls: true,
            }),
            fallbacks: vec![Backend {
                host: "f1".into(),
                ..Default::default()
            }],
            ratio: 0.25,
        },
        refresh: Some(Duration::from_millis(1500)),
    }
}

async fn start(server: Server) -> (Channel, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve_with_shutdown(listener, async {
        let _ = stopped.await;
    }));
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (channel, stop)
}

async fn check(channel: &Channel, value: &str, config: prost_types::Any) -> i32 {
    let mut client = listentry::handle_list_entry_service_client::HandleListEntryServiceClient::new(
        channel.clone(),
    );
    let result = client
        .handle_list_entry(listentry::HandleListEntryRequest {
            instance: Some(listentry::InstanceMsg {
                name: "user.instance.istio-system".into(),
                value: value.into(),
            }),
            adapter_config: Some(config),
            dedup_id: String::new(),
        })
        .await
        .expect("answer")
        .into_inner();
    result.status.map_or(0, |s| s.code)
}

#[tokio::test]
async fn the_adapter_reads_its_own_message_everywhere() {
    let adapter = Typed::default();
    let compiled = adapter.compiled.clone();
    let server = Server::new(adapter)
        .params_message(testdata::FILE_DESCRIPTOR_SET)
        .expect("a good descriptor set");
    let (channel, _stop) = start(server).await;
    let mut backend = InfrastructureBackendClient::new(channel.clone());

    let ok = backend
        .validate(model::ValidateRequest {
            adapter_config: Some(typed(&good())),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ok.status.is_none_or(|s| s.code == 0));
    assert_eq!(*compiled.lock().unwrap(), [good_compiled()]);
    let bad = backend
        .validate(model::ValidateRequest {
            adapter_config: Some(typed(&testdata::Params {
                refresh_interval: Some(prost_types::Duration {
                    seconds: -1,
                    nanos: 0,
                }),
                ..Default::default()
            })),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .expect("refused");
    assert_eq!(bad.code, Code::InvalidArgument as i32);
    assert!(
        bad.message
            .starts_with("backend.host: required; refreshInterval: "),
        "{bad:?}"
    );

    // Calls without a session carry the message.
    assert_eq!(check(&channel, "alice", typed(&good())).await, 0);
    assert_eq!(
        check(&channel, "mallory", typed(&good())).await,
        Code::PermissionDenied as i32
    );
    let allow_all = testdata::Params {
        mode: params::Mode::Allow as i32,
        ..good()
    };
    assert_eq!(check(&channel, "mallory", typed(&allow_all)).await, 0);

    // A session stores it.
    let session = backend
        .create_session(model::CreateSessionRequest {
            adapter_config: Some(typed(&good())),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let by_id = mixer_oop::session_any(&session.session_id);
    assert_eq!(check(&channel, "alice", by_id.clone()).await, 0);
    assert_eq!(
        check(&channel, "mallory", by_id).await,
        Code::PermissionDenied as i32
    );
    let seen = compiled.lock().unwrap();
    assert_eq!(seen.len(), 4, "Validate, two params, one session");
    assert!(
        seen.iter()
            .all(|c| c.params.backend == good_compiled().params.backend)
    );
}

#[tokio::test]
async fn a_message_without_its_descriptor_says_what_to_do() {
    let (channel, _stop) = start(Server::new(Typed::default())).await;
    let mut backend = InfrastructureBackendClient::new(channel);
    let refused = backend
        .validate(model::ValidateRequest {
            adapter_config: Some(typed(&good())),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .expect("refused");
    assert_eq!(refused.code, Code::InvalidArgument as i32);
    assert!(
        refused.message.contains("testadapter.config.Params")
            && refused.message.contains("Server::params_message"),
        "{refused:?}"
    );
    assert!(
        Server::new(Typed::default())
            .params_message(b"\x0a\x05\xff")
            .is_err()
    );
}
