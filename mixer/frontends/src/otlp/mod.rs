//! OTLP ingest: `opentelemetry.proto.collector.logs.v1.LogsService/Export`,
//! `opentelemetry.proto.collector.trace.v1.TraceService/Export` and
//! `opentelemetry.proto.collector.metrics.v1.MetricsService/Export`, what OpenTelemetry SDKs
//! and collectors (the `otlp` exporter over gRPC) send. Every log record, every span and every
//! metric data point becomes one attribute bag, reported through the active snapshot like a
//! Mixer v1 Report record. Metric points add the `otel.metric.*` attributes listed in the
//! README's "OTLP metrics ingest" (and in [`metrics`]); the common attributes below apply to
//! them too, with the point's attributes as the record's.
//!
//! The three methods are served by the mixer's gRPC server ([`crate::grpc::unary_methods`]):
//! [`Otlp::answer_logs`], [`Otlp::answer_traces`] and [`Otlp::answer_metrics`].
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
//! * Some metric data points cannot be mapped (a NaN value, an unspecified temporality,
//!   bucket counts that do not match their bounds...: see [`metrics::fill_point`]): success
//!   with `partial_success`, `rejected_data_points` counting them and `error_message` naming
//!   the first; the other points are reported.
//! * Some instances did not fit their handler's queue: success with `partial_success`:
//!   `rejected_log_records` / `rejected_spans` / `rejected_data_points` counts the records at
//!   least one of whose instances was dropped, and `error_message` says why. That is what OTLP's partial success
//!   is for; the exporter must not retry the whole request, which would duplicate the rest.
//! * Some instances could not be built (a field reads an attribute the record lacks, with no
//!   `|` default): the same `partial_success`, counted as rejected, naming the first failure.
//!   Those instances are not sent; the record's other instances are.
//! * No valid config: UNAVAILABLE "no valid config is active" (retryable for OTLP exporters).
//! * More log records, spans or data points than `--max-export-records` (10,000) in one
//!   export: INVALID_ARGUMENT naming the limit and its flag, which OTLP exporters do not retry;
//!   nothing of it is reported. Keep exporter batches under it (the SDKs send 512, the
//!   Collector's batch processor 8,192).
//! * A request that does not decode: tonic's INTERNAL (decoding happens before the service
//!   sees the request); OTLP exporters do not retry it. Over the 4 MiB limit:
//!   RESOURCE_EXHAUSTED, as gRPC core answers, which OTLP exporters do not retry without a
//!   RetryInfo: keep exporter batches under 4 MiB. Nothing of such a request is reported,
//!   and the server keeps serving.

mod attributes;
pub mod metrics;

use std::sync::Arc;

use mixer_model::{AttributeBag, Timestamp};
use mixer_runtime::{Runtime, Snapshot};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tonic::Status;

pub use attributes::{MAPPED, Origin, fill_log, fill_span, plain_text};

/// The OTLP services (logs, traces, metrics) over one runtime.
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
    /// Records at least one of whose instances was dropped because a queue was full, or
    /// could not be built.
    pub rejected: usize,
    /// Instances dropped.
    pub dropped: usize,
    /// Instances that could not be built (a field read an absent attribute), and the first
    /// such failure.
    pub not_built: usize,
    /// The first instance that could not be built, and why.
    pub first_not_built: Option<String>,
    /// Metric data points that could not be mapped to a bag at all (and were not reported).
    pub invalid: usize,
    /// The first such point (its metric's name), and why.
    pub first_invalid: Option<String>,
}

impl ExportOutcome {
    fn add(&mut self, outcome: &mixer_runtime::ReportOutcome) {
        self.records += 1;
        if outcome.dropped > 0 || !outcome.instance_errors.is_empty() {
            self.rejected += 1;
            self.dropped += outcome.dropped;
        }
        if let Some(first) = outcome.instance_errors.first() {
            self.not_built += outcome.instance_errors.len();
            self.first_not_built
                .get_or_insert_with(|| first.to_string());
        }
    }

    /// A point that was not reported at all.
    fn reject(&mut self, metric: &str, why: String) {
        self.invalid += 1;
        self.first_invalid
            .get_or_insert_with(|| format!("metric {metric:?}: {why}"));
    }

    /// Records and points not (fully) accepted.
    pub fn rejected_total(&self) -> usize {
        self.rejected + self.invalid
    }

    fn message(&self, what: &str) -> String {
        let mut why = Vec::new();
        if let Some(first) = &self.first_invalid {
            why.push(format!(
                "{} could not be mapped (the first: {first})",
                self.invalid
            ));
        }
        if self.dropped > 0 {
            why.push(format!(
                "{} report instance(s) dropped because a handler's queue was full",
                self.dropped
            ));
        }
        if let Some(first) = &self.first_not_built {
            why.push(format!(
                "{} report instance(s) could not be built ({first})",
                self.not_built
            ));
        }
        format!(
            "{} of {} {what} not fully accepted: {}",
            self.rejected_total(),
            self.records + self.invalid,
            why.join("; ")
        )
    }
}

impl Otlp {
    /// The services' implementation, reporting through `runtime`'s active snapshot.
    pub fn new(runtime: Arc<Runtime>) -> Otlp {
        Otlp { runtime }
    }

    /// One snapshot for the whole request, whatever reloads happen meanwhile.
    fn snapshot(&self) -> Result<Arc<Snapshot>, Status> {
        self.runtime
            .ready_snapshot()
            .map_err(crate::request_scope::grpc_status)
    }

    /// INVALID_ARGUMENT (which OTLP exporters do not retry) for an export with more records
    /// than `--max-export-records`.
    fn check_records(&self, records: usize, what: &str) -> Result<(), Status> {
        self.runtime
            .limits()
            .export_records
            .check(records, what)
            .map_err(Status::invalid_argument)
    }

    /// Reports every log record of `request` (on the report threads), without the transport.
    pub async fn export_logs(
        &self,
        request: ExportLogsServiceRequest,
    ) -> Result<ExportOutcome, Status> {
        let snapshot = self.snapshot()?;
        let records = request
            .resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .map(|s| s.log_records.len())
            .sum();
        self.check_records(records, "log records in the export")?;
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
        let spans = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.check_records(spans, "spans in the export")?;
        self.runtime
            .run_report(async move { report_spans(&snapshot, &request).await })
            .await
            .map_err(|e| Status::unavailable(e.to_string()))
    }

    /// Reports every data point of `request` (on the report threads), without the transport.
    /// Points that cannot be mapped are counted in [`ExportOutcome::invalid`].
    pub async fn export_metrics(
        &self,
        request: ExportMetricsServiceRequest,
    ) -> Result<ExportOutcome, Status> {
        let snapshot = self.snapshot()?;
        let points = request
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
            .map(metrics::count_points)
            .sum();
        self.check_records(points, "metric data points in the export")?;
        self.runtime
            .run_report(async move { report_metrics(&snapshot, &request).await })
            .await
            .map_err(|e| Status::unavailable(e.to_string()))
    }
}

async fn report_metrics(
    snapshot: &Snapshot,
    request: &ExportMetricsServiceRequest,
) -> ExportOutcome {
    let mut bag = AttributeBag::new(snapshot.vocabulary().clone());
    let mut outcome = ExportOutcome::default();
    for resource_metrics in &request.resource_metrics {
        for scope_metrics in &resource_metrics.scope_metrics {
            let source = metrics::Source::new(resource_metrics, scope_metrics);
            for metric in &scope_metrics.metrics {
                for point in metrics::points(metric) {
                    bag.clear();
                    match metrics::fill_point(&mut bag, &source, metric, point, Timestamp::now()) {
                        Ok(()) => outcome.add(&mixer_runtime::report(snapshot, &bag).await),
                        Err(why) => outcome.reject(&metric.name, why),
                    }
                }
            }
        }
    }
    outcome
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
                outcome.add(&mixer_runtime::report(snapshot, &bag).await);
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
                outcome.add(&mixer_runtime::report(snapshot, &bag).await);
            }
        }
    }
    outcome
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Otlp {
    /// LogsService/Export: [`Otlp::export_logs`], its outcome as OTLP answers it.
    pub async fn answer_logs(
        &self,
        request: ExportLogsServiceRequest,
    ) -> Result<ExportLogsServiceResponse, Status> {
        let outcome = self.export_logs(request).await?;
        let partial_success = (outcome.rejected > 0).then(|| {
            tracing::debug!(?outcome, "otlp logs: records dropped");
            ExportLogsPartialSuccess {
                rejected_log_records: to_i64(outcome.rejected),
                error_message: outcome.message("log records"),
            }
        });
        Ok(ExportLogsServiceResponse { partial_success })
    }

    /// TraceService/Export: [`Otlp::export_spans`], its outcome as OTLP answers it.
    pub async fn answer_traces(
        &self,
        request: ExportTraceServiceRequest,
    ) -> Result<ExportTraceServiceResponse, Status> {
        let outcome = self.export_spans(request).await?;
        let partial_success = (outcome.rejected > 0).then(|| {
            tracing::debug!(?outcome, "otlp traces: spans dropped");
            ExportTracePartialSuccess {
                rejected_spans: to_i64(outcome.rejected),
                error_message: outcome.message("spans"),
            }
        });
        Ok(ExportTraceServiceResponse { partial_success })
    }

    /// MetricsService/Export: [`Otlp::export_metrics`], its outcome as OTLP answers it.
    pub async fn answer_metrics(
        &self,
        request: ExportMetricsServiceRequest,
    ) -> Result<ExportMetricsServiceResponse, Status> {
        let outcome = self.export_metrics(request).await?;
        let rejected = outcome.rejected_total();
        let partial_success = (rejected > 0).then(|| {
            tracing::debug!(?outcome, "otlp metrics: data points rejected");
            ExportMetricsPartialSuccess {
                rejected_data_points: to_i64(rejected),
                error_message: outcome.message("data points"),
            }
        });
        Ok(ExportMetricsServiceResponse { partial_success })
    }
}
