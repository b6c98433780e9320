//! One trait per template. Implement [`Adapter`] and the template traits your adapter serves;
//! [`crate::Server`] registers a gRPC service for each one you name.
//!
//! Methods return `impl Future + Send`, so an implementation is written as a plain `async fn`.

use std::future::Future;

use crate::config::Config;
use crate::types::{
    AuthorizationInstance, CheckNothingInstance, CheckResult, Error, ListEntryInstance,
    LogEntryInstance, MetricInstance, QuotaArgs, QuotaInstance, QuotaResult, ReportNothingInstance,
    TraceSpanInstance,
};

/// What every adapter has: a check of a handler's params. The mixer calls it (as
/// `InfrastructureBackend.Validate`, and before `CreateSession`) when it loads a config that
/// names this adapter, so a bad handler is rejected at config load rather than at request time.
pub trait Adapter: Send + Sync + 'static {
    /// Accepts or rejects a handler's params. The default accepts anything.
    fn validate(&self, config: &Config) -> Result<(), String> {
        let _ = config;
        Ok(())
    }
}

/// Serves the `checknothing` template (`/checknothing.HandleCheckNothingService/HandleCheckNothing`).
pub trait CheckNothing: Adapter {
    /// Decides one check. `Ok(CheckResult::deny(..))` is an answer; `Err(..)` means "could not
    /// decide" and the handler's `failPolicy` applies.
    fn check(
        &self,
        instance: &CheckNothingInstance,
        config: &Config,
    ) -> impl Future<Output = Result<CheckResult, Error>> + Send;
}

/// Serves the `listentry` template (`/listentry.HandleListEntryService/HandleListEntry`).
pub trait ListEntry: Adapter {
    /// Decides whether `instance.value` may pass.
    fn check(
        &self,
        instance: &ListEntryInstance,
        config: &Config,
    ) -> impl Future<Output = Result<CheckResult, Error>> + Send;
}

/// Serves the `authorization` template
/// (`/authorization.HandleAuthorizationService/HandleAuthorization`).
pub trait Authorization: Adapter {
    /// Decides whether `instance.subject` may do `instance.action`.
    fn check(
        &self,
        instance: &AuthorizationInstance,
        config: &Config,
    ) -> impl Future<Output = Result<CheckResult, Error>> + Send;
}

/// Serves the `quota` template (`/quota.HandleQuotaService/HandleQuota`).
pub trait Quota: Adapter {
    /// Grants up to `args.amount` units from the bucket `instance.dimensions` names.
    fn alloc(
        &self,
        instance: &QuotaInstance,
        args: QuotaArgs,
        config: &Config,
    ) -> impl Future<Output = Result<QuotaResult, Error>> + Send;
}

/// Serves the `metric` template (`/metric.HandleMetricService/HandleMetric`).
pub trait Metric: Adapter {
    /// Records a batch of metric values (one report from a proxy can carry many).
    fn report(
        &self,
        instances: &[MetricInstance],
        config: &Config,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// Serves the `logentry` template (`/logentry.HandleLogEntryService/HandleLogEntry`).
pub trait LogEntry: Adapter {
    /// Records a batch of log entries.
    fn report(
        &self,
        instances: &[LogEntryInstance],
        config: &Config,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// Serves the `tracespan` template (`/tracespan.HandleTraceSpanService/HandleTraceSpan`).
pub trait TraceSpan: Adapter {
    /// Records a batch of spans.
    fn report(
        &self,
        instances: &[TraceSpanInstance],
        config: &Config,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// Serves the `reportnothing` template (`/reportnothing.HandleReportNothingService/HandleReportNothing`).
pub trait ReportNothing: Adapter {
    /// Notes that reports happened.
    fn report(
        &self,
        instances: &[ReportNothingInstance],
        config: &Config,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}
