//! Reports: instances grouped by template into one Handle call each, and transient failures
//! retried with backoff under one dedup id so the adapter can drop duplicates.

use std::sync::atomic::Ordering;

use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, ReportHandler};
use mixer_model::{Instance, LogEntryInstance, MetricInstance, Template, TraceSpanInstance};
use mixer_proto::{logentry, metric, reportnothing, tracespan};
use tonic::Request;

use super::{RemoteHandler, wrong_variety};
use crate::convert;

impl RemoteHandler {
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
        macro_rules! report {
            ($module:ident, $($client:ident)::+, $req:ident, $method:ident, $conv:expr) => {
                self.call("report", |ch, cfg, t| {
                    let mut req = Request::new($module::$req {
                        instances: batch.iter().filter_map(|i| $conv(i)).collect(),
                        adapter_config: Some(cfg),
                        // Kept for a second attempt (see `call`).
                        dedup_id: dedup_id.to_owned(),
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
                |i| MetricInstance::of(i).map(|m| convert::metric(&m))
            ),
            Template::LogEntry => report!(
                logentry,
                handle_log_entry_service_client::HandleLogEntryServiceClient,
                HandleLogEntryRequest,
                handle_log_entry,
                |i| LogEntryInstance::of(i).map(|l| convert::logentry(&l))
            ),
            Template::TraceSpan => report!(
                tracespan,
                handle_trace_span_service_client::HandleTraceSpanServiceClient,
                HandleTraceSpanRequest,
                handle_trace_span,
                |i| TraceSpanInstance::of(i).map(|t| convert::tracespan(&t))
            ),
            Template::ReportNothing => report!(
                reportnothing,
                handle_report_nothing_service_client::HandleReportNothingServiceClient,
                HandleReportNothingRequest,
                handle_report_nothing,
                |i: &Instance| Some(reportnothing::InstanceMsg {
                    name: i.name.to_string()
                })
            ),
            other => Err(wrong_variety(other, "report")),
        }
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
