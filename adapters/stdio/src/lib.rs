//! The `stdio` adapter (Istio 1.4's `mixer/adapter/stdio`): logentry and metric instances
//! written one record per line, as JSON (the default) or as console lines, to the mixer's
//! standard output or standard error, to a file, or to a file rotated by size and age.
//!
//! A JSON record holds `level` (`info`, `warn`, `error`), `time` (UTC, microseconds),
//! `instance` (the instance's name), then the logentry's `variables` (or the metric's `value`
//! and `dimensions`) sorted by name. A logentry's level comes from its `severity` through
//! `severityLevels`; records below `outputLevel` are dropped. A batch is formatted in memory
//! and written in one go on tokio's blocking pool. See README.md beside this crate for the
//! table of params.
//!
//! An access log in a file:
//!
//! ```
//! use mixer_adapter_api::BuildContext;
//! use mixer_adapter_api::host::AnyAdapter;
//! use mixer_adapter_stdio::Stdio;
//! use mixer_model::{FieldValue, Instance, Template, Timestamp, Value};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("access.log");
//! let params = serde_json::json!({"logStream": "FILE", "outputPath": path});
//! Stdio.compile(&params).expect("valid params");
//! let handler = Stdio
//!     .compile_and_build(&params, &BuildContext { handler_name: "stdio.istio-system".into() })
//!     .expect("built");
//! let entry = Instance {
//!     name: "accesslog.istio-system".into(),
//!     template: Template::LogEntry,
//!     fields: vec![
//!         ("variables", FieldValue::Map(vec![
//!             ("responseCode".into(), Value::Int64(200)),
//!             ("method".into(), Value::from("GET")),
//!         ])),
//!         ("timestamp", FieldValue::Value(Value::Timestamp(
//!             Timestamp::parse_rfc3339("2019-10-01T12:00:00Z").unwrap()))),
//!         ("severity", FieldValue::Value(Value::from("Info"))),
//!     ],
//! };
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! rt.block_on(async {
//!     handler.as_report().expect("a report handler").report(&[entry]).await.expect("written");
//! });
//! assert_eq!(
//!     std::fs::read_to_string(&path).unwrap(),
//!     "{\"level\":\"info\",\"time\":\"2019-10-01T12:00:00.000000Z\",\
//!      \"instance\":\"accesslog.istio-system\",\"method\":\"GET\",\"responseCode\":200}\n"
//! );
//! ```

mod config;
mod decision;
mod format;
mod handler;
mod repeats;
mod sink;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, Stability,
};
use mixer_model::Template;

pub use config::{
    DEFAULT_MAX_DAYS, DEFAULT_MAX_MEGABYTES, DEFAULT_MAX_ROTATED_FILES, Level, Output, Rotation,
    StdioConfig, StdioParams, Stream, default_severity_levels,
};
pub use format::{Record, TimeText, format_time, go_duration};
pub use handler::StdioHandler;
pub use repeats::Repeats;
pub use sink::{Clock, RotatingFile, Sink, system_clock};

static INFO: AdapterInfo = AdapterInfo {
    name: "stdio",
    description: "Writes logs and metrics to a standard I/O stream",
    templates: &[Template::LogEntry, Template::Metric],
    cacheable: false,
    stability: Stability::Beta,
};

/// The stdio adapter.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stdio;

impl Stdio {
    /// Builds the concrete handler (what [`Adapter::build`] returns, unerased).
    pub fn build_handler(
        &self,
        config: &StdioConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<StdioHandler>, AdapterError> {
        Ok(Arc::new(StdioHandler::new(
            config.clone(),
            ctx.handler_name.clone(),
        )?))
    }
}

impl Adapter for Stdio {
    type Config = StdioParams;
    type Compiled = StdioConfig;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, params: StdioParams) -> Result<StdioConfig, Vec<ParamError>> {
        params.compile()
    }

    fn build(
        &self,
        config: &StdioConfig,
        ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(self.build_handler(config, ctx)?)
    }
}
