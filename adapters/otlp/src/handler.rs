//! The otlp handler: an OTLP/gRPC span exporter, log exporter and meter provider over one
//! tonic channel, fed by tracespan, logentry and metric instances.

mod metrics;
mod points;
mod report;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, ErrorKind, Handler, ReportHandler};
use opentelemetry::InstrumentationScope;
use opentelemetry::KeyValue;
use opentelemetry::logs::LoggerProvider as _;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkError;
use opentelemetry_sdk::logs::{LogExporter as _, SdkLogger, SdkLoggerProvider};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SpanExporter as _;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue, MetadataMap};

use crate::config::{Kind, OtlpConfig, ResourceValue, Temporality, instance_key};
use crate::convert;
use metrics::{CountingMetricExporter, Instrument, Metric};
pub use points::{POINT_DIMENSION, decode_point, merge as merge_points};
pub use report::export_error;

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
    /// Re-export of ingested points: the instance keys of `points`, and the exporter (`None`
    /// when no instance is listed).
    point_instances: Vec<String>,
    points: Option<points::PointExporter>,
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
        // Points go out as they came, one attempt per batch within the export budget.
        let points = (!config.points.is_empty()).then(|| points::PointExporter {
            client: opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient::new(channel.clone()),
            metadata: metadata.clone(),
            timeout: config.export_budget(),
        });

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
            point_instances: config.points.clone(),
            points,
            max_export_batch_size: config.max_export_batch_size,
            budget: config.export_budget() + Duration::from_secs(1),
            metric_export_failures,
            last_metric_error,
            closed: AtomicBool::new(false),
            scopes: Mutex::new(HashMap::new()),
        })
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
