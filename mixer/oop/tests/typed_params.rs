//! Typed handler params end to end: an `adapter` document carrying the descriptor set of
//! `proto/testdata/typed_params.proto` makes the OOP client send a handler's params as
//! `testadapter.config.Params`, and a real tonic adapter decodes them with protoc-generated
//! code, in Validate, CreateSession and every call without a session.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use mixer_adapter_api::Handler;
use mixer_config::{AdapterRegistry, ConfigOptions, HandlerConfig, SourceFile};
use mixer_model::{Code, FieldValue, Instance, Template, Value};
use mixer_oop::{OopOptions, RemoteAdapterFactory};
use mixer_proto::google::rpc::Status as RpcStatus;
use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_proto::listentry;
use mixer_proto::testdata::{Params, params};
use mixer_remote::{RemoteAdapter, RemoteConnection, RemoteHandlerSpec, RemoteInstance};
use prost::Message;
use tonic::{Request, Response, Status};

const TYPE_URL: &str = "type.googleapis.com/testadapter.config.Params";

/// A test adapter: records every `adapter_config` it gets, by call.
#[derive(Clone, Default)]
struct Adapter {
    sessions: bool,
    seen: Arc<Mutex<Vec<(&'static str, prost_types::Any)>>>,
}

impl Adapter {
    fn record(&self, call: &'static str, any: Option<prost_types::Any>) {
        self.seen
            .lock()
            .unwrap()
            .push((call, any.unwrap_or_default()));
    }

    fn seen(&self) -> Vec<(&'static str, prost_types::Any)> {
        self.seen.lock().unwrap().clone()
    }
}

/// The adapter's own reading of its config, as an adapter author writes it.
fn decode(any: &prost_types::Any) -> Result<Params, Status> {
    if any.type_url != TYPE_URL {
        return Err(Status::invalid_argument(format!(
            "expected {TYPE_URL}, got {}",
            any.type_url
        )));
    }
    Params::decode(any.value.as_slice()).map_err(|e| Status::invalid_argument(e.to_string()))
}

#[tonic::async_trait]
impl model::infrastructure_backend_server::InfrastructureBackend for Adapter {
    async fn validate(
        &self,
        request: Request<model::ValidateRequest>,
    ) -> Result<Response<model::ValidateResponse>, Status> {
        let config = request.into_inner().adapter_config;
        self.record("validate", config.clone());
        let params = decode(&config.unwrap_or_default())?;
        let status = params.backend_address.is_empty().then(|| RpcStatus {
            code: Code::InvalidArgument as i32,
            message: "backend_address: required".into(),
            details: vec![],
        });
        Ok(Response::new(model::ValidateResponse { status }))
    }

    async fn create_session(
        &self,
        request: Request<model::CreateSessionRequest>,
    ) -> Result<Response<model::CreateSessionResponse>, Status> {
        if !self.sessions {
            return Err(Status::unimplemented("no sessions"));
        }
        let config = request.into_inner().adapter_config;
        self.record("create_session", config.clone());
        decode(&config.unwrap_or_default())?;
        Ok(Response::new(model::CreateSessionResponse {
            session_id: "s-1".into(),
            status: None,
        }))
    }

    async fn close_session(
        &self,
        _request: Request<model::CloseSessionRequest>,
    ) -> Result<Response<model::CloseSessionResponse>, Status> {
        Ok(Response::new(model::CloseSessionResponse { status: None }))
    }
}

#[tonic::async_trait]
impl listentry::handle_list_entry_service_server::HandleListEntryService for Adapter {
    async fn handle_list_entry(
        &self,
        request: Request<listentry::HandleListEntryRequest>,
    ) -> Result<Response<model::CheckResult>, Status> {
        let r = request.into_inner();
        self.record("check", r.adapter_config.clone());
        let value = r.instance.map(|i| i.value).unwrap_or_default();
        let allowed = match r.adapter_config {
            Some(any) if any.type_url == TYPE_URL => decode(&any)?.allowed.contains(&value),
            // Within a session the adapter would look its params up; this one allows.
            _ => true,
        };
        let status = (!allowed).then(|| RpcStatus {
            code: Code::PermissionDenied as i32,
            message: format!("{value} is not allowed"),
            details: vec![],
        });
        Ok(Response::new(model::CheckResult {
            status,
            valid_duration: None,
            valid_use_count: 1,
        }))
    }
}

async fn serve(adapter: Adapter) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(
                listentry::handle_list_entry_service_server::HandleListEntryServiceServer::new(
                    adapter.clone(),
                ),
            )
            .add_service(
                model::infrastructure_backend_server::InfrastructureBackendServer::new(adapter),
            )
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await;
    });
    (addr, task)
}

/// The config a user writes: the adapter document (saying the adapter keeps sessions) and a
/// handler of it at `addr`.
fn config(addr: SocketAddr, params: &str) -> Result<HandlerConfig, Vec<String>> {
    config_with(addr, params, true)
}

fn config_with(
    addr: SocketAddr,
    params: &str,
    session_based: bool,
) -> Result<HandlerConfig, Vec<String>> {
    let descriptor = STANDARD.encode(mixer_proto::testdata::FILE_DESCRIPTOR_SET);
    let yaml = format!(
        "apiVersion: config.istio.io/v1alpha2\nkind: adapter\nmetadata: {{name: testadapter}}\nspec:\n  session_based: {session_based}\n  templates: [listentry]\n  config: {descriptor}\n---\nkind: handler\nmetadata: {{name: h, namespace: team}}\nspec:\n  adapter: testadapter\n  connection: {{address: '{addr}', timeout: 2s}}\n  params: {params}\n"
    );
    mixer_config::validate(
        &[SourceFile::new("typed.yaml", yaml)],
        &AdapterRegistry::new(),
        &ConfigOptions::default(),
    )
    .map(|v| v.config.handlers[0].clone())
    .map_err(|errors| errors.iter().map(ToString::to_string).collect())
}

const PARAMS: &str = "{backendAddress: 'db:5432', mode: DENY, refresh_interval: 30s, allowed: [alice], limits: {alice: 3}, backend: {host: db, port: 5432, tls: true}, fallbacks: [{host: replica}]}";

fn expected() -> Params {
    Params {
        backend_address: "db:5432".into(),
        mode: params::Mode::Deny as i32,
        refresh_interval: Some(prost_types::Duration {
            seconds: 30,
            nanos: 0,
        }),
        allowed: vec!["alice".into()],
        limits: [("alice".to_string(), 3)].into(),
        backend: Some(params::Backend {
            host: "db".into(),
            port: 5432,
            tls: true,
        }),
        fallbacks: vec![params::Backend {
            host: "replica".into(),
            ..Default::default()
        }],
        ratio: 0.0,
    }
}

/// What the runtime hands the factory for `hc` (see `mixer-runtime`'s snapshot building).
fn with_spec<T>(hc: &HandlerConfig, f: impl FnOnce(&RemoteHandlerSpec<'_>) -> T) -> T {
    let c = hc.connection.as_ref().expect("remote");
    let connection = RemoteConnection {
        address: c.address.clone(),
        timeout: c.timeout,
        authentication: None,
    };
    let instances = [RemoteInstance {
        name: "user.instance.team".into(),
        template: Template::ListEntry,
        fields: Vec::new(),
    }];
    f(&RemoteHandlerSpec {
        handler_name: hc.name.clone(),
        adapter: &hc.adapter,
        params: &hc.params,
        params_descriptor: hc.adapter_resource.as_ref().and_then(|a| a.params.as_ref()),
        session_based: hc.adapter_resource.as_ref().map(|a| a.session_based),
        connection: &connection,
        instances: &instances,
        declared_templates: None,
    })
}

fn user(value: &str) -> Instance {
    Instance {
        name: "user.instance.team".into(),
        template: Template::ListEntry,
        fields: vec![("value", FieldValue::Value(Value::string(value)))],
    }
}

fn factory() -> RemoteAdapterFactory {
    RemoteAdapterFactory::new(OopOptions {
        validate_timeout: Duration::from_secs(2),
        ..OopOptions::default()
    })
}

// Validation blocks its thread: the adapter must be served by other worker threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_and_create_session_get_the_adapters_own_message() {
    let adapter = Adapter {
        sessions: true,
        ..Adapter::default()
    };
    let (addr, _server) = serve(adapter.clone()).await;
    let hc = config(addr, PARAMS).expect("valid config");
    let factory = factory();
    tokio::task::block_in_place(|| with_spec(&hc, |spec| factory.compile_remote(spec)))
        .expect("accepted");
    let handler = with_spec(&hc, |spec| factory.build_handler(spec)).expect("built");
    let check = handler.as_check().expect("check");
    assert!(
        check
            .check(&user("bob"))
            .await
            .expect("answer")
            .status
            .is_ok()
    );

    let seen = adapter.seen();
    let calls: Vec<&str> = seen.iter().map(|(c, _)| *c).collect();
    assert_eq!(calls, ["validate", "create_session", "check"]);
    assert_eq!(decode(&seen[0].1).expect("typed"), expected());
    assert_eq!(decode(&seen[1].1).expect("typed"), expected());
    // Within the session only its id travels.
    assert_eq!(seen[2].1.type_url, mixer_oop::SESSION_TYPE_URL);
    assert_eq!(seen[2].1.value, b"s-1");
}

/// A reload compiles every handler again: an adapter that accepted the same question is not
/// asked again (as an unchanged handler was reused before), a changed question is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_question_is_not_asked_again_and_a_changed_one_is() {
    let adapter = Adapter::default();
    let (addr, _server) = serve(adapter.clone()).await;
    let factory = factory();
    let compile = |params: &str| {
        let hc = config(addr, params).expect("valid config");
        tokio::task::block_in_place(|| with_spec(&hc, |spec| factory.compile_remote(spec)))
            .expect("accepted");
    };
    compile(PARAMS);
    compile(PARAMS);
    let asked =
        |seen: Vec<(&str, prost_types::Any)>| seen.iter().filter(|(c, _)| *c == "validate").count();
    assert_eq!(asked(adapter.seen()), 1, "the same question twice");
    compile(&PARAMS.replace("alice", "carol"));
    assert_eq!(asked(adapter.seen()), 2, "changed params are asked");
}

#[tokio::test]
async fn an_adapter_document_without_sessions_is_not_asked_for_one() {
    // The adapter could open a session, but its document says it keeps none (Istio's
    // `session_based: false`): the mixer sends the params with every call.
    let adapter = Adapter {
        sessions: true,
        ..Adapter::default()
    };
    let (addr, _server) = serve(adapter.clone()).await;
    let hc = config_with(addr, PARAMS, false).expect("valid config");
    let handler = with_spec(&hc, |spec| factory().build_handler(spec)).expect("built");
    let check = handler.as_check().expect("check");
    assert!(
        check
            .check(&user("alice"))
            .await
            .expect("answer")
            .status
            .is_ok()
    );
    let seen = adapter.seen();
    let calls: Vec<&str> = seen.iter().map(|(c, _)| *c).collect();
    assert_eq!(calls, ["check"]);
    assert_eq!(decode(&seen[0].1).expect("typed"), expected());
}

#[tokio::test]
async fn without_a_session_every_call_carries_the_typed_params() {
    let adapter = Adapter::default();
    let (addr, _server) = serve(adapter.clone()).await;
    let hc = config(addr, PARAMS).expect("valid config");
    let handler = with_spec(&hc, |spec| factory().build_handler(spec)).expect("built");
    let check = handler.as_check().expect("check");
    assert!(
        check
            .check(&user("alice"))
            .await
            .expect("answer")
            .status
            .is_ok()
    );
    let denied = check.check(&user("mallory")).await.expect("answer");
    assert_eq!(denied.status.code, Code::PermissionDenied);
    let seen = adapter.seen();
    assert_eq!(seen.len(), 2);
    for (call, any) in &seen {
        assert_eq!(*call, "check");
        assert_eq!(decode(any).expect("typed"), expected());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_may_refuse_typed_params_with_its_own_message() {
    let adapter = Adapter::default();
    let (addr, _server) = serve(adapter.clone()).await;
    let hc = config(addr, "{mode: ALLOW}").expect("fits the message");
    let errors =
        tokio::task::block_in_place(|| with_spec(&hc, |spec| factory().compile_remote(spec)))
            .expect_err("refused");
    assert_eq!(errors[0].to_string(), "backend_address: required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_that_do_not_fit_never_reach_the_adapter() {
    let adapter = Adapter::default();
    let (addr, _server) = serve(adapter.clone()).await;
    // Config validation refuses them with the file, handler and field ...
    assert_eq!(
        config(addr, "{backend: {port: high}}").expect_err("refused"),
        [
            "typed.yaml: handler h: spec.params.backend.port: expected a 32-bit integer, found \"high\""
        ]
    );
    // ... and so does the factory, for a spec that did not come through it.
    let mut hc = config(addr, "{}").expect("valid");
    hc.params = serde_json::json!({"backend": {"port": "high"}});
    let errors =
        tokio::task::block_in_place(|| with_spec(&hc, |spec| factory().compile_remote(spec)))
            .expect_err("refused");
    assert_eq!(
        errors[0].to_string(),
        "backend.port: invalid digit found in string (params are encoded into testadapter.config.Params)"
    );
    assert!(with_spec(&hc, |spec| factory().build_handler(spec)).is_err());
    assert!(adapter.seen().is_empty());
}
