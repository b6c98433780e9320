//! The gRPC side: a server that registers the service of each template the adapter
//! declares, and gRPC health.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use mixer_adapter_api::Adapter;
use mixer_adapter_api::host::AnyAdapter;
use mixer_model::Template;
use mixer_proto::adapter::template::kubernetes;
use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_proto::{
    apikey, authorization, checknothing, jwt, listentry, logentry, metric, quota, reportnothing,
    tracespan,
};
use tokio::net::{TcpListener, ToSocketAddrs};
use tonic::server::NamedService;
use tonic::service::RoutesBuilder;

use crate::handlers::Handlers;
use crate::params::ParamsReader;
use crate::services::Svc;
use crate::tls::ServerTls;
use crate::token::{RequiredToken, TokenLayer};

use apikey::handle_api_key_service_server::{HandleApiKeyService, HandleApiKeyServiceServer};
use authorization::handle_authorization_service_server::{
    HandleAuthorizationService, HandleAuthorizationServiceServer,
};
use checknothing::handle_check_nothing_service_server::{
    HandleCheckNothingService, HandleCheckNothingServiceServer,
};
use jwt::handle_jwt_service_server::{HandleJwtService, HandleJwtServiceServer};
use kubernetes::handle_kubernetes_service_server::{
    HandleKubernetesService, HandleKubernetesServiceServer,
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

/// The full name of a generated service (`listentry.HandleListEntryService`).
fn named<S: NamedService>() -> &'static str {
    S::NAME
}

const BACKEND: &str = <InfrastructureBackendServer<Svc> as NamedService>::NAME;

/// The service that serves `template`'s instances.
fn service(template: Template) -> &'static str {
    match template {
        Template::Authorization => named::<HandleAuthorizationServiceServer<Svc>>(),
        Template::CheckNothing => named::<HandleCheckNothingServiceServer<Svc>>(),
        Template::ListEntry => named::<HandleListEntryServiceServer<Svc>>(),
        Template::Quota => named::<HandleQuotaServiceServer<Svc>>(),
        Template::Metric => named::<HandleMetricServiceServer<Svc>>(),
        Template::LogEntry => named::<HandleLogEntryServiceServer<Svc>>(),
        Template::TraceSpan => named::<HandleTraceSpanServiceServer<Svc>>(),
        Template::ReportNothing => named::<HandleReportNothingServiceServer<Svc>>(),
        // `adapter.template.kubernetes.HandleKubernetesService`, Istio 1.4's name.
        Template::Kubernetes => named::<HandleKubernetesServiceServer<Svc>>(),
        Template::Jwt => named::<HandleJwtServiceServer<Svc>>(),
        Template::ApiKey => named::<HandleApiKeyServiceServer<Svc>>(),
    }
}

/// Serves a generated service's unary methods directly (see [`mixer_grpc`]):
/// `Method => trait::method`, at `/<service>/Method`. The service is not added to tonic's
/// routes too: the direct path is the one that serves, and the routes keep only health and
/// unknown paths.
macro_rules! add {
    ($methods:expr, $svc:expr, $service:expr, $($method:literal => $call:path),+) => {{
        $(
            let unary = mixer_grpc::unary($svc.clone(), |svc, request| async move {
                $call(&svc, request).await
            });
            $methods.add(format!("/{}/{}", $service, $method), unary);
        )+
    }};
}

/// Adds the methods of the service that serves `template`.
fn register(methods: &mut mixer_grpc::Methods, svc: &Svc, template: Template) {
    let name = service(template);
    match template {
        Template::Authorization => add!(methods, svc, name,
            "HandleAuthorization" => HandleAuthorizationService::handle_authorization),
        Template::CheckNothing => add!(methods, svc, name,
            "HandleCheckNothing" => HandleCheckNothingService::handle_check_nothing),
        Template::ListEntry => add!(methods, svc, name,
            "HandleListEntry" => HandleListEntryService::handle_list_entry),
        Template::Quota => add!(methods, svc, name,
            "HandleQuota" => HandleQuotaService::handle_quota),
        Template::Metric => add!(methods, svc, name,
            "HandleMetric" => HandleMetricService::handle_metric),
        Template::LogEntry => add!(methods, svc, name,
            "HandleLogEntry" => HandleLogEntryService::handle_log_entry),
        Template::TraceSpan => add!(methods, svc, name,
            "HandleTraceSpan" => HandleTraceSpanService::handle_trace_span),
        Template::ReportNothing => add!(methods, svc, name,
            "HandleReportNothing" => HandleReportNothingService::handle_report_nothing),
        Template::Kubernetes => add!(methods, svc, name,
            "HandleKubernetes" => HandleKubernetesService::handle_kubernetes),
        Template::Jwt => add!(methods, svc, name,
            "HandleJwt" => HandleJwtService::handle_jwt),
        Template::ApiKey => add!(methods, svc, name,
            "HandleApiKey" => HandleApiKeyService::handle_api_key),
    }
}

/// The gRPC server of an out-of-process adapter: any [`Adapter`] of the adapter API, the
/// same one a mixer could build in, served over Istio 1.4's adapter protocol.
///
/// It serves `InfrastructureBackend` (Validate, CreateSession, CloseSession),
/// `grpc.health.v1.Health`, and the `Handle*Service` of each template the adapter declares
/// ([`AdapterInfo::templates`](mixer_adapter_api::AdapterInfo::templates)).
pub struct Server {
    adapter: Arc<dyn AnyAdapter>,
    params: ParamsReader,
    services: Vec<&'static str>,
    tls: Option<ServerTls>,
    token: TokenLayer,
}

impl Server {
    /// A server for `adapter`.
    pub fn new<A: Adapter>(adapter: A) -> Server {
        Server::from_arc(Arc::new(adapter))
    }

    /// A server for an adapter already shared with other code, or one with its config type
    /// hidden (a built-in adapter from the mixer's registry).
    pub fn from_arc(adapter: Arc<dyn AnyAdapter>) -> Server {
        let services = std::iter::once(BACKEND)
            .chain(adapter.info().templates.iter().map(|t| service(*t)))
            .collect();
        Server {
            adapter,
            params: ParamsReader::default(),
            services,
            tls: None,
            token: TokenLayer::default(),
        }
    }

    /// Reads the params the mixer sends as the adapter's own config message (when its config
    /// has an `adapter` document whose `config` describes the message, as in Istio 1.4):
    /// `file_descriptor_set` is the serialized `google.protobuf.FileDescriptorSet` of that
    /// message (`protoc --include_imports --descriptor_set_out=...`, the same bytes as the
    /// `adapter` document's). The message is read by the protobuf JSON mapping (field names
    /// in lowerCamelCase, enums by name, durations as `"1.5s"`, 64-bit integers as numbers,
    /// fields at their default left out) and compiled like params sent as JSON. Call it again
    /// for more messages.
    ///
    /// # Errors
    ///
    /// The bytes are not a descriptor set, or one that does not resolve.
    pub fn params_message(mut self, file_descriptor_set: &[u8]) -> std::io::Result<Server> {
        self.params
            .add(file_descriptor_set)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        Ok(self)
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

    /// The gRPC services served (full names, health excluded).
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
    /// port 0 and read `listener.local_addr()` first). Once the calls in flight are done,
    /// every handler the adapter built is closed.
    pub async fn serve_with_shutdown(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> std::io::Result<()> {
        let local: SocketAddr = listener.local_addr()?;
        let handlers = Arc::new(Handlers::new(self.adapter.clone(), self.params));
        let svc = Svc::new(handlers.clone());
        let mut methods = mixer_grpc::Methods::new();
        add!(methods, svc, BACKEND,
            "Validate" => InfrastructureBackend::validate,
            "CreateSession" => InfrastructureBackend::create_session,
            "CloseSession" => InfrastructureBackend::close_session);
        for template in self.adapter.info().templates {
            register(&mut methods, &svc, *template);
        }
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
            "mixer adapter {} listening on {local}{security}: {}",
            self.adapter.info().name,
            self.services.join(", ")
        );
        let mut routes = RoutesBuilder::default();
        routes.add_service(health_service);
        // Reflection lists the template services served, so the mixer learns what this
        // adapter accepts (a rule sending it another template is a config error).
        let (reflection, reflection_alpha) = reflection(&self.services)?;
        routes.add_service(reflection);
        routes.add_service(reflection_alpha);
        let calls = tower_layer::Layer::layer(&self.token, routes.routes());
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
        let served = server.serve(listener, shutdown).await;
        handlers.close_all().await;
        served
    }
}

/// gRPC server reflection (v1 and v1alpha) listing `services` only.
#[allow(clippy::type_complexity)]
fn reflection(
    services: &[&'static str],
) -> std::io::Result<(
    tonic_reflection::server::v1::ServerReflectionServer<
        impl tonic_reflection::server::v1::ServerReflection,
    >,
    tonic_reflection::server::v1alpha::ServerReflectionServer<
        impl tonic_reflection::server::v1alpha::ServerReflection,
    >,
)> {
    let builder = || {
        services.iter().fold(
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(mixer_proto::FILE_DESCRIPTOR_SET),
            |b, name| b.with_service_name(*name),
        )
    };
    let broken = |e: tonic_reflection::server::Error| std::io::Error::other(e.to_string());
    Ok((
        builder().build_v1().map_err(broken)?,
        builder().build_v1alpha().map_err(broken)?,
    ))
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

/// The address [`serve`] listens on when neither the command line nor `ADAPTER_ADDR` names
/// one: the port Istio 1.4's examples use, on loopback only, so that nothing is exposed by
/// default.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9070";

/// Serves `adapter` until Ctrl-C or SIGTERM, set up the way a deployment sets up a process:
/// the address is the first command-line argument, else `ADAPTER_ADDR`, else
/// [`DEFAULT_ADDR`]; TLS comes from `ADAPTER_TLS_CERT`, `ADAPTER_TLS_KEY` and
/// `ADAPTER_TLS_CLIENT_CA` ([`ServerTls::from_env`]; plaintext when unset); with
/// `ADAPTER_TOKEN_FILE` set, only calls carrying that token as `authorization: Bearer` are
/// answered ([`RequiredToken::bearer`]). Sessions, health and the template services are
/// [`Server`]'s. A failure to start (a bad address, an unreadable certificate) is printed
/// on stderr and ends the process with a failure status. An adapter's whole `main` is
/// `fn main() -> std::process::ExitCode { mixer_adapter_sdk::serve(MyAdapter) }`.
pub fn serve<A: Adapter>(adapter: A) -> std::process::ExitCode {
    let name = adapter.info().name;
    let started = tokio::runtime::Runtime::new().and_then(|runtime| {
        let mut server = Server::new(adapter);
        if let Some(tls) = ServerTls::from_env()? {
            server = server.tls(tls);
        }
        if let Some(path) = std::env::var_os("ADAPTER_TOKEN_FILE") {
            let token = RequiredToken::bearer(&path).map_err(|e| {
                let path = std::path::Path::new(&path).display();
                std::io::Error::new(e.kind(), format!("ADAPTER_TOKEN_FILE {path}: {e}"))
            })?;
            server = server.require_token(token);
        }
        runtime.block_on(server.serve(listen_addr(DEFAULT_ADDR)))
    });
    match started {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mixer adapter {name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The address to listen on: the first command-line argument, else the `ADAPTER_ADDR`
/// environment variable, else `default`.
pub fn listen_addr(default: &str) -> String {
    std::env::args()
        .nth(1)
        .or_else(|| std::env::var("ADAPTER_ADDR").ok())
        .unwrap_or_else(|| default.to_string())
}
