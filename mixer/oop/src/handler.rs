//! [`RemoteHandler`]: one handler config served by an adapter in another process.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use mixer_adapter_api::{
    AdapterError, CheckHandler, ErrorKind, Exposition, Handler, QuotaArgs, QuotaHandler,
    RemoteConnection, RemoteInstance, ReportHandler,
};
use mixer_model::{CheckResult, Instance, QuotaResult, Template};
use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_proto::{
    authorization, checknothing, listentry, logentry, metric, quota, reportnothing, tracespan,
};
use prost_types::Any;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tonic::{Code, Request};

use crate::breaker::CircuitBreaker;
use crate::convert;
use crate::metrics::{HandlerMetrics, MetricsSet};
use crate::options::OopOptions;
use crate::transport::{self, AdapterChannel, Transport};

/// How the handler passes its config to the adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Session {
    /// Not asked yet (or forgotten after the adapter went away).
    Unknown,
    /// The adapter has no sessions: every call carries the params.
    Stateless,
    /// Calls carry this session id.
    Id(String),
    /// Closed: the handler is retired.
    Closed,
}

/// A handler whose adapter runs in another process and speaks Istio 1.4's adapter protocol
/// over one persistent HTTP/2 channel. It offers every variety; a template the adapter does
/// not serve fails the call (`Unimplemented` → [`ErrorKind::InvalidInstance`]).
pub struct RemoteHandler {
    name: Arc<str>,
    transport: Transport,
    channel: OnceLock<AdapterChannel>,
    timeout: Duration,
    options: OopOptions,
    params: Any,
    inferred_types: std::collections::HashMap<String, Any>,
    session: tokio::sync::Mutex<Session>,
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
            .field("endpoint", self.transport.uri())
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
            channel: OnceLock::new(),
            timeout,
            params,
            inferred_types: convert::inferred_types(instances),
            session: tokio::sync::Mutex::new(if options.sessions {
                Session::Unknown
            } else {
                Session::Stateless
            }),
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

    fn channel(&self) -> AdapterChannel {
        self.channel
            .get_or_init(|| self.transport.connect_lazy())
            .clone()
    }

    fn next_dedup_id(&self) -> String {
        format!(
            "{}-{}",
            self.dedup_prefix,
            self.dedup.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// The `adapter_config` of a call: the session id, or the params. Creates the session on
    /// first use.
    async fn adapter_config(&self, remaining: Duration) -> Result<Any, tonic::Status> {
        let mut session = self.session.lock().await;
        if *session == Session::Unknown {
            let mut client = model::infrastructure_backend_client::InfrastructureBackendClient::new(
                self.channel(),
            );
            let mut req = Request::new(model::CreateSessionRequest {
                adapter_config: Some(self.params.clone()),
                inferred_types: self.inferred_types.clone(),
            });
            req.set_timeout(remaining);
            let started = Instant::now();
            match client.create_session(req).await {
                Ok(resp) => {
                    let resp = resp.into_inner();
                    let ok = resp.status.as_ref().is_none_or(|s| s.code == 0);
                    self.metrics
                        .record("create_session", "ok", started.elapsed());
                    *session = if ok && !resp.session_id.is_empty() {
                        tracing::debug!(handler = %self.name, session = %resp.session_id, "adapter session created");
                        Session::Id(resp.session_id)
                    } else {
                        tracing::warn!(
                            handler = %self.name,
                            status = ?resp.status,
                            "adapter refused a session; sending params with every call"
                        );
                        Session::Stateless
                    };
                }
                Err(s) if s.code() == Code::Unimplemented => {
                    self.metrics
                        .record("create_session", "unimplemented", started.elapsed());
                    *session = Session::Stateless;
                }
                Err(s) => {
                    self.metrics.record(
                        "create_session",
                        map_status(&s).kind.label(),
                        started.elapsed(),
                    );
                    return Err(s);
                }
            }
        }
        Ok(match &*session {
            Session::Id(id) => convert::session_any(id),
            Session::Closed => return Err(tonic::Status::unavailable("handler closed")),
            _ => self.params.clone(),
        })
    }

    /// Forgets the session after errors that suggest the adapter lost it (it restarted, or
    /// says it does not know it); the next call creates a new one.
    async fn maybe_forget_session(&self, status: &tonic::Status) {
        if matches!(
            status.code(),
            Code::Unavailable | Code::NotFound | Code::FailedPrecondition
        ) {
            let mut session = self.session.lock().await;
            if matches!(*session, Session::Id(_)) {
                *session = Session::Unknown;
            }
        }
    }

    /// One call through the breaker, the concurrency limit and the deadline.
    async fn call<T, F, Fut>(&self, call: &'static str, f: F) -> Result<T, AdapterError>
    where
        F: FnOnce(AdapterChannel, Any, Duration) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let started = Instant::now();
        let Some(admission) = self.breaker.admit() else {
            self.metrics.record(call, "circuit_open", started.elapsed());
            return Err(AdapterError::transient(
                ErrorKind::Overloaded,
                format!("adapter of handler {}: circuit open", self.name),
            ));
        };
        let Ok(_permit) = self.limit.try_acquire() else {
            drop(admission);
            self.metrics.record(call, "overloaded", started.elapsed());
            return Err(AdapterError::transient(
                ErrorKind::Overloaded,
                format!(
                    "adapter of handler {}: more than {} calls in flight",
                    self.name, self.options.max_concurrency
                ),
            ));
        };
        self.metrics.in_flight.fetch_add(1, Ordering::Relaxed);
        let _in_flight = InFlight(&self.metrics);
        let deadline = started + self.timeout;
        if let Err(e) = self.transport.ready(&self.name, deadline).await {
            // The adapter was not asked: dropping the admission tells its breaker nothing.
            drop(admission);
            self.metrics.record(call, e.kind.label(), started.elapsed());
            return Err(e);
        }
        let attempt = async {
            let config = self.adapter_config(self.timeout).await?;
            let remaining = deadline.saturating_duration_since(Instant::now());
            f(self.channel(), config, remaining).await
        };
        let result = match tokio::time::timeout_at(deadline, attempt).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(status)) => {
                self.maybe_forget_session(&status).await;
                Err(transport::call_error(&self.name, &status))
            }
            Err(_) => Err(AdapterError::transient(
                ErrorKind::Timeout,
                format!(
                    "adapter of handler {} did not answer within {:?}",
                    self.name, self.timeout
                ),
            )),
        };
        match &result {
            Ok(_) => admission.success(),
            Err(e) if counts_against_breaker(e.kind) => admission.failure(),
            Err(_) => admission.success(),
        }
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => e.kind.label(),
        };
        self.metrics.record(call, outcome, started.elapsed());
        if let Err(e) = &result {
            tracing::debug!(handler = %self.name, call, error = %e, "adapter call failed");
        }
        result
    }

    async fn report_group(
        &self,
        template: Template,
        batch: &[&Instance],
    ) -> Result<(), AdapterError> {
        // One dedup id for every attempt: an adapter that saw the first may drop the retry.
        let dedup_id = self.next_dedup_id();
        let mut backoff = self.options.report_backoff;
        let attempts = self.options.report_attempts.max(1);
        for attempt in 1..=attempts {
            let result = self.report_once(template, batch, &dedup_id).await;
            match result {
                Err(e) if e.retryable && attempt < attempts => {
                    self.metrics.retries.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(handler = %self.name, attempt, error = %e, "report batch failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = backoff.saturating_mul(2);
                }
                other => return other,
            }
        }
        Ok(())
    }

    async fn report_once(
        &self,
        template: Template,
        batch: &[&Instance],
        dedup_id: &str,
    ) -> Result<(), AdapterError> {
        let dedup_id = dedup_id.to_owned();
        macro_rules! report {
            ($module:ident, $($client:ident)::+, $req:ident, $method:ident, $conv:expr) => {
                self.call("report", |ch, cfg, t| {
                    let mut req = Request::new($module::$req {
                        instances: batch.iter().map(|i| $conv(i)).collect(),
                        adapter_config: Some(cfg),
                        dedup_id,
                    });
                    req.set_timeout(t);
                    async move {
                        let mut client = $module::$($client)::+::new(ch);
                        client.$method(req).await.map(|_| ())
                    }
                })
                .await
            };
        }
        match template {
            Template::Metric => report!(
                metric,
                handle_metric_service_client::HandleMetricServiceClient,
                HandleMetricRequest,
                handle_metric,
                convert::metric
            ),
            Template::LogEntry => report!(
                logentry,
                handle_log_entry_service_client::HandleLogEntryServiceClient,
                HandleLogEntryRequest,
                handle_log_entry,
                convert::logentry
            ),
            Template::TraceSpan => report!(
                tracespan,
                handle_trace_span_service_client::HandleTraceSpanServiceClient,
                HandleTraceSpanRequest,
                handle_trace_span,
                convert::tracespan
            ),
            Template::ReportNothing => report!(
                reportnothing,
                handle_report_nothing_service_client::HandleReportNothingServiceClient,
                HandleReportNothingRequest,
                handle_report_nothing,
                |i: &Instance| reportnothing::InstanceMsg {
                    name: i.name.to_string()
                }
            ),
            other => Err(wrong_variety(other, "report")),
        }
    }
}

struct InFlight<'a>(&'a HandlerMetrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

fn wrong_variety(t: Template, call: &str) -> AdapterError {
    AdapterError::permanent(
        ErrorKind::InvalidInstance,
        format!("template {t} cannot go to a {call} call"),
    )
}

/// Whether an error says the adapter is unhealthy (as opposed to "alive, but refuses this").
fn counts_against_breaker(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Unavailable
            | ErrorKind::Timeout
            | ErrorKind::InvalidResponse
            | ErrorKind::Internal
            | ErrorKind::Overloaded
    )
}

/// A gRPC status from the adapter (or the transport) as an adapter error.
pub(crate) fn map_status(s: &tonic::Status) -> AdapterError {
    let message = format!("adapter answered {:?}: {}", s.code(), s.message());
    match s.code() {
        // tonic's own client-side deadline (the `grpc-timeout` we set) ends the call so.
        Code::Cancelled if s.message().contains("Timeout expired") => {
            AdapterError::transient(ErrorKind::Timeout, message)
        }
        Code::Unavailable | Code::Cancelled | Code::Aborted => {
            AdapterError::transient(ErrorKind::Unavailable, message)
        }
        Code::DeadlineExceeded => AdapterError::transient(ErrorKind::Timeout, message),
        Code::ResourceExhausted => AdapterError::transient(ErrorKind::Overloaded, message),
        Code::Unimplemented | Code::InvalidArgument | Code::OutOfRange => {
            AdapterError::permanent(ErrorKind::InvalidInstance, message)
        }
        Code::Internal | Code::Unknown | Code::DataLoss
            if s.message().contains("decode") || s.message().contains("protocol") =>
        {
            AdapterError::permanent(ErrorKind::InvalidResponse, message)
        }
        _ => AdapterError::permanent(ErrorKind::Internal, message),
    }
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

    fn as_exposition(&self) -> Option<&dyn Exposition> {
        Some(self)
    }

    /// Closes the session, if there is one, within the call deadline; forgets the metrics.
    async fn close(&self) {
        self.set.remove(&self.metrics);
        let old = std::mem::replace(&mut *self.session.lock().await, Session::Closed);
        let Session::Id(session_id) = old else {
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

#[async_trait]
impl CheckHandler for RemoteHandler {
    /// One Handle call, bounded by the deadline; never retried (a late answer is useless).
    async fn check(&self, instance: &Instance) -> Result<CheckResult, AdapterError> {
        let dedup_id = self.next_dedup_id();
        macro_rules! check {
            ($module:ident, $($client:ident)::+, $req:ident, $method:ident, $msg:expr) => {
                self.call("check", |ch, cfg, t| {
                    let mut req = Request::new($module::$req {
                        instance: Some($msg),
                        adapter_config: Some(cfg),
                        dedup_id,
                    });
                    req.set_timeout(t);
                    async move {
                        let mut client = $module::$($client)::+::new(ch);
                        client.$method(req).await.map(|r| r.into_inner())
                    }
                })
                .await
            };
        }
        let result = match instance.template {
            Template::Authorization => check!(
                authorization,
                handle_authorization_service_client::HandleAuthorizationServiceClient,
                HandleAuthorizationRequest,
                handle_authorization,
                convert::authorization(instance)
            ),
            Template::CheckNothing => check!(
                checknothing,
                handle_check_nothing_service_client::HandleCheckNothingServiceClient,
                HandleCheckNothingRequest,
                handle_check_nothing,
                checknothing::InstanceMsg {
                    name: instance.name.to_string()
                }
            ),
            Template::ListEntry => check!(
                listentry,
                handle_list_entry_service_client::HandleListEntryServiceClient,
                HandleListEntryRequest,
                handle_list_entry,
                convert::listentry(instance)
            ),
            other => return Err(wrong_variety(other, "check")),
        }?;
        Ok(convert::check_result(&result))
    }
}

#[async_trait]
impl QuotaHandler for RemoteHandler {
    /// One HandleQuota call keyed by the instance name, bounded by the deadline; never
    /// retried here (the front end's caller may retry with the same dedup id).
    async fn allocate(
        &self,
        instance: &Instance,
        args: &QuotaArgs,
    ) -> Result<QuotaResult, AdapterError> {
        if instance.template != Template::Quota {
            return Err(wrong_variety(instance.template, "quota"));
        }
        let dedup_id = if args.deduplication_id.is_empty() {
            self.next_dedup_id()
        } else {
            args.deduplication_id.clone()
        };
        let name = instance.name.to_string();
        let result = self
            .call("quota", |ch, cfg, t| {
                let mut req = Request::new(quota::HandleQuotaRequest {
                    instance: Some(convert::quota(instance)),
                    adapter_config: Some(cfg),
                    dedup_id,
                    quota_request: Some(model::QuotaRequest {
                        quotas: [(
                            name.clone(),
                            model::quota_request::QuotaParams {
                                amount: args.amount,
                                best_effort: args.best_effort,
                            },
                        )]
                        .into(),
                    }),
                });
                req.set_timeout(t);
                async move {
                    let mut client =
                        quota::handle_quota_service_client::HandleQuotaServiceClient::new(ch);
                    client.handle_quota(req).await.map(|r| r.into_inner())
                }
            })
            .await?;
        // An adapter that keyed its only answer differently still answered this quota.
        if !result.quotas.contains_key(&name) && result.quotas.len() == 1 {
            let only = result.quotas.keys().next().cloned().unwrap_or_default();
            return Ok(convert::quota_result(&result, &only));
        }
        Ok(convert::quota_result(&result, &name))
    }
}

#[async_trait]
impl ReportHandler for RemoteHandler {
    /// One Handle call per template in the batch; transient failures are retried with
    /// backoff under the same dedup id.
    async fn report(&self, instances: &[Instance]) -> Result<(), AdapterError> {
        let mut first_error = None;
        for template in [
            Template::Metric,
            Template::LogEntry,
            Template::TraceSpan,
            Template::ReportNothing,
        ] {
            let group: Vec<&Instance> = instances
                .iter()
                .filter(|i| i.template == template)
                .collect();
            if group.is_empty() {
                continue;
            }
            if let Err(e) = self.report_group(template, &group).await {
                first_error.get_or_insert(e);
            }
        }
        if let Some(i) = instances
            .iter()
            .find(|i| i.template.variety() != mixer_model::Variety::Report)
        {
            first_error.get_or_insert(wrong_variety(i.template, "report"));
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Exposition for RemoteHandler {
    fn render(&self, out: &mut String) {
        crate::metrics::render(&self.set, out);
    }
}
