//! OTLP ingest: `opentelemetry.proto.collector.logs.v1.LogsService/Export` and
//! `opentelemetry.proto.collector.trace.v1.TraceService/Export`, what OpenTelemetry SDKs and
//! collectors (the `otlp` exporter over gRPC) send. Every log record and every span becomes one
//! attribute bag, reported through the active snapshot like a Mixer v1 Report record.
//!
//! ```no_run
//! # async fn serve(runtime: std::sync::Arc<mixer_runtime::Runtime>) -> Result<(), Box<dyn std::error::Error>> {
//! tonic::transport::Server::builder()
//!     .add_service(mixer_frontends::otlp::logs_service(runtime.clone()))
//!     .add_service(mixer_frontends::otlp::trace_service(runtime))
//!     .serve("0.0.0.0:9091".parse()?)
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! ## From a record to attributes
//!
//! OTLP attributes have free-form keys. All of them stay readable, and the well-known ones
//! also become Istio's standard attributes:
//!
//! | attribute | from |
//! |---|---|
//! | `otel.attributes` (STRING_MAP) | every attribute of the resource, the scope and the record or span, merged: on a key present at several levels, the record's wins over the scope's, which wins over the resource's |
//! | `otel.resource` (STRING_MAP) | the resource's attributes alone (`service.name`, `k8s.namespace.name`, ...) |
//! | `otel.scope.name`, `otel.scope.version` | the instrumentation scope |
//!
//! Values become text in the maps: strings as they are, numbers and booleans printed, bytes
//! as lower-case hex, lists and key-value lists as compact JSON. Rules read them as
//! `otel.attributes["http.route"]` or `otel.resource["service.name"]`.
//!
//! The well-known keys, looked up in the merged attributes (current semantic-convention names
//! first; the deprecated name is used only when the current one is absent):
//!
//! | attribute | key |
//! |---|---|
//! | `request.method` | `http.request.method`, `http.method` |
//! | `request.scheme` | `url.scheme`, `http.scheme` |
//! | `request.host` | `server.address`, `http.host` |
//! | `destination.service.host` | `server.address` |
//! | `destination.port` | `server.port`, `destination.port` |
//! | `destination.ip` | `destination.address` (when it is an IP address) |
//! | `source.ip`, `source.port` | `client.address` (`http.client_ip`) when it is an IP address; `client.port` |
//! | `request.path` | `url.path` + `?` + `url.query`, else `http.target` |
//! | `request.url_path`, `request.query_params` | `request.path` split at `?` |
//! | `request.headers`, `response.headers` | `http.request.header.<name>` / `http.response.header.<name>`: name lower-cased, list values joined with `,` |
//! | `request.useragent` | `user_agent.original`, `http.user_agent` |
//! | `request.size`, `request.total_size` | `http.request.body.size` (`http.request_content_length`); `http.request.size` |
//! | `response.size`, `response.total_size` | `http.response.body.size` (`http.response_content_length`); `http.response.size` |
//! | `response.code` | `http.response.status_code`, `http.status_code` |
//! | `response.grpc_status` | `rpc.grpc.status_code` (as text, as Istio had it) |
//! | `api.service`, `api.operation` | `rpc.service`, `rpc.method` |
//! | `context.protocol` | `grpc` when `rpc.system` is `grpc`, else `http` when there is an HTTP method; unset otherwise |
//!
//! A value that does not fit the attribute's type (a `client.address` that is a host name) is
//! left out of that attribute; it stays in `otel.attributes`.
//!
//! Log records add:
//!
//! | attribute | from |
//! |---|---|
//! | `request.time` | `time_unix_nano`, else `observed_time_unix_nano` (unset when both are 0) |
//! | `context.time` | the same, else the mixer's clock |
//! | `otel.severity` | `severity_text`, else OTel's short name for `severity_number` (`INFO`, `WARN2` ...) |
//! | `otel.severity_number` | `severity_number`, when set |
//! | `otel.body` | `body` as text (as above) |
//! | `otel.event_name` | `event_name` |
//! | `otel.trace_id`, `otel.span_id` | the record's trace context, lower-case hex (unset when empty or all zero) |
//!
//! Spans add:
//!
//! | attribute | from |
//! |---|---|
//! | `otel.trace_id`, `otel.span_id`, `otel.parent_span_id` | lower-case hex (unset when empty or all zero: a root span has no parent) |
//! | `otel.span_name` | `name` |
//! | `otel.span_kind` | `kind`: `unspecified`, `internal`, `server`, `client`, `producer`, `consumer` |
//! | `context.reporter.kind` | `inbound` for server and consumer spans, `outbound` for client and producer spans (the callee's and the caller's view, as Istio's proxies reported them) |
//! | `otel.status_code`, `otel.status_message` | `status`: `unset`, `ok`, `error`; its message |
//! | `request.time`, `response.time` | `start_time_unix_nano`, `end_time_unix_nano` |
//! | `response.duration` | end - start |
//! | `context.time` | the end time, else the start time, else the mixer's clock |
//!
//! Not mapped: span events and links, dropped-attribute counts, flags, trace state, schema URLs,
//! `entity_refs`, and values given as string-table indices (profiles only).
//!
//! ## Answers
//!
//! * Every record reported: the empty (successful) export response.
//! * Some instances did not fit their handler's queue: success with `partial_success`:
//!   `rejected_log_records` / `rejected_spans` counts the records at least one of whose
//!   instances was dropped, and `error_message` says why. That is what OTLP's partial success
//!   is for; the exporter must not retry the whole request, which would duplicate the rest.
//! * No valid config: UNAVAILABLE "no valid config" (retryable for OTLP exporters).
//! * A request that does not decode: tonic's INTERNAL (decoding happens before the service
//!   sees the request); OTLP exporters do not retry it. Over tonic's 4 MiB limit:
//!   OUT_OF_RANGE, which OTLP counts as retryable, so an exporter retries a too-large batch
//!   until its retry budget runs out: keep exporter batches under 4 MiB. Nothing of such a
//!   request is reported, and the server keeps serving.

mod attributes;

use std::sync::Arc;

use mixer_model::{AttributeBag, Timestamp};
use mixer_runtime::{Runtime, Snapshot};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tonic::{Request, Response, Status};

pub use attributes::{MAPPED, Origin, fill_log, fill_span, plain_text};

/// The OTLP logs service, ready to add to a tonic server.
pub fn logs_service(runtime: Arc<Runtime>) -> LogsServiceServer<Otlp> {
    LogsServiceServer::new(Otlp::new(runtime))
}

/// The OTLP trace service, ready to add to a tonic server.
pub fn trace_service(runtime: Arc<Runtime>) -> TraceServiceServer<Otlp> {
    TraceServiceServer::new(Otlp::new(runtime))
}

/// Both OTLP services over one runtime; [`logs_service`] and [`trace_service`] wrap it.
#[derive(Clone)]
pub struct Otlp {
    runtime: Arc<Runtime>,
}

impl std::fmt::Debug for Otlp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Otlp").finish_non_exhaustive()
    }
}

/// What one export did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportOutcome {
    /// Records (log records or spans) reported.
    pub records: usize,
    /// Records at least one of whose instances was dropped because a queue was full.
    pub rejected: usize,
    /// Instances dropped.
    pub dropped: usize,
}

impl ExportOutcome {
    fn add(&mut self, outcome: &mixer_runtime::ReportOutcome) {
        self.records += 1;
        if outcome.dropped > 0 {
            self.rejected += 1;
            self.dropped += outcome.dropped;
        }
    }

    fn message(&self, what: &str) -> String {
        format!(
            "{} of {} {what} not fully accepted: {} report instance(s) dropped because a handler's queue was full",
            self.rejected, self.records, self.dropped
        )
    }
}

impl Otlp {
    /// The services' implementation, reporting through `runtime`'s active snapshot.
    pub fn new(runtime: Arc<Runtime>) -> Otlp {
        Otlp { runtime }
    }

    fn snapshot(&self) -> Result<Arc<Snapshot>, Status> {
        if self.runtime.is_ready() {
            // One snapshot for the whole request, whatever reloads happen meanwhile.
            Ok(self.runtime.snapshot())
        } else {
            Err(Status::unavailable("no valid config"))
        }
    }

    /// Reports every log record of `request` (on the report threads), without the transport.
    pub async fn export_logs(
        &self,
        request: ExportLogsServiceRequest,
    ) -> Result<ExportOutcome, Status> {
        let snapshot = self.snapshot()?;
        self.runtime
            .run_report(async move { report_logs(&snapshot, &request).await })
            .await
            .map_err(|e| Status::unavailable(e.to_string()))
    }

    /// Reports every span of `request` (on the report threads), without the transport.
    pub async fn export_spans(
        &self,
        request: ExportTraceServiceRequest,
    ) -> Result<ExportOutcome, Status> {
        let snapshot = self.snapshot()?;
        self.runtime
            .run_report(async move { report_spans(&snapshot, &request).await })
            .await
            .map_err(|e| Status::unavailable(e.to_string()))
    }
}

async fn report_logs(snapshot: &Snapshot, request: &ExportLogsServiceRequest) -> ExportOutcome {
    let mut bag = AttributeBag::new(snapshot.vocabulary().clone());
    let mut outcome = ExportOutcome::default();
    for resource_logs in &request.resource_logs {
        for scope_logs in &resource_logs.scope_logs {
            let origin = Origin::new(resource_logs.resource.as_ref(), scope_logs.scope.as_ref());
            for record in &scope_logs.log_records {
                bag.clear();
                fill_log(&mut bag, &origin, record, Timestamp::now());
                outcome.add(&snapshot.report(&bag).await);
            }
        }
    }
    outcome
}

async fn report_spans(snapshot: &Snapshot, request: &ExportTraceServiceRequest) -> ExportOutcome {
    let mut bag = AttributeBag::new(snapshot.vocabulary().clone());
    let mut outcome = ExportOutcome::default();
    for resource_spans in &request.resource_spans {
        for scope_spans in &resource_spans.scope_spans {
            let origin = Origin::new(resource_spans.resource.as_ref(), scope_spans.scope.as_ref());
            for span in &scope_spans.spans {
                bag.clear();
                fill_span(&mut bag, &origin, span, Timestamp::now());
                outcome.add(&snapshot.report(&bag).await);
            }
        }
    }
    outcome
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[tonic::async_trait]
impl LogsService for Otlp {
    async fn export(
        &self,
        request: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        let outcome = self.export_logs(request.into_inner()).await?;
        let partial_success = (outcome.rejected > 0).then(|| {
            tracing::debug!(?outcome, "otlp logs: records dropped");
            ExportLogsPartialSuccess {
                rejected_log_records: to_i64(outcome.rejected),
                error_message: outcome.message("log records"),
            }
        });
        Ok(Response::new(ExportLogsServiceResponse { partial_success }))
    }
}

#[tonic::async_trait]
impl TraceService for Otlp {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let outcome = self.export_spans(request.into_inner()).await?;
        let partial_success = (outcome.rejected > 0).then(|| {
            tracing::debug!(?outcome, "otlp traces: spans dropped");
            ExportTracePartialSuccess {
                rejected_spans: to_i64(outcome.rejected),
                error_message: outcome.message("spans"),
            }
        });
        Ok(Response::new(ExportTraceServiceResponse {
            partial_success,
        }))
    }
}
