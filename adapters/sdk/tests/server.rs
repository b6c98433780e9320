//! The SDK's server over real gRPC on loopback: validation, sessions, a check and a report, as
//! the mixer drives them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mixer_adapter_sdk::api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, CheckHandler, ErrorKind, Handler, ParamError,
    ReportHandler, Stability,
};
use mixer_adapter_sdk::model::{
    CheckResult, Code, Instance, ListEntryInstance, MetricInstance, Status, Template, Value,
};
use mixer_adapter_sdk::proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_adapter_sdk::proto::istio::policy::v1beta1 as policy;
use mixer_adapter_sdk::proto::{checknothing, listentry, metric, quota};
use mixer_adapter_sdk::{Server, async_trait};
use mixer_oop::{params_any, session_any};
use model::infrastructure_backend_client::InfrastructureBackendClient;
use serde_json::json;
use tonic::transport::Channel;

/// What the adapter saw: the handlers it built and closed, and each metric reported with
/// the params of its handler.
#[derive(Default)]
struct Seen {
    built: AtomicUsize,
    closed: AtomicUsize,
    reported: Mutex<Vec<(String, Value, String, String)>>,
}

/// Allows the value in `params.allowed`; "broken" cannot be decided. Records metrics.
#[derive(Default)]
struct Test(Arc<Seen>);

static INFO: AdapterInfo = AdapterInfo {
    name: "test",
    description: "allows one value, records metrics",
    templates: &[Template::ListEntry, Template::Metric],
    cacheable: true,
    stability: Stability::Alpha,
};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    allowed: String,
}

impl Adapter for Test {
    type Config = Config;
    type Compiled = String;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, config: Config) -> Result<String, Vec<ParamError>> {
        Ok(config.allowed)
    }

    fn build(&self, allowed: &String, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        self.0.built.fetch_add(1, Ordering::SeqCst);
        Ok(Arc::new(TestHandler {
            allowed: allowed.clone(),
            seen: self.0.clone(),
        }))
    }
}

struct TestHandler {
    allowed: String,
    seen: Arc<Seen>,
}

#[async_trait]
impl Handler for TestHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }

    fn as_report(&self) -> Option<&dyn ReportHandler> {
        Some(self)
    }

    async fn close(&self) {
        self.seen.closed.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl CheckHandler for TestHandler {
    async fn check(&self, instance: &Instance) -> Result<CheckResult, AdapterError> {
        let value = ListEntryInstance::of(instance)
            .and_then(|i| i.value)
            .and_then(Value::as_str)
            .unwrap_or_default();
        if value == "broken" {
            return Err(AdapterError::transient(
                ErrorKind::Unavailable,
                "backend down",
            ));
        }
        let mut answer = CheckResult::ok(Duration::from_secs(5), 1000);
        if value != self.allowed {
            answer.status = Status::new(Code::PermissionDenied, format!("{value} is not allowed"));
        }
        Ok(answer)
    }
}

#[async_trait]
impl ReportHandler for TestHandler {
    async fn report(&self, instances: &[Instance]) -> Result<(), AdapterError> {
        let mut reported = self.seen.reported.lock().unwrap();
        for i in instances {
            let m = MetricInstance::of(i).expect("a metric");
            let method = m.dimensions.get("method").and_then(Value::as_str);
            reported.push((
                m.name.to_owned(),
                m.value.cloned().expect("a value"),
                method.unwrap_or_default().to_owned(),
                self.allowed.clone(),
            ));
        }
        Ok(())
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

async fn start_test(seen: Arc<Seen>) -> (Channel, tokio::sync::oneshot::Sender<()>) {
    let server = Server::new(Test(seen));
    assert_eq!(
        server.services(),
        [
            "istio.mixer.adapter.model.v1beta1.InfrastructureBackend",
            "listentry.HandleListEntryService",
            "metric.HandleMetricService"
        ]
    );
    start(server).await
}

fn list_entry(value: &str, config: prost_types::Any) -> listentry::HandleListEntryRequest {
    listentry::HandleListEntryRequest {
        instance: Some(listentry::InstanceMsg {
            name: "user.instance.istio-system".into(),
            value: value.into(),
        }),
        adapter_config: Some(config),
        dedup_id: "1".into(),
    }
}

#[tokio::test]
async fn validate_session_check_report_close() {
    let seen = Arc::new(Seen::default());
    let (channel, _stop) = start_test(seen.clone()).await;
    let mut backend = InfrastructureBackendClient::new(channel.clone());

    let bad = backend
        .validate(model::ValidateRequest {
            adapter_config: Some(params_any(&json!({"allowed": 3}))),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let status = bad.status.unwrap();
    assert_eq!(status.code, Code::InvalidArgument as i32);
    assert_eq!(
        status.message,
        "allowed: invalid type: integer `3`, expected a string"
    );

    // An instance of a template this server does not serve is refused at validation.
    let wrong = backend
        .validate(model::ValidateRequest {
            adapter_config: Some(params_any(&json!({"allowed": "alice"}))),
            inferred_types: [(
                "requestquota.istio-system".to_string(),
                prost_types::Any {
                    type_url: "type.googleapis.com/quota.Type".into(),
                    value: vec![],
                },
            )]
            .into(),
        })
        .await
        .unwrap()
        .into_inner();
    let status = wrong.status.unwrap();
    assert_eq!(status.code, Code::InvalidArgument as i32);
    assert_eq!(
        status.message,
        "instance requestquota.istio-system: template quota is not served by this adapter \
         (it serves: listentry, metric)"
    );
    assert_eq!(
        seen.built.load(Ordering::SeqCst),
        0,
        "Validate builds nothing"
    );

    let session = backend
        .create_session(model::CreateSessionRequest {
            adapter_config: Some(params_any(&json!({"allowed": "alice"}))),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(session.status.unwrap().code, 0);
    let id = session.session_id;
    assert!(!id.is_empty());
    assert_eq!(seen.built.load(Ordering::SeqCst), 1);

    let mut checks = listentry::handle_list_entry_service_client::HandleListEntryServiceClient::new(
        channel.clone(),
    );
    let ok = checks
        .handle_list_entry(list_entry("alice", session_any(&id)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.status.unwrap().code, 0);
    assert_eq!(ok.valid_use_count, 1000);
    assert_eq!(ok.valid_duration.unwrap().seconds, 5);

    let denied = checks
        .handle_list_entry(list_entry("bob", session_any(&id)))
        .await
        .unwrap()
        .into_inner();
    let status = denied.status.unwrap();
    assert_eq!(status.code, Code::PermissionDenied as i32);
    assert_eq!(status.message, "bob is not allowed");

    // Params sent directly (no session) work too, with one handler for the same params.
    for _ in 0..2 {
        let direct = checks
            .handle_list_entry(list_entry("bob", params_any(&json!({"allowed": "bob"}))))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(direct.status.unwrap().code, 0);
    }
    assert_eq!(seen.built.load(Ordering::SeqCst), 2);
    let refused = checks
        .handle_list_entry(list_entry("bob", params_any(&json!({"allowd": "bob"}))))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("allowd"), "{refused:?}");

    // "Could not decide" is a gRPC error, not a denial.
    let broken = checks
        .handle_list_entry(list_entry("broken", session_any(&id)))
        .await
        .unwrap_err();
    assert_eq!(broken.code(), tonic::Code::Unavailable);
    assert_eq!(broken.message(), "backend down");

    let mut metrics =
        metric::handle_metric_service_client::HandleMetricServiceClient::new(channel.clone());
    let string = |s: &str| policy::Value {
        value: Some(policy::value::Value::StringValue(s.into())),
    };
    let report = metric::HandleMetricRequest {
        instances: vec![metric::InstanceMsg {
            name: "requestcount.instance.istio-system".into(),
            value: Some(policy::Value {
                value: Some(policy::value::Value::Int64Value(1)),
            }),
            dimensions: [("method".to_string(), string("GET"))].into(),
            ..Default::default()
        }],
        adapter_config: Some(session_any(&id)),
        dedup_id: "batch-2".into(),
    };
    metrics.handle_metric(report.clone()).await.unwrap();
    // The mixer retrying the same batch (same dedup_id) after a lost answer: not recorded twice.
    metrics.handle_metric(report).await.unwrap();
    assert_eq!(
        *seen.reported.lock().unwrap(),
        [(
            "requestcount.instance.istio-system".to_string(),
            Value::Int64(1),
            "GET".to_string(),
            "alice".to_string()
        )]
    );

    let closed = backend
        .close_session(model::CloseSessionRequest {
            session_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(closed.status.unwrap().code, 0);
    assert_eq!(
        seen.closed.load(Ordering::SeqCst),
        1,
        "its handler is closed"
    );
    let gone = checks
        .handle_list_entry(list_entry("alice", session_any(&id)))
        .await
        .unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound);

    // A template the adapter does not declare is UNIMPLEMENTED.
    let mut quotas =
        quota::handle_quota_service_client::HandleQuotaServiceClient::new(channel.clone());
    let missing = quotas
        .handle_quota(quota::HandleQuotaRequest::default())
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::Unimplemented);
}

#[tokio::test]
async fn stopping_the_server_closes_every_handler() {
    let seen = Arc::new(Seen::default());
    let (channel, stop) = start_test(seen.clone()).await;
    let mut backend = InfrastructureBackendClient::new(channel.clone());
    for allowed in ["a", "b"] {
        backend
            .create_session(model::CreateSessionRequest {
                adapter_config: Some(params_any(&json!({ "allowed": allowed }))),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let mut checks =
        listentry::handle_list_entry_service_client::HandleListEntryServiceClient::new(channel);
    checks
        .handle_list_entry(list_entry("c", params_any(&json!({"allowed": "c"}))))
        .await
        .unwrap();
    assert_eq!(seen.built.load(Ordering::SeqCst), 3);
    stop.send(()).unwrap();
    for _ in 0..100 {
        if seen.closed.load(Ordering::SeqCst) == 3 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "{} of 3 handlers closed",
        seen.closed.load(Ordering::SeqCst)
    );
}

/// Declares checknothing, but its handler offers no check side.
struct Lacking;

static LACKING: AdapterInfo = AdapterInfo {
    name: "lacking",
    description: "declares more than its handler serves",
    templates: &[Template::CheckNothing],
    cacheable: true,
    stability: Stability::Alpha,
};

struct Nothing;

impl Handler for Nothing {}

impl Adapter for Lacking {
    type Config = serde_json::Value;
    type Compiled = ();

    fn info(&self) -> &AdapterInfo {
        &LACKING
    }

    fn compile(&self, _: serde_json::Value) -> Result<(), Vec<ParamError>> {
        Ok(())
    }

    fn build(&self, _: &(), _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(Nothing))
    }
}

#[tokio::test]
async fn a_handler_without_the_side_of_a_declared_template_is_unimplemented() {
    let (channel, _stop) = start(Server::new(Lacking)).await;
    let mut checks =
        checknothing::handle_check_nothing_service_client::HandleCheckNothingServiceClient::new(
            channel,
        );
    let lacking = checks
        .handle_check_nothing(checknothing::HandleCheckNothingRequest::default())
        .await
        .unwrap_err();
    assert_eq!(lacking.code(), tonic::Code::Unimplemented);
    assert_eq!(
        lacking.message(),
        "adapter lacking declares template checknothing, but its handler offers no Check side \
         (Handler::as_check)"
    );
}

#[tokio::test]
async fn health_reports_each_service() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let (channel, _stop) = start_test(Arc::default()).await;
    let mut health = HealthClient::new(channel);
    let status = health
        .check(HealthCheckRequest {
            service: "listentry.HandleListEntryService".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);
}

/// A second adapter started on a port a stale one still listens on fails to start instead of
/// sharing the port (tokio's listener sets no `SO_REUSEPORT`, unlike grpcio's default).
#[tokio::test]
async fn serving_on_a_port_already_listened_on_fails() {
    let stale = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = stale.local_addr().expect("local addr");
    let second = tokio::time::timeout(Duration::from_secs(10), Server::new(Lacking).serve(addr))
        .await
        .expect("serve returned instead of serving");
    assert_eq!(
        second.expect_err("the port is taken").kind(),
        std::io::ErrorKind::AddrInUse
    );
}
