//! The `otlp` adapter: tracespan, logentry and metric instances exported to an OpenTelemetry
//! collector (or any OTLP receiver) over OTLP/gRPC, with the OpenTelemetry SDK and its OTLP
//! exporters (`opentelemetry-otlp`, tonic).
//!
//! - a **tracespan** becomes a span with the instance's trace, span and parent ids (hex), name,
//!   start and end times, `spanTags` as attributes, `httpStatusCode` as
//!   `http.response.status_code` (and an error status for 5xx, or 4xx on client spans), and
//!   kind CLIENT when `clientSpan` is true, else SERVER;
//! - a **logentry** becomes a log record with the instance's `timestamp`, its `severity` as
//!   text and as a severity number, and its `variables` as attributes;
//! - a **metric** instance feeds the counter, gauge or histogram configured for it
//!   (`metrics[].instanceName`), with its `dimensions` as attributes; the SDK aggregates and
//!   exports them every `batch.scheduledDelay`.
//!
//! Spans and log records are exported during the `report` call that brings them, one export
//! per signal, retried with backoff on transient gRPC errors; a failure after the retries fails
//! the batch with a transient [`AdapterError`], so the
//! runtime counts its records as dropped. Each instance's telemetry carries an instrumentation
//! scope named after the instance. See README.md beside this crate for the table of params.
//!
//! Params are checked with their paths before anything is built:
//!
//! ```
//! use mixer_adapter_api::host::AnyAdapter;
//! use mixer_adapter_otlp::Otlp;
//!
//! let params = serde_json::json!({
//!     "endpoint": "http://127.0.0.1:4317",
//!     "headers": {"authorization": "Bearer s3cret"},
//!     "retry": {"initialBackoff": "50ms", "maxBackoff": "1s", "maxElapsedTime": "5s"},
//!     "resource": {"service.name": "mixer", "deployment.environment": "prod"},
//!     "metrics": [
//!         {"instanceName": "requestcount.instance.istio-system", "name": "istio.requests",
//!          "kind": "COUNTER", "unit": "{request}"},
//!         {"instanceName": "requestduration.instance.istio-system",
//!          "name": "istio.request.duration", "kind": "HISTOGRAM", "unit": "s",
//!          "buckets": [0.005, 0.01, 0.1, 1, 10]},
//!     ],
//! });
//! Otlp.compile(&params).expect("valid params");
//!
//! let bad = serde_json::json!({
//!     "endpoint": "collector:4317",
//!     "metrics": [{"instanceName": "rc.istio-system", "name": "istio.requests"}],
//! });
//! let paths: Vec<String> = Otlp.compile(&bad).unwrap_err().into_iter().map(|e| e.path).collect();
//! assert_eq!(paths, ["endpoint", "metrics[0].kind"]);
//! ```
//!
//! Building a handler (inside a tokio runtime) creates a lazily connected gRPC channel; nothing
//! is sent until the first report, so a collector that is down does not fail the build.

mod config;
mod convert;
mod handler;

use std::sync::Arc;

use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, Stability,
};
use mixer_model::Template;

pub use config::{
    BatchParams, DEFAULT_INITIAL_BACKOFF, DEFAULT_MAX_BACKOFF, DEFAULT_MAX_ELAPSED_TIME,
    DEFAULT_MAX_EXPORT_BATCH_SIZE, DEFAULT_SCHEDULED_DELAY, DEFAULT_SERVICE_NAME, DEFAULT_TIMEOUT,
    Kind, MAX_BUCKETS, MAX_EXPORT_BATCH_SIZE, MetricParams, MetricSpec, OtlpConfig, OtlpParams,
    ResourceValue, RetryConfig, RetryParams, Temporality, instance_key, is_valid_instrument_name,
};
pub use convert::{HTTP_STATUS_ATTRIBUTE, REWRITE_PAD, severity_number};
pub use handler::{OtlpHandler, POINT_DIMENSION, decode_point, export_error, merge_points};

static INFO: AdapterInfo = AdapterInfo {
    name: "otlp",
    description: "Exports metrics, logs and trace spans over OTLP/gRPC",
    templates: &[Template::Metric, Template::LogEntry, Template::TraceSpan],
    cacheable: false,
    stability: Stability::Alpha,
};

/// The otlp adapter.
#[derive(Debug, Default, Clone, Copy)]
pub struct Otlp;

impl Otlp {
    /// Builds the concrete handler (what [`Adapter::build`] returns, unerased). Must be called
    /// inside a tokio runtime.
    pub fn build_handler(
        &self,
        config: &OtlpConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<OtlpHandler>, AdapterError> {
        Ok(Arc::new(OtlpHandler::new(
            config.clone(),
            ctx.handler_name.clone(),
        )?))
    }
}

/// The params holding secrets (see [`Adapter::secret_params`]).
const SECRET_PARAMS: &[mixer_adapter_api::secrets::SecretParam] = &[
    mixer_adapter_api::secrets::SecretParam::url("endpoint"),
    // Every header value: vendors' API-key headers (`x-honeycomb-team`,
    // `ocp-apim-subscription-key`, `x-functions-key`, `x-auth-key`) have names no list of
    // secret names can keep up with.
    mixer_adapter_api::secrets::SecretParam::value("headers.*"),
];

impl Adapter for Otlp {
    type Config = OtlpParams;
    type Compiled = OtlpConfig;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, params: OtlpParams) -> Result<OtlpConfig, Vec<ParamError>> {
        params.compile()
    }

    fn build(
        &self,
        config: &OtlpConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(self.build_handler(config, ctx)?)
    }

    fn secret_params(&self) -> &'static [mixer_adapter_api::secrets::SecretParam] {
        // The collector's URL may carry a password or a key in its query; every `headers`
        // value is hidden, whatever its name.
        SECRET_PARAMS
    }
}
