//! The OOP client against a real tonic adapter server on 127.0.0.1: verdicts, quota,
//! report batches with retries, deadlines, the concurrency limit, the circuit breaker,
//! sessions and validation.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mixer_adapter_api::{
    ErrorKind, Handler, QuotaArgs, RemoteAdapters, RemoteConnection, RemoteHandlerSpec,
};
use mixer_model::{Code, FieldValue, Instance, Template, Value};
use mixer_oop::{BreakerOptions, OopOptions, RemoteAdapterFactory, RemoteHandler};
use mixer_proto::google::rpc::Status as RpcStatus;
use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_proto::{listentry, metric, quota};
use tonic::{Request, Response, Status};

/// What the test adapter does and what it saw.
#[derive(Default)]
struct State {
    /// Answer nothing (a hung adapter).
    hang: std::sync::atomic::AtomicBool,
    /// Fail this many report calls with UNAVAILABLE first.
    fail_reports: AtomicUsize,
    /// Serve InfrastructureBackend (sessions, validate).
    sessions: bool,
    reports: Mutex<Vec<(String, Vec<String>)>>,
    configs: Mutex<Vec<prost_types::Any>>,
    closed: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
}

#[derive(Clone)]
struct Adapter(Arc<State>);

impl Adapter {
    async fn maybe_hang(&self) {
        if self.0.hang.load(Ordering::SeqCst) {
            self.0.in_flight.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
    }
}

#[tonic::async_trait]
impl listentry::handle_list_entry_service_server::HandleListEntryService for Adapter {
    async fn handle_list_entry(
        &self,
        request: Request<listentry::HandleListEntryRequest>,
    ) -> Result<Response<model::CheckResult>, Status> {
        self.maybe_hang().await;
        let r = request.into_inner();
        self.0
            .configs
            .lock()
            .unwrap()
            .push(r.adapter_config.clone().unwrap_or_default());
        let value = r.instance.map(|i| i.value).unwrap_or_default();
        let status = (value != "good").then(|| RpcStatus {
            code: Code::PermissionDenied as i32,
            message: format!("{value} is not listed"),
            details: vec![],
        });
        Ok(Response::new(model::CheckResult {
            status,
            valid_duration: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
            valid_use_count: 7,
        }))
    }
}

#[tonic::async_trait]
impl quota::handle_quota_service_server::HandleQuotaService for Adapter {
    async fn handle_quota(
        &self,
        request: Request<quota::HandleQuotaRequest>,
    ) -> Result<Response<model::QuotaResult>, Status> {
        let r = request.into_inner();
        let quotas = r
            .quota_request
            .unwrap_or_default()
            .quotas
            .into_iter()
            .map(|(name, p)| {
                (
                    name,
                    model::quota_result::Result {
                        valid_duration: Some(prost_types::Duration {
                            seconds: 1,
                            nanos: 0,
                        }),
                        granted_amount: p.amount.min(3),
                        status: None,
                    },
                )
            })
            .collect();
        Ok(Response::new(model::QuotaResult { quotas }))
    }
}

#[tonic::async_trait]
impl metric::handle_metric_service_server::HandleMetricService for Adapter {
    async fn handle_metric(
        &self,
        request: Request<metric::HandleMetricRequest>,
    ) -> Result<Response<model::ReportResult>, Status> {
        let r = request.into_inner();
        let fail = self
            .0
            .fail_reports
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        // Record even failed calls: the adapter may have seen a batch it answered badly.
        self.0.reports.lock().unwrap().push((
            r.dedup_id.clone(),
            r.instances.iter().map(|i| i.name.clone()).collect(),
        ));
        if fail {
            return Err(Status::unavailable("try again"));
        }
        Ok(Response::new(model::ReportResult {}))
    }
}

#[tonic::async_trait]
impl model::infrastructure_backend_server::InfrastructureBackend for Adapter {
    async fn validate(
        &self,
        request: Request<model::ValidateRequest>,
    ) -> Result<Response<model::ValidateResponse>, Status> {
        if !self.0.sessions {
            return Err(Status::unimplemented("no"));
        }
        let config = request.into_inner().adapter_config.unwrap_or_default();
        let s = <prost_types::Struct as prost::Message>::decode(config.value.as_slice())
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let status = s.fields.contains_key("bad").then(|| RpcStatus {
            code: Code::InvalidArgument as i32,
            message: "params.bad: not allowed here".into(),
            details: vec![],
        });
        Ok(Response::new(model::ValidateResponse { status }))
    }

    async fn create_session(
        &self,
        _request: Request<model::CreateSessionRequest>,
    ) -> Result<Response<model::CreateSessionResponse>, Status> {
        if !self.0.sessions {
            return Err(Status::unimplemented("no sessions"));
        }
        Ok(Response::new(model::CreateSessionResponse {
            session_id: "s-1".into(),
            status: None,
        }))
    }

    async fn close_session(
        &self,
        request: Request<model::CloseSessionRequest>,
    ) -> Result<Response<model::CloseSessionResponse>, Status> {
        self.0
            .closed
            .lock()
            .unwrap()
            .push(request.into_inner().session_id);
        Ok(Response::new(model::CloseSessionResponse { status: None }))
    }
}

/// Serves the adapter on `addr` (port 0 = any) until the returned handle is aborted.
async fn serve(state: Arc<State>, addr: SocketAddr) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let a = Adapter(state);
    let task = tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(
                listentry::handle_list_entry_service_server::HandleListEntryServiceServer::new(
                    a.clone(),
                ),
            )
            .add_service(
                quota::handle_quota_service_server::HandleQuotaServiceServer::new(a.clone()),
            )
            .add_service(
                metric::handle_metric_service_server::HandleMetricServiceServer::new(a.clone()),
            )
            .add_service(model::infrastructure_backend_server::InfrastructureBackendServer::new(a))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await;
    });
    (addr, task)
}

fn options() -> OopOptions {
    OopOptions {
        default_timeout: Duration::from_millis(300),
        validate_timeout: Duration::from_millis(500),
        report_backoff: Duration::from_millis(10),
        ..OopOptions::default()
    }
}

fn build(options: OopOptions, addr: SocketAddr, params: serde_json::Value) -> Arc<RemoteHandler> {
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
        })
        .expect("build")
}

fn listentry(value: &str) -> Instance {
    Instance {
        name: "appversion.instance.istio-system".into(),
        template: Template::ListEntry,
        fields: vec![("value", FieldValue::Value(Value::string(value)))],
    }
}

fn metric(n: usize) -> Instance {
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

#[tokio::test]
async fn check_allows_and_denies_with_the_adapters_validity() {
    let state = Arc::new(State::default());
    let (addr, _server) = serve(state.clone(), "127.0.0.1:0".parse().unwrap()).await;
    let h = build(options(), addr, serde_json::json!({"list": ["good"]}));
    let check = h.as_check().expect("check");
    let ok = check.check(&listentry("good")).await.expect("answer");
    assert!(ok.status.is_ok());
    assert_eq!(ok.valid_duration, Duration::from_secs(5));
    assert_eq!(ok.valid_use_count, 7);
    let denied = check.check(&listentry("evil")).await.expect("answer");
    assert_eq!(denied.status.code, Code::PermissionDenied);
    assert_eq!(denied.status.message, "evil is not listed");
    // No sessions: every call carries the params as a Struct.
    let configs = state.configs.lock().unwrap().clone();
    assert!(
        configs
            .iter()
            .all(|c| c.type_url == mixer_oop::STRUCT_TYPE_URL)
    );
    assert_eq!(h.metrics().calls("check", "ok"), 2);
    let mut text = String::new();
    h.as_exposition().expect("metrics").render(&mut text);
    assert!(
        text.contains(
            "mixer_oop_calls_total{handler=\"h.istio-system\",call=\"check\",outcome=\"ok\"} 2"
        ),
        "{text}"
    );
    assert!(text.contains("mixer_oop_circuit_state{handler=\"h.istio-system\"} 0"));
}

#[tokio::test]
async fn quota_is_granted_by_the_adapter() {
    let state = Arc::new(State::default());
    let (addr, _server) = serve(state, "127.0.0.1:0".parse().unwrap()).await;
    let h = build(options(), addr, serde_json::Value::Null);
    let instance = Instance {
        name: "requestcount.instance.istio-system".into(),
        template: Template::Quota,
        fields: vec![(
            "dimensions",
            FieldValue::Map(vec![("source".into(), Value::string("a"))]),
        )],
    };
    let args = QuotaArgs {
        amount: 5,
        best_effort: true,
        deduplication_id: "q1".into(),
        limit_override: None,
    };
    let r = h
        .as_quota()
        .expect("quota")
        .allocate(&instance, &args)
        .await
        .expect("answer");
    assert_eq!(r.granted_amount, 3);
    assert_eq!(r.valid_duration, Duration::from_secs(1));
    assert!(r.status.is_ok());
}

#[tokio::test]
async fn report_batches_arrive_once_each_with_retries_under_one_dedup_id() {
    let state = Arc::new(State::default());
    state.fail_reports.store(2, Ordering::SeqCst);
    let (addr, _server) = serve(state.clone(), "127.0.0.1:0".parse().unwrap()).await;
    let h = build(options(), addr, serde_json::Value::Null);
    let batch: Vec<Instance> = (0..3).map(metric).collect();
    h.as_report()
        .expect("report")
        .report(&batch)
        .await
        .expect("delivered after retries");
    h.as_report()
        .expect("report")
        .report(&[metric(9)])
        .await
        .expect("delivered");
    let seen = state.reports.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        4,
        "two failures, the retry that worked, the next batch"
    );
    assert!(seen[..3].iter().all(|(d, _)| *d == seen[0].0), "{seen:?}");
    assert_ne!(seen[3].0, seen[0].0, "a new batch has a new dedup id");
    let names: Vec<String> = seen[2].1.clone();
    assert_eq!(
        names,
        [
            "m0.instance.istio-system",
            "m1.instance.istio-system",
            "m2.instance.istio-system"
        ]
    );
    assert_eq!(h.metrics().calls("report", "unavailable"), 2);

    // Past the attempts, the error is the adapter's (and retryable).
    state.fail_reports.store(5, Ordering::SeqCst);
    let e = h
        .as_report()
        .unwrap()
        .report(&[metric(1)])
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.retryable);
}

#[tokio::test]
async fn a_hung_adapter_times_out_within_the_deadline() {
    let state = Arc::new(State::default());
    state.hang.store(true, Ordering::SeqCst);
    let (addr, _server) = serve(state, "127.0.0.1:0".parse().unwrap()).await;
    let h = build(options(), addr, serde_json::Value::Null);
    let started = std::time::Instant::now();
    let e = h
        .as_check()
        .unwrap()
        .check(&listentry("good"))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    assert!(took >= Duration::from_millis(290), "{took:?}");
    assert!(took < Duration::from_millis(800), "{took:?}");
}

#[tokio::test]
async fn calls_over_the_concurrency_limit_are_overloaded_at_once() {
    let state = Arc::new(State::default());
    state.hang.store(true, Ordering::SeqCst);
    let (addr, _server) = serve(state.clone(), "127.0.0.1:0".parse().unwrap()).await;
    let h = build(
        OopOptions {
            max_concurrency: 2,
            default_timeout: Duration::from_secs(2),
            ..options()
        },
        addr,
        serde_json::Value::Null,
    );
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let h = h.clone();
            tokio::spawn(async move { h.as_check().unwrap().check(&listentry("good")).await })
        })
        .collect();
    while state.in_flight.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = std::time::Instant::now();
    let e = h
        .as_check()
        .unwrap()
        .check(&listentry("good"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Overloaded, "{e}");
    assert!(started.elapsed() < Duration::from_millis(100));
    for b in busy {
        b.abort();
    }
}

#[tokio::test]
async fn the_circuit_opens_on_a_down_adapter_and_closes_when_it_is_back() {
    // A port with nothing behind it (for now).
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let h = build(
        OopOptions {
            breaker: BreakerOptions {
                failure_threshold: 3,
                cool_down: Duration::from_millis(200),
            },
            ..options()
        },
        addr,
        serde_json::Value::Null,
    );
    let check = h.as_check().unwrap();
    for _ in 0..3 {
        let e = check.check(&listentry("good")).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    }
    let e = check.check(&listentry("good")).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Overloaded, "open: {e}");
    assert!(e.message.contains("circuit open"));

    let state = Arc::new(State::default());
    let (_, _server) = serve(state, addr).await;
    // Still open until the cool-down is over.
    assert_eq!(
        check.check(&listentry("good")).await.unwrap_err().kind,
        ErrorKind::Overloaded
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    let ok = check
        .check(&listentry("good"))
        .await
        .expect("probe reaches the adapter");
    assert!(ok.status.is_ok());
    assert_eq!(h.metrics().calls("check", "ok"), 1);
    let mut text = String::new();
    h.as_exposition().unwrap().render(&mut text);
    assert!(text.contains("mixer_oop_circuit_opened_total{handler=\"h.istio-system\"} 1"));
}

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
    factory.validate(&RemoteHandlerSpec {
        handler_name: "h.istio-system".into(),
        adapter: "myadapter",
        params: &params,
        params_descriptor: None,
        session_based: None,
        connection: &connection,
        instances: &[],
    })
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
