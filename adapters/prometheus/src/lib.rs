//! The `prometheus` adapter (Istio 1.4's `mixer/adapter/prometheus`): metric instances become
//! Prometheus counters, gauges and histograms, served in the text exposition format on the
//! mixer's admin `/metrics` (through [`Handler::as_exposition`]).
//!
//! Each configured metric names the instance feeding it (`instanceName`); an instance's
//! `dimensions` give the label values and its `value` the number: counters add it, gauges are
//! set to it, histograms observe it. Every handler has a private registry, so two handlers can
//! be built side by side; their metric names still share the one `/metrics` page and must be
//! unique across handlers. See README.md beside this crate for the table of params.
//!
//! A request counter and a latency histogram:
//!
//! ```
//! use std::sync::Arc;
//! use mixer_adapter_api::BuildContext;
//! use mixer_adapter_api::host::AnyAdapter;
//! use mixer_adapter_prometheus::Prometheus;
//! use mixer_model::{FieldValue, Instance, Template, Value, Duration};
//!
//! let params = serde_json::json!({
//!     "metrics": [
//!         {"name": "requests_total", "instanceName": "requestcount.instance.istio-system",
//!          "kind": "COUNTER", "labelNames": ["response_code"]},
//!         {"name": "request_duration_seconds", "instanceName": "requestduration.istio-system",
//!          "kind": "DISTRIBUTION", "labelNames": ["response_code"],
//!          "buckets": {"explicitBuckets": {"bounds": [0.01, 0.1, 1]}}},
//!     ]
//! });
//! Prometheus.compile(&params).expect("valid params");
//! let handler = Prometheus
//!     .compile_and_build(&params, &BuildContext { handler_name: "handler.istio-system".into() })
//!     .expect("built");
//! let metric = |name: &str, value: Value| Instance {
//!     name: name.into(),
//!     template: Template::Metric,
//!     fields: vec![
//!         ("value", FieldValue::Value(value)),
//!         ("dimensions", FieldValue::Map(vec![("response_code".into(), Value::Int64(200))])),
//!     ],
//! };
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! rt.block_on(async {
//!     let report = handler.as_report().expect("a report handler");
//!     report.report(&[
//!         metric("requestcount.istio-system", Value::Int64(1)),
//!         metric("requestduration.istio-system", Value::Duration(Duration(19_000_000))),
//!     ]).await.expect("recorded");
//! });
//! let mut text = String::new();
//! handler.as_exposition().expect("serves metrics").render(&mut text);
//! assert!(text.contains("istio_requests_total{response_code=\"200\"} 1"));
//! assert!(text.contains("istio_request_duration_seconds_bucket{response_code=\"200\",le=\"0.1\"} 1"));
//! ```

mod config;
mod handler;
mod lock;
mod precounted;
mod series_cap;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, Stability,
};
use mixer_model::Template;

pub use config::{
    BucketsDefinition, DEFAULT_NAMESPACE, ExpirationPolicy, Expiry, ExplicitBuckets,
    ExponentialBuckets, Kind, Label, LinearBuckets, MAX_BUCKETS, MetricInfo, MetricSpec,
    Precounted, PrometheusConfig, PrometheusParams, instance_key, is_valid_label_name,
    is_valid_metric_name, safe_name,
};
pub use handler::{MISSING_LABEL_VALUE, PrometheusHandler};
pub use series_cap::{
    BUCKETS_PER_SERIES, DEFAULT_MAX_SERIES_PER_HANDLER, DEFAULT_MAX_SERIES_PER_PROCESS,
    OVERFLOW_METRIC, overflowed, process_max_series, process_series, set_process_max_series,
};

static INFO: AdapterInfo = AdapterInfo {
    name: "prometheus",
    description: "Publishes prometheus metrics",
    templates: &[Template::Metric],
    cacheable: false,
    stability: Stability::Beta,
};

/// The prometheus adapter.
#[derive(Debug, Default, Clone, Copy)]
pub struct Prometheus;

impl Prometheus {
    /// Builds the concrete handler (what [`Adapter::build`] returns, unerased).
    pub fn build_handler(
        &self,
        config: &PrometheusConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<PrometheusHandler>, AdapterError> {
        Ok(Arc::new(PrometheusHandler::new(
            config.clone(),
            ctx.handler_name.clone(),
        )?))
    }
}

impl Adapter for Prometheus {
    type Config = PrometheusParams;
    type Compiled = PrometheusConfig;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, params: PrometheusParams) -> Result<PrometheusConfig, Vec<ParamError>> {
        params.compile()
    }

    fn build(
        &self,
        config: &PrometheusConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(self.build_handler(config, ctx)?)
    }
}
