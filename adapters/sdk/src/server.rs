//! The gRPC side: a builder that registers one service per template the adapter serves, and
//! gRPC health.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_proto::{
    authorization, checknothing, listentry, logentry, metric, quota, reportnothing, tracespan,
};
use tokio::net::{TcpListener, ToSocketAddrs};
use tonic::server::NamedService;
use tonic::service::RoutesBuilder;

use crate::config::Config;
use crate::services::Svc;
use crate::sessions::Shared;
use crate::tls::ServerTls;
use crate::token::{RequiredToken, TokenLayer};
use crate::traits::{
    Adapter, Authorization, CheckNothing, ListEntry, LogEntry, Metric, Quota, ReportNothing,
    TraceSpan,
};

use authorization::handle_authorization_service_server::{
    HandleAuthorizationService, HandleAuthorizationServiceServer,
};
use checknothing::handle_check_nothing_service_server::{
    HandleCheckNothingService, HandleCheckNothingServiceServer,
};
use listentry::handle_list_entry_service_server::{
    HandleListEntryService, HandleListEntryServiceServer,
};
use logentry::handle_log_entry_service_server::{
    HandleLogEntryService, HandleLogEntryServiceServer,
};
use metric::handle_metric_service_server::{HandleMetricService, HandleMetricServiceServer};
use model::infrastructure_backend_server::{InfrastructureBackend, InfrastructureBackendServer};
use quota::handle_quota_service_server::{HandleQuotaService, HandleQuotaServiceServer};
use reportnothing::handle_report_nothing_service_server::{
    HandleReportNothingService, HandleReportNothingServiceServer,
};
use tracespan::handle_trace_span_service_server::{
    HandleTraceSpanService, HandleTraceSpanServiceServer,
};

/// Serves a generated service's unary methods directly (see [`mixer_grpc`]):
/// `Method => trait::method`, at `/<the service's name>/Method`, and remembers the name (for
/// health and the start-up line). The service is not added to tonic's routes too: the direct
/// path is the one that serves, and the routes keep only health and unknown paths.
macro_rules! add {
    ($server:expr, $service:expr, $svc:expr, $($method:literal => $call:path),+) => {{
        let name = named(&$service);
        $server.services.push(name);
        $(
            let unary = mixer_grpc::unary($svc, |svc, request| async move {
                $call(&svc, request).await
            });
            $server.methods.add(format!("/{name}/{}", $method), unary);
        )+
    }};
}

fn named<S: NamedService>(_: &S) -> &'static str {
    S::NAME
}

/// Builds the gRPC server of an out-of-process adapter: name the templates the adapter serves,
/// then [`Server::serve`].
///
/// `InfrastructureBackend` (Validate, CreateSession, CloseSession) and `grpc.health.v1.Health`
/// are always served; each template method adds its `Handle*Service`, and the adapter type must
/// implement the template's trait, so a missing implementation is a compile error.
pub struct Server<A> {
    shared: Shared<A>,
    services: Vec<&'static str>,
    tls: Option<ServerTls>,
    token: TokenLayer,
    methods: mixer_grpc::Methods,
}

impl<A: Adapter> Server<A> {
    /// A server for `adapter`, serving no template yet.
    pub fn new(adapter: A) -> Server<A> {
        Server::from_arc(Arc::new(adapter))
    }

    /// A server for an adapter already shared with other code.
    pub fn from_arc(adapter: Arc<A>) -> Server<A> {
        let shared = Shared {
            adapter,
            sessions: Arc::default(),
            handled: Arc::default(),
            templates: Arc::default(),
            no_params: Arc::new(Config::default()),
        };
        let mut server = Server {
            shared: shared.clone(),
            services: vec![],
            tls: None,
            token: TokenLayer::default(),
            methods: mixer_grpc::Methods::new(),
        };
        add!(
            server,
            InfrastructureBackendServer::new(Svc(shared.clone())),
            Svc(shared.clone()),
            "Validate" => InfrastructureBackend::validate,
            "CreateSession" => InfrastructureBackend::create_session,
            "CloseSession" => InfrastructureBackend::close_session
        );
        server
    }

    fn svc(&self) -> Svc<A> {
        Svc(self.shared.clone())
    }

    /// Serves `checknothing` instances.
    pub fn check_nothing(mut self) -> Self
    where
        A: CheckNothing,
    {
        add!(
            self,
            HandleCheckNothingServiceServer::new(self.svc()),
            self.svc(),
            "HandleCheckNothing" => HandleCheckNothingService::handle_check_nothing
        );
        self
    }

    /// Serves `listentry` instances.
    pub fn list_entry(mut self) -> Self
    where
        A: ListEntry,
    {
        add!(
            self,
            HandleListEntryServiceServer::new(self.svc()),
            self.svc(),
            "HandleListEntry" => HandleListEntryService::handle_list_entry
        );
        self
    }

    /// Serves `authorization` instances.
    pub fn authorization(mut self) -> Self
    where
        A: Authorization,
    {
        add!(
            self,
            HandleAuthorizationServiceServer::new(self.svc()),
            self.svc(),
            "HandleAuthorization" => HandleAuthorizationService::handle_authorization
        );
        self
    }

    /// Serves `quota` instances.
    pub fn quota(mut self) -> Self
    where
        A: Quota,
    {
        add!(
            self,
            HandleQuotaServiceServer::new(self.svc()),
            self.svc(),
            "HandleQuota" => HandleQuotaService::handle_quota
        );
        self
    }

    /// Serves `metric` instances.
    pub fn metric(mut self) -> Self
    where
        A: Metric,
    {
        add!(
            self,
            HandleMetricServiceServer::new(self.svc()),
            self.svc(),
            "HandleMetric" => HandleMetricService::handle_metric
        );
        self
    }

    /// Serves `logentry` instances.
    pub fn log_entry(mut self) -> Self
    where
        A: LogEntry,
    {
        add!(
            self,
            HandleLogEntryServiceServer::new(self.svc()),
            self.svc(),
            "HandleLogEntry" => HandleLogEntryService::handle_log_entry
        );
        self
    }

    /// Serves `tracespan` instances.
    pub fn trace_span(mut self) -> Self
    where
        A: TraceSpan,
    {
        add!(
            self,
            HandleTraceSpanServiceServer::new(self.svc()),
            self.svc(),
            "HandleTraceSpan" => HandleTraceSpanService::handle_trace_span
        );
        self
    }

    /// Serves `reportnothing` instances.
    pub fn report_nothing(mut self) -> Self
    where
        A: ReportNothing,
    {
        add!(
            self,
            HandleReportNothingServiceServer::new(self.svc()),
            self.svc(),
            "HandleReportNothing" => HandleReportNothingService::handle_report_nothing
        );
        self
    }

    /// Accepts only calls that carry `token` (the one the mixer's handler sends); others get
    /// UNAUTHENTICATED. The health service stays open to probes.
    pub fn require_token(mut self, token: RequiredToken) -> Self {
        self.token = TokenLayer(Some(Arc::new(token)));
        self
    }

    /// Serves over TLS (mutual TLS when `tls` has a client CA) instead of plaintext.
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The gRPC services registered so far (full names, health excluded).
    pub fn services(&self) -> &[&'static str] {
        &self.services
    }

    /// Binds `addr` and serves until Ctrl-C or SIGTERM. Prints the address and the services
    /// to stderr once it is listening.
    pub async fn serve(self, addr: impl ToSocketAddrs) -> std::io::Result<()> {
        let listener = TcpListener::bind(addr).await?;
        self.serve_with_shutdown(listener, shutdown_signal()).await
    }

    /// Serves on a bound listener until `shutdown` completes (for tests and embedding; bind
    /// port 0 and read `listener.local_addr()` first).
    pub async fn serve_with_shutdown(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> std::io::Result<()> {
        let local: SocketAddr = listener.local_addr()?;
        let templates = self
            .services
            .iter()
            .filter(|name| !name.starts_with("istio."))
            .filter_map(|name| name.split_once('.').map(|(package, _)| package.to_string()))
            .collect();
        let _ = self.shared.templates.set(templates);
        let (health, health_service) = tonic_health::server::health_reporter();
        for name in &self.services {
            health
                .set_service_status(*name, tonic_health::ServingStatus::Serving)
                .await;
        }
        let security = match &self.tls {
            None => "",
            Some(tls) if tls.is_mutual() => " (mutual TLS)",
            Some(_) => " (TLS)",
        };
        let acceptor = match &self.tls {
            None => None,
            Some(tls) => Some(tls.acceptor()?),
        };
        eprintln!(
            "mixer adapter listening on {local}{security}: {}",
            self.services.join(", ")
        );
        let mut routes = RoutesBuilder::default();
        routes.add_service(health_service);
        let calls = tower_layer::Layer::layer(&self.token, routes.routes());
        let mut methods = self.methods;
        if let Some(token) = self.token.0.clone() {
            methods = methods.guard(Arc::new(move |headers: &http::HeaderMap| {
                if token.accepts(headers) {
                    Ok(())
                } else {
                    Err(crate::token::refused())
                }
            }));
        }
        let mut server = mixer_grpc::Server::new(methods, calls);
        if let Some(acceptor) = acceptor {
            server = server.tls(acceptor);
        }
        server.serve(listener, shutdown).await
    }
}

/// Resolves on Ctrl-C, or on SIGTERM on Unix.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term => {}
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

/// The address to listen on: the first command-line argument, else the `ADAPTER_ADDR`
/// environment variable, else `default`.
pub fn listen_addr(default: &str) -> String {
    std::env::args()
        .nth(1)
        .or_else(|| std::env::var("ADAPTER_ADDR").ok())
        .unwrap_or_else(|| default.to_string())
}
