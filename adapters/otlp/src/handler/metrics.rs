//! Metrics: instances recorded into OpenTelemetry instruments, which the SDK's periodic reader
//! exports on a thread of its own, so export failures are counted here rather than returned.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mixer_adapter_api::{AdapterError, ErrorKind};
use mixer_model::MetricInstance;
use opentelemetry::metrics::{Counter, Gauge, Histogram};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;

use super::{OtlpHandler, export_error};
use crate::config::MetricSpec;
use crate::convert;

pub(super) enum Instrument {
    Counter(Counter<f64>),
    Gauge(Gauge<f64>),
    Histogram(Histogram<f64>),
}

pub(super) struct Metric {
    pub(super) spec: MetricSpec,
    pub(super) instrument: Instrument,
}

/// The metric exporter inside the meter provider's periodic reader: exports run on the
/// reader's own thread, so their failures cannot reach a `report` call; they are logged with
/// the handler's name and counted instead.
pub(super) struct CountingMetricExporter {
    pub(super) inner: opentelemetry_otlp::MetricExporter,
    pub(super) handler: Arc<str>,
    pub(super) failures: Arc<AtomicU64>,
    pub(super) last_error: Arc<Mutex<Option<OTelSdkError>>>,
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

impl OtlpHandler {
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

    pub(super) fn record_metric(
        &self,
        metric: &Metric,
        instance: &MetricInstance<'_>,
    ) -> Result<(), String> {
        let value = match instance.value {
            Some(v) => v.to_metric_number()?,
            None => return Err("the instance has no value".into()),
        };
        let attributes = convert::attributes(instance.dimensions.as_slice());
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
}

fn clone_error(e: &OTelSdkError) -> OTelSdkError {
    match e {
        OTelSdkError::AlreadyShutdown => OTelSdkError::AlreadyShutdown,
        OTelSdkError::Timeout(d) => OTelSdkError::Timeout(*d),
        OTelSdkError::InternalFailure(m) => OTelSdkError::InternalFailure(m.clone()),
    }
}
