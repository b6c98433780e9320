//! The adapter the client talks to: a tonic server of the list entry, quota and metric
//! services and the infrastructure backend, told by a shared [`State`] how to misbehave and
//! recording what it saw.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use mixer_model::Code;
use mixer_proto::google::rpc::Status as RpcStatus;
use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_proto::{listentry, metric, quota};
use tonic::{Request, Response, Status};

/// What the test adapter does and what it saw.
#[derive(Default)]
pub struct State {
    /// Answer nothing (a hung adapter).
    pub hang: std::sync::atomic::AtomicBool,
    /// Fail this many report calls with UNAVAILABLE first.
    pub fail_reports: AtomicUsize,
    /// Serve InfrastructureBackend (sessions, validate).
    pub sessions: bool,
    pub reports: Mutex<Vec<(String, Vec<String>)>>,
    pub configs: Mutex<Vec<prost_types::Any>>,
    pub closed: Mutex<Vec<String>>,
    pub in_flight: AtomicUsize,
    /// Answer this many calls that carry a session with NOT_FOUND (as after a restart).
    pub lose_sessions: AtomicUsize,
    /// Answer every quota call with UNAVAILABLE after seeing it.
    pub fail_quota: std::sync::atomic::AtomicBool,
    /// The dedup id of every quota call seen.
    pub quotas: Mutex<Vec<String>>,
}

#[derive(Clone)]
struct Adapter(Arc<State>);

impl Adapter {
    /// NOT_FOUND for a call that carries a session, while `lose_sessions` says so.
    fn session_lost(&self, config: Option<&prost_types::Any>) -> Result<(), Status> {
        let carries_session = config.is_some_and(|c| c.type_url == mixer_oop::SESSION_TYPE_URL);
        let lose = carries_session
            && self
                .0
                .lose_sessions
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if lose {
            return Err(Status::not_found("unknown session"));
        }
        Ok(())
    }

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
        self.session_lost(r.adapter_config.as_ref())?;
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
        self.session_lost(r.adapter_config.as_ref())?;
        self.0.quotas.lock().unwrap().push(r.dedup_id.clone());
        if self.0.fail_quota.load(Ordering::SeqCst) {
            return Err(Status::unavailable("charged, then the answer was lost"));
        }
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
        self.session_lost(r.adapter_config.as_ref())?;
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
pub async fn serve(
    state: Arc<State>,
    addr: SocketAddr,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
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
