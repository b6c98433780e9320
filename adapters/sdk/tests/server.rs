//! The SDK's server over real gRPC on loopback: validation, sessions, a check and a report, as
//! the mixer drives them.

use std::sync::{Arc, Mutex};

use mixer_adapter_sdk::proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_adapter_sdk::proto::istio::policy::v1beta1 as policy;
use mixer_adapter_sdk::proto::{listentry, metric, quota};
use mixer_adapter_sdk::{
    Adapter, CheckResult, Code, Config, Error, ListEntry, ListEntryInstance, Metric,
    MetricInstance, Server, Value, params_to_any,
};
use model::infrastructure_backend_client::InfrastructureBackendClient;
use serde_json::json;
use tonic::transport::Channel;

#[derive(Default)]
struct Test {
    reported: Mutex<Vec<(MetricInstance, Config)>>,
}

impl Adapter for Test {
    fn validate(&self, config: &Config) -> Result<(), String> {
        config["allowed"]
            .as_str()
            .map(drop)
            .ok_or_else(|| "params.allowed: expected a string".to_string())
    }
}

impl ListEntry for Test {
    async fn check(
        &self,
        instance: &ListEntryInstance,
        config: &Config,
    ) -> Result<CheckResult, Error> {
        if instance.value == "broken" {
            return Err(Error::unavailable("backend down"));
        }
        Ok(if config["allowed"] == instance.value.as_str() {
            CheckResult::ok()
        } else {
            CheckResult::deny(format!("{} is not allowed", instance.value))
        })
    }
}

impl Metric for Test {
    async fn report(&self, instances: &[MetricInstance], config: &Config) -> Result<(), Error> {
        let mut reported = self.reported.lock().unwrap();
        reported.extend(instances.iter().map(|i| (i.clone(), config.clone())));
        Ok(())
    }
}

async fn start(adapter: Arc<Test>) -> (Channel, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = Server::from_arc(adapter).list_entry().metric();
    assert_eq!(
        server.services(),
        [
            "istio.mixer.adapter.model.v1beta1.InfrastructureBackend",
            "listentry.HandleListEntryService",
            "metric.HandleMetricService"
        ]
    );
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

fn session_any(id: &str) -> prost_types::Any {
    prost_types::Any {
        type_url: "google.protobuf.Any.type_url".into(),
        value: id.as_bytes().to_vec(),
    }
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
    let adapter = Arc::new(Test::default());
    let (channel, _stop) = start(adapter.clone()).await;
    let mut backend = InfrastructureBackendClient::new(channel.clone());

    let bad = backend
        .validate(model::ValidateRequest {
            adapter_config: Some(params_to_any(&json!({"allowed": 3}))),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let status = bad.status.unwrap();
    assert_eq!(status.code, Code::InvalidArgument as i32);
    assert!(status.message.contains("params.allowed"), "{status:?}");

    // An instance of a template this server does not serve is refused at validation.
    let wrong = backend
        .validate(model::ValidateRequest {
            adapter_config: Some(params_to_any(&json!({"allowed": "alice"}))),
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

    let session = backend
        .create_session(model::CreateSessionRequest {
            adapter_config: Some(params_to_any(&json!({"allowed": "alice"}))),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(session.status.unwrap().code, 0);
    let id = session.session_id;
    assert!(!id.is_empty());

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

    // Params sent directly (no session) work too.
    let direct = checks
        .handle_list_entry(list_entry("bob", params_to_any(&json!({"allowed": "bob"}))))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(direct.status.unwrap().code, 0);

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
    {
        let reported = adapter.reported.lock().unwrap();
        assert_eq!(reported.len(), 1);
        let (instance, config) = &reported[0];
        assert_eq!(instance.value, Some(Value::Int64(1)));
        assert_eq!(instance.dimensions["method"].as_str(), Some("GET"));
        assert_eq!(config, &json!({"allowed": "alice"}));
    }

    let closed = backend
        .close_session(model::CloseSessionRequest {
            session_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(closed.status.unwrap().code, 0);
    let gone = checks
        .handle_list_entry(list_entry("alice", session_any(&id)))
        .await
        .unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound);

    // A template the adapter does not serve is UNIMPLEMENTED.
    let mut quotas =
        quota::handle_quota_service_client::HandleQuotaServiceClient::new(channel.clone());
    let missing = quotas
        .handle_quota(quota::HandleQuotaRequest::default())
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::Unimplemented);
}

#[tokio::test]
async fn health_reports_each_service() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let (channel, _stop) = start(Arc::new(Test::default())).await;
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
