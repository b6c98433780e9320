//! [`RemoteHandler`]: one handler config served by an adapter in another process.

mod attributes;
mod call;
mod check;
mod report;
mod session;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use mixer_adapter_api::{
    AdapterError, AttributeHandler, CheckHandler, ErrorKind, Exposition, Handler, QuotaHandler,
    ReportHandler,
};
use mixer_model::Template;
use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_remote::{RemoteConnection, RemoteInstance};
use prost_types::Any;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tonic::Request;

use crate::breaker::CircuitBreaker;
use crate::connection::AdapterConnection;
use crate::convert;
use crate::metrics::{HandlerMetrics, MetricsSet};
use crate::options::OopOptions;
use crate::transport::{AdapterChannel, Transport, map_status};
use session::Session;

/// A handler whose adapter runs in another process and speaks Istio 1.4's adapter protocol
/// over one persistent HTTP/2 channel. It offers every variety; a template the adapter does
/// not serve fails the call (`Unimplemented` → [`ErrorKind::InvalidInstance`]).
pub struct RemoteHandler {
    name: Arc<str>,
    transport: Transport,
    connection: OnceLock<AdapterConnection>,
    timeout: Duration,
    options: OopOptions,
    params: Any,
    inferred_types: std::collections::HashMap<String, Any>,
    session: tokio::sync::Mutex<Session>,
    /// Sessions created so far: numbers each, so a late failure forgets only its own.
    sessions_created: AtomicU64,
    limit: Semaphore,
    breaker: Arc<CircuitBreaker>,
    metrics: Arc<HandlerMetrics>,
    set: Arc<MetricsSet>,
    dedup: AtomicU64,
    dedup_prefix: String,
}

impl std::fmt::Debug for RemoteHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteHandler")
            .field("name", &self.name)
            .field("endpoint", self.transport.endpoint())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl RemoteHandler {
    /// A handler for the adapter `connection` names, sending `params` (already encoded) as
    /// its config. Nothing is connected yet: the channel connects on the first call, so a
    /// down adapter does not fail the config.
    pub(crate) fn new(
        name: Arc<str>,
        connection: &RemoteConnection,
        params: Any,
        instances: &[RemoteInstance],
        options: OopOptions,
        set: Arc<MetricsSet>,
    ) -> Result<RemoteHandler, AdapterError> {
        let timeout = connection.timeout.unwrap_or(options.default_timeout);
        let transport = Transport::new(connection, timeout).map_err(|(field, m)| {
            AdapterError::permanent(ErrorKind::Internal, format!("{field}: {m}"))
        })?;
        let breaker = Arc::new(CircuitBreaker::new(options.breaker));
        let seq = set.next_seq();
        let metrics = Arc::new(HandlerMetrics::new(name.clone(), breaker.clone(), seq));
        set.add(&metrics);
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Ok(RemoteHandler {
            dedup_prefix: format!("{name}-{start:x}-{seq}"),
            name,
            transport,
            connection: OnceLock::new(),
            timeout,
            params,
            inferred_types: convert::inferred_types(instances),
            session: tokio::sync::Mutex::new(if options.sessions {
                Session::Unknown
            } else {
                Session::Stateless
            }),
            sessions_created: AtomicU64::new(0),
            limit: Semaphore::new(options.max_concurrency.max(1)),
            breaker,
            metrics,
            set,
            dedup: AtomicU64::new(0),
            options,
        })
    }

    /// The handler's metrics (also rendered by [`Handler::as_exposition`]).
    pub fn metrics(&self) -> &HandlerMetrics {
        &self.metrics
    }

    /// The per-call deadline.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn connection(&self) -> &AdapterConnection {
        self.connection
            .get_or_init(|| self.transport.connect_lazy())
    }

    fn channel(&self) -> AdapterChannel {
        self.transport.channel(self.connection())
    }

    fn next_dedup_id(&self) -> String {
        format!(
            "{}-{}",
            self.dedup_prefix,
            self.dedup.fetch_add(1, Ordering::Relaxed)
        )
    }
}

fn wrong_variety(t: Template, call: &str) -> AdapterError {
    AdapterError::permanent(
        ErrorKind::InvalidInstance,
        format!("template {t} cannot go to a {call} call"),
    )
}

#[async_trait]
impl Handler for RemoteHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }

    fn as_quota(&self) -> Option<&dyn QuotaHandler> {
        Some(self)
    }

    fn as_report(&self) -> Option<&dyn ReportHandler> {
        Some(self)
    }

    fn as_attributes(&self) -> Option<&dyn AttributeHandler> {
        Some(self)
    }

    fn as_exposition(&self) -> Option<&dyn Exposition> {
        Some(self)
    }

    /// Closes the session, if there is one, within the call deadline; forgets the metrics.
    async fn close(&self) {
        self.set.remove(&self.metrics);
        let old = std::mem::replace(&mut *self.session.lock().await, Session::Closed);
        let Session::Id(session_id, _) = old else {
            return;
        };
        // Without a token the call below fails at once, and says so in the metrics.
        let deadline = Instant::now() + self.timeout;
        let _ = self.transport.ready(&self.name, deadline).await;
        let mut client =
            model::infrastructure_backend_client::InfrastructureBackendClient::new(self.channel());
        let mut req = Request::new(model::CloseSessionRequest {
            session_id: session_id.clone(),
        });
        req.set_timeout(self.timeout);
        let started = Instant::now();
        let outcome = match tokio::time::timeout(self.timeout, client.close_session(req)).await {
            Ok(Ok(_)) => "ok",
            Ok(Err(s)) => map_status(&s).kind.label(),
            Err(_) => "timeout",
        };
        self.metrics
            .record("close_session", outcome, started.elapsed());
        tracing::debug!(handler = %self.name, session = %session_id, outcome, "adapter session closed");
    }
}

impl Exposition for RemoteHandler {
    fn render(&self, out: &mut String) {
        crate::metrics::render(&self.set, out);
    }
}
