//! Reports: spans and log records of a batch exported synchronously, so a failed export fails
//! the `report` call; metric instances only feed their instruments.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, ErrorKind, ReportHandler};
use mixer_model::{Instance, InstanceView};
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::{LogBatch, LogExporter as _, SdkLogRecord};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};

use super::OtlpHandler;
use crate::config::instance_key;
use crate::convert;

impl OtlpHandler {
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

    async fn export_points(
        &self,
        points: Vec<opentelemetry_proto::tonic::metrics::v1::ResourceMetrics>,
    ) -> Result<(), AdapterError> {
        let Some(exporter) = &self.points else {
            return Ok(());
        };
        for chunk in points.chunks(self.max_export_batch_size) {
            exporter.export(super::merge_points(chunk.to_vec())).await?;
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
        let mut points = Vec::new();
        for instance in instances {
            match instance.view() {
                InstanceView::TraceSpan(span) => {
                    match convert::span(&span, self.scope(&instance.name)) {
                        Ok(span) => spans.push(span),
                        Err(e) => invalid.push(format!("{}: {e}", instance.name)),
                    }
                }
                InstanceView::LogEntry(log) => match convert::log_record(&log, &self.logger) {
                    Ok(record) => logs.push((record, self.scope(&instance.name))),
                    Err(e) => invalid.push(format!("{}: {e}", instance.name)),
                },
                InstanceView::Metric(point)
                    if self.point_instances.contains(&instance_key(point.name)) =>
                {
                    match super::decode_point(&point) {
                        Ok(point) => points.push(point),
                        Err(e) => invalid.push(format!("{}: {e}", instance.name)),
                    }
                }
                InstanceView::Metric(value) => {
                    // Instances meant for metrics this handler does not define are ignored.
                    let Some(&index) = self.by_instance.get(instance_key(value.name).as_str())
                    else {
                        continue;
                    };
                    let metric = &self.metrics[index];
                    if let Err(e) = self.record_metric(metric, &value) {
                        invalid.push(format!(
                            "{} (metric {}): {e}",
                            instance.name, metric.spec.name
                        ));
                    }
                }
                _ => {}
            }
        }
        let (spans, logs, points) = tokio::join!(
            self.export_spans(spans),
            self.export_logs(logs),
            self.export_points(points)
        );
        let mut failure = None::<AdapterError>;
        for result in [spans, logs, points] {
            match (&mut failure, result) {
                (_, Ok(())) => {}
                (None, Err(e)) => failure = Some(e),
                (Some(first), Err(e)) => {
                    first.message = format!("{}; {}", first.message, e.message)
                }
            }
        }
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
