//! The otlp handler: an OTLP/gRPC span exporter, log exporter and meter provider over one
//! tonic channel, fed by tracespan, logentry and metric instances.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, ErrorKind, Handler, ReportHandler};
use mixer_model::{Instance, Template, Value};
use opentelemetry::InstrumentationScope;
use opentelemetry::KeyValue;
use opentelemetry::logs::LoggerProvider as _;
use opentelemetry::metrics::{Counter, Gauge, Histogram, MeterProvider as _};
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::{
    LogBatch, LogExporter as _, SdkLogRecord, SdkLogger, SdkLoggerProvider,
};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue, MetadataMap};

use crate::config::{Kind, MetricSpec, OtlpConfig, ResourceValue, Temporality, instance_key};
use crate::convert;

enum Instrument {
    Counter(Counter<f64>),
    Gauge(Gauge<f64>),
    Histogram(Histogram<f64>),
}

struct Metric {
    spec: MetricSpec,
    instrument: Instrument,
}

/// The metric exporter inside the meter provider's periodic reader: exports run on the
/// reader's own thread, so their failures cannot reach a `report` call; they are logged with
/// the handler's name and counted instead.
struct CountingMetricExporter {
    inner: opentelemetry_otlp::MetricExporter,
    handler: Arc<str>,
    failures: Arc<AtomicU64>,
    last_error: Arc<Mutex<Option<OTelSdkError>>>,
}

impl PushMetricExporter for CountingMetricExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        if let Err(e) = &result {
            *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(clone_error(e));
            self.failures.fetch_add(1, Ordering::SeqCst);
            tracing::warn!(handler = %self.handler, error = %e, "otlp metric export failed");
        }
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> opentelemetry_sdk::metrics::Temporality {
        self.inner.temporality()
    }
}

/// A built otlp handler.
///
/// Spans and log records of one `report` batch are exported synchronously, one export call
/// per signal (split into calls of at most `batch.maxExportBatchSize` records), so a failed
/// export fails the batch and the runtime counts its records as dropped. Metric instances are
/// recorded into OpenTelemetry instruments and exported every `batch.scheduledDelay` by the
/// SDK's periodic reader, and once more by [`Handler::close`].
pub struct OtlpHandler {
    name: Arc<str>,
    spans: opentelemetry_otlp::SpanExporter,
    logs: opentelemetry_otlp::LogExporter,
    /// Only there to create log records (the SDK keeps their constructor private); it has no
    /// processor and exports nothing.
    _logger_provider: SdkLoggerProvider,
    logger: SdkLogger,
    /// `None` when no metric is configured (no exporter, no reader thread).
    meter_provider: Option<SdkMeterProvider>,
    metrics: Vec<Metric>,
    /// Instance key (see [`instance_key`]) to index in `metrics`.
    by_instance: HashMap<String, usize>,
    max_export_batch_size: usize,
    budget: Duration,
    metric_export_failures: Arc<AtomicU64>,
    last_metric_error: Arc<Mutex<Option<OTelSdkError>>>,
    closed: AtomicBool,
    /// Scopes by instance name, built once.
    scopes: Mutex<HashMap<Arc<str>, InstrumentationScope>>,
}

fn build_error(what: &str, e: impl std::fmt::Display) -> AdapterError {
    AdapterError::permanent(
        ErrorKind::Internal,
        format!("could not build the OTLP {what}: {e}"),
    )
}

fn resource(config: &OtlpConfig) -> Resource {
    let attributes = config.resource.iter().map(|(k, v)| {
        let value: opentelemetry::Value = match v {
            ResourceValue::String(s) => s.clone().into(),
            ResourceValue::Int(i) => (*i).into(),
            ResourceValue::Double(d) => (*d).into(),
            ResourceValue::Bool(b) => (*b).into(),
        };
        KeyValue::new(k.clone(), value)
    });
    Resource::builder_empty()
        .with_attributes(attributes)
        .build()
}

impl OtlpHandler {
    /// Builds the exporters of a validated config. Must run inside a tokio runtime: the gRPC
    /// channel's connection task is spawned on it (it connects lazily, on the first export).
    pub fn new(config: OtlpConfig, name: Arc<str>) -> Result<OtlpHandler, AdapterError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(AdapterError::permanent(
                ErrorKind::Internal,
                "the otlp handler must be built inside a tokio runtime",
            ));
        }
        let channel = tonic::transport::Endpoint::from_shared(config.endpoint.clone())
            .map_err(|e| build_error("channel", e))?
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .connect_lazy();
        let mut metadata = MetadataMap::new();
        for (k, v) in &config.headers {
            let key = AsciiMetadataKey::from_bytes(k.as_bytes())
                .map_err(|e| build_error("headers", e))?;
            let value: AsciiMetadataValue = v
                .parse()
                .map_err(|_| build_error("headers", format!("invalid value for {k}")))?;
            metadata.insert(key, value);
        }
        // The exporter's retry loop stops starting attempts once its timeout has elapsed since
        // the first one; each attempt is bounded by the channel's own timeout.
        let (retry_policy, retry_budget) = match config.retry {
            Some(r) => (
                opentelemetry_otlp::RetryPolicy::recommended()
                    .with_max_retries(usize::MAX)
                    .with_initial_delay(r.initial_backoff)
                    .with_max_delay(r.max_backoff)
                    .with_max_jitter(r.initial_backoff / 4),
                r.max_elapsed_time,
            ),
            None => (opentelemetry_otlp::RetryPolicy::disabled(), config.timeout),
        };
        let resource = resource(&config);

        let mut spans = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_channel(channel.clone())
            .with_metadata(metadata.clone())
            .with_retry_policy(retry_policy.clone())
            .with_timeout(retry_budget)
            .build()
            .map_err(|e| build_error("span exporter", e))?;
        spans.set_resource(&resource);
        let mut logs = opentelemetry_otlp::LogExporter::builder()
            .with_tonic()
            .with_channel(channel.clone())
            .with_metadata(metadata.clone())
            .with_retry_policy(retry_policy.clone())
            .with_timeout(retry_budget)
            .build()
            .map_err(|e| build_error("log exporter", e))?;
        logs.set_resource(&resource);
        let temporality = match config.temporality {
            Temporality::Cumulative => opentelemetry_sdk::metrics::Temporality::Cumulative,
            Temporality::Delta => opentelemetry_sdk::metrics::Temporality::Delta,
        };
        let metric_export_failures = Arc::new(AtomicU64::new(0));
        let last_metric_error = Arc::new(Mutex::new(None));
        let meter_provider = if config.metrics.is_empty() {
            None
        } else {
            let metric_exporter = opentelemetry_otlp::MetricExporter::builder()
                .with_tonic()
                .with_temporality(temporality)
                .with_channel(channel)
                .with_metadata(metadata)
                .with_retry_policy(retry_policy)
                .with_timeout(retry_budget)
                .build()
                .map_err(|e| build_error("metric exporter", e))?;
            // The SDK's periodic reader exports from a thread of its own.
            let reader = PeriodicReader::builder(CountingMetricExporter {
                inner: metric_exporter,
                handler: name.clone(),
                failures: metric_export_failures.clone(),
                last_error: last_metric_error.clone(),
            })
            .with_interval(config.scheduled_delay)
            .build();
            Some(
                SdkMeterProvider::builder()
                    .with_resource(resource.clone())
                    .with_reader(reader)
                    .build(),
            )
        };

        let mut metrics = Vec::with_capacity(config.metrics.len());
        let mut by_instance = HashMap::new();
        for spec in config.metrics.iter().cloned() {
            let key = instance_key(&spec.instance_name);
            let Some(provider) = &meter_provider else {
                break;
            };
            let meter = provider.meter_with_scope(convert::scope(&key));
            let instrument = match spec.kind {
                Kind::Counter => Instrument::Counter(
                    meter
                        .f64_counter(spec.name.clone())
                        .with_unit(spec.unit.clone())
                        .with_description(spec.description.clone())
                        .build(),
                ),
                Kind::Gauge => Instrument::Gauge(
                    meter
                        .f64_gauge(spec.name.clone())
                        .with_unit(spec.unit.clone())
                        .with_description(spec.description.clone())
                        .build(),
                ),
                Kind::Histogram => {
                    let mut builder = meter
                        .f64_histogram(spec.name.clone())
                        .with_unit(spec.unit.clone())
                        .with_description(spec.description.clone());
                    if let Some(bounds) = &spec.buckets {
                        builder = builder.with_boundaries(bounds.clone());
                    }
                    Instrument::Histogram(builder.build())
                }
            };
            by_instance.insert(key, metrics.len());
            metrics.push(Metric { spec, instrument });
        }

        let logger_provider = SdkLoggerProvider::builder().build();
        let logger = logger_provider.logger("mixer");
        Ok(OtlpHandler {
            name,
            spans,
            logs,
            _logger_provider: logger_provider,
            logger,
            meter_provider,
            metrics,
            by_instance,
            max_export_batch_size: config.max_export_batch_size,
            budget: config.export_budget() + Duration::from_secs(1),
            metric_export_failures,
            last_metric_error,
            closed: AtomicBool::new(false),
            scopes: Mutex::new(HashMap::new()),
        })
    }

    /// How many periodic metric exports have failed (each is also logged).
    pub fn metric_export_failures(&self) -> u64 {
        self.metric_export_failures.load(Ordering::SeqCst)
    }

    /// Exports the metrics recorded so far now, instead of at the next interval; returns the
    /// export's error.
    pub async fn flush_metrics(&self) -> Result<(), AdapterError> {
        let Some(provider) = self.meter_provider.clone() else {
            return Ok(());
        };
        let failures_before = self.metric_export_failures();
        // The SDK's flush blocks until its reader thread has exported.
        let flushed = tokio::time::timeout(
            self.budget,
            tokio::task::spawn_blocking(move || provider.force_flush()),
        )
        .await;
        match flushed {
            Ok(Ok(result)) => result.map_err(|e| {
                // The SDK reports a generic "failed to flush"; the exporter's own error
                // names the gRPC code.
                let exported = (self.metric_export_failures() > failures_before)
                    .then(|| {
                        self.last_metric_error
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .as_ref()
                            .map(clone_error)
                    })
                    .flatten();
                export_error("metric", exported.unwrap_or(e))
            }),
            Ok(Err(join)) => Err(AdapterError::permanent(
                ErrorKind::Internal,
                format!("metric flush panicked: {join}"),
            )),
            Err(_) => Err(AdapterError::transient(
                ErrorKind::Timeout,
                format!("metric flush took longer than {:?}", self.budget),
            )),
        }
    }

    fn scope(&self, name: &Arc<str>) -> InstrumentationScope {
        let mut scopes = self.scopes.lock().unwrap_or_else(|e| e.into_inner());
        if scopes.len() > 10_000 {
            // Instance names come from config; this only guards against surprises.
            scopes.clear();
        }
        scopes
            .entry(name.clone())
            .or_insert_with(|| convert::scope(name))
            .clone()
    }

    fn record_metric(&self, metric: &Metric, instance: &Instance) -> Result<(), String> {
        let value = match instance.value("value") {
            Some(v) => numeric_value(v)?,
            None => return Err("the instance has no value".into()),
        };
        let attributes = convert::attributes(instance.map("dimensions").unwrap_or(&[]));
        match &metric.instrument {
            Instrument::Counter(c) => {
                if !(value >= 0.0 && value.is_finite()) {
                    return Err(format!("a counter cannot be incremented by {value}"));
                }
                c.add(value, &attributes);
            }
            Instrument::Gauge(g) => {
                if !value.is_finite() {
                    return Err(format!("a gauge cannot be set to {value}"));
                }
                g.record(value, &attributes);
            }
            Instrument::Histogram(h) => {
                if !value.is_finite() {
                    return Err(format!("a histogram cannot record {value}"));
                }
                h.record(value, &attributes);
            }
        }
        Ok(())
    }

    async fn bounded(
        &self,
        what: &str,
        export: impl Future<Output = OTelSdkResult>,
    ) -> Result<(), AdapterError> {
        match tokio::time::timeout(self.budget, export).await {
            Ok(result) => result.map_err(|e| export_error(what, e)),
            Err(_) => Err(AdapterError::transient(
                ErrorKind::Timeout,
                format!("{what} export took longer than {:?}", self.budget),
            )),
        }
    }

    async fn export_spans(&self, spans: Vec<SpanData>) -> Result<(), AdapterError> {
        let total = spans.len();
        let mut sent = 0;
        for chunk in spans.chunks(self.max_export_batch_size) {
            if let Err(mut e) = self
                .bounded("span", self.spans.export(chunk.to_vec()))
                .await
            {
                e.message = format!(
                    "{} ({} of {total} spans not exported)",
                    e.message,
                    total - sent
                );
                return Err(e);
            }
            sent += chunk.len();
        }
        Ok(())
    }

    async fn export_logs(
        &self,
        records: Vec<(SdkLogRecord, InstrumentationScope)>,
    ) -> Result<(), AdapterError> {
        let total = records.len();
        let mut sent = 0;
        for chunk in records.chunks(self.max_export_batch_size) {
            let pairs: Vec<(&SdkLogRecord, &InstrumentationScope)> =
                chunk.iter().map(|(r, s)| (r, s)).collect();
            let result = self
                .bounded("log", self.logs.export(LogBatch::new(&pairs)))
                .await;
            if let Err(mut e) = result {
                e.message = format!(
                    "{} ({} of {total} log records not exported)",
                    e.message,
                    total - sent
                );
                return Err(e);
            }
            sent += chunk.len();
        }
        Ok(())
    }
}

fn clone_error(e: &OTelSdkError) -> OTelSdkError {
    match e {
        OTelSdkError::AlreadyShutdown => OTelSdkError::AlreadyShutdown,
        OTelSdkError::Timeout(d) => OTelSdkError::Timeout(*d),
        OTelSdkError::InternalFailure(m) => OTelSdkError::InternalFailure(m.clone()),
    }
}

/// The export error as an adapter error. The OTLP exporter reports a failed export (after its
/// retries) as text naming the gRPC code; the code decides the kind and whether the failure
/// is transient.
pub fn export_error(what: &str, e: OTelSdkError) -> AdapterError {
    let message = format!("OTLP {what} export failed: {e}");
    match &e {
        OTelSdkError::AlreadyShutdown => AdapterError::permanent(ErrorKind::Internal, message),
        OTelSdkError::Timeout(_) => AdapterError::transient(ErrorKind::Timeout, message),
        OTelSdkError::InternalFailure(text) => {
            let code = text.split_once("gRPC code: ").map(|(_, rest)| {
                rest.split(|c: char| !c.is_ascii_alphabetic())
                    .next()
                    .unwrap_or("")
            });
            match code {
                Some("Unavailable" | "Aborted") => {
                    AdapterError::transient(ErrorKind::Unavailable, message)
                }
                Some("DeadlineExceeded" | "Cancelled") => {
                    AdapterError::transient(ErrorKind::Timeout, message)
                }
                Some("ResourceExhausted") => {
                    AdapterError::transient(ErrorKind::Overloaded, message)
                }
                Some(
                    "InvalidArgument" | "Unimplemented" | "Unknown" | "DataLoss" | "OutOfRange",
                ) => AdapterError::permanent(ErrorKind::InvalidResponse, message),
                _ => AdapterError::permanent(ErrorKind::Internal, message),
            }
        }
    }
}

/// The instance's value as a number: INT64 and DOUBLE as they are, DURATION in seconds (as
/// Istio), BOOL as 1 or 0, STRING parsed as a number; anything else is an error.
pub fn numeric_value(v: &Value) -> Result<f64, String> {
    match v {
        Value::Int64(i) => Ok(*i as f64),
        Value::Double(d) => Ok(*d),
        Value::Duration(d) => Ok(d.0 as f64 / 1e9),
        Value::Bool(b) => Ok(if *b { 1.0 } else { 0.0 }),
        Value::String(s) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| format!("{s:?} is not a number")),
        other => Err(format!(
            "a {} value cannot be a metric value",
            other.value_type()
        )),
    }
}

#[async_trait]
impl Handler for OtlpHandler {
    fn as_report(&self) -> Option<&dyn ReportHandler> {
        Some(self)
    }

    async fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        // Shutting the meter provider down exports what was recorded since the last interval;
        // it blocks, so it runs on the blocking pool, within the export budget.
        let shutdown = match self.meter_provider.clone() {
            Some(provider) => tokio::task::spawn_blocking(move || provider.shutdown()),
            None => tokio::task::spawn_blocking(|| Ok(())),
        };
        match tokio::time::timeout(self.budget, shutdown).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => {
                tracing::warn!(handler = %self.name, error = %e, "otlp metrics not flushed on close");
            }
            Ok(Err(e)) => {
                tracing::warn!(handler = %self.name, error = %e, "otlp metrics shutdown panicked");
            }
            Err(_) => {
                tracing::warn!(handler = %self.name, "otlp metrics shutdown timed out");
            }
        }
        // Spans and logs are exported synchronously: nothing is pending.
        let _ = self.spans.shutdown();
        let _ = self.logs.shutdown();
    }
}

impl Drop for OtlpHandler {
    fn drop(&mut self) {
        if !self.closed.load(Ordering::SeqCst)
            && let Some(provider) = self.meter_provider.take()
        {
            // Dropping the last meter provider shuts it down, which blocks on a final export:
            // never on an async worker thread.
            let _ = std::thread::Builder::new()
                .name("otlp-metrics-shutdown".into())
                .spawn(move || drop(provider));
        }
    }
}

#[async_trait]
impl ReportHandler for OtlpHandler {
    async fn report(&self, instances: &[Instance]) -> Result<(), AdapterError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(AdapterError::permanent(
                ErrorKind::Internal,
                format!("handler {} is closed", self.name),
            ));
        }
        let mut invalid = Vec::new();
        let mut spans = Vec::new();
        let mut logs = Vec::new();
        for instance in instances {
            match instance.template {
                Template::TraceSpan => match convert::span(instance, self.scope(&instance.name)) {
                    Ok(span) => spans.push(span),
                    Err(e) => invalid.push(format!("{}: {e}", instance.name)),
                },
                Template::LogEntry => match convert::log_record(instance, &self.logger) {
                    Ok(record) => logs.push((record, self.scope(&instance.name))),
                    Err(e) => invalid.push(format!("{}: {e}", instance.name)),
                },
                Template::Metric => {
                    // Instances meant for metrics this handler does not define are ignored.
                    let Some(&index) = self.by_instance.get(instance_key(&instance.name).as_str())
                    else {
                        continue;
                    };
                    let metric = &self.metrics[index];
                    if let Err(e) = self.record_metric(metric, instance) {
                        invalid.push(format!(
                            "{} (metric {}): {e}",
                            instance.name, metric.spec.name
                        ));
                    }
                }
                _ => {}
            }
        }
        let (spans, logs) = tokio::join!(self.export_spans(spans), self.export_logs(logs));
        let mut failure = match (spans, logs) {
            (Err(mut s), Err(l)) => {
                s.message = format!("{}; {}", s.message, l.message);
                Some(s)
            }
            (Err(e), Ok(())) | (Ok(()), Err(e)) => Some(e),
            (Ok(()), Ok(())) => None,
        };
        if let Some(e) = &mut failure
            && !invalid.is_empty()
        {
            e.message = format!("{}; also invalid: {}", e.message, invalid.join("; "));
        }
        match failure {
            Some(e) => Err(e),
            None if invalid.is_empty() => Ok(()),
            None => Err(AdapterError::permanent(
                ErrorKind::InvalidInstance,
                invalid.join("; "),
            )),
        }
    }
}
