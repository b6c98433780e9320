//! [`report_fn`]: a report handler from a plain function, the report side's
//! [`check_fn`](crate::check_fn) (the handler and its `ReportHandler` impl written for you).

use std::sync::Arc;

use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, Handler, ReportHandler};
use mixer_model::Instance;

/// A handler whose report batches `report` takes: what [`Adapter::build`] returns for a
/// report adapter (metric, logentry, tracespan, reportnothing) that needs no `.await` (it
/// appends to a file, or counts in memory). An adapter that sends the batch to a backend
/// writes its own handler with `#[async_trait] impl ReportHandler`.
///
/// A metric adapter appending a line per metric to a file (adapters/sdk/README.md shows it
/// too):
///
/// ```no_run
/// use std::{fs::File, io::Write, path::PathBuf, sync::{Arc, Mutex, PoisonError}};
///
/// use mixer_adapter_sdk::api::{Adapter, AdapterError, AdapterInfo, BuildContext, ErrorKind, Handler};
/// use mixer_adapter_sdk::api::{ParamError, Stability};
/// use mixer_adapter_sdk::model::{MetricInstance, Template};
///
/// /// Appends each metric as a line `value dim=v,...` to the file `params.path`.
/// struct MetricFile;
///
/// static INFO: AdapterInfo = AdapterInfo {
///     name: "metric-file",
///     description: "appends each metric to the file params.path",
///     templates: &[Template::Metric],
///     cacheable: false,
///     stability: Stability::Alpha,
/// };
///
/// /// The handler's params.
/// #[derive(serde::Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct Config {
///     path: PathBuf,
/// }
///
/// impl Adapter for MetricFile {
///     type Config = Config;
///     type Compiled = PathBuf;
///
///     fn info(&self) -> &AdapterInfo {
///         &INFO
///     }
///
///     fn compile(&self, config: Config) -> Result<PathBuf, Vec<ParamError>> {
///         Ok(config.path)
///     }
///
///     // Opened here, so a path that cannot be written fails the session, not every report.
///     fn build(&self, path: &PathBuf, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
///         let unavailable = |e: std::io::Error| AdapterError::transient(ErrorKind::Unavailable, e.to_string());
///         let file = File::options().create(true).append(true).open(path).map_err(unavailable)?;
///         let file = Mutex::new(file);
///         Ok(mixer_adapter_sdk::report_fn(move |instances| {
///             let mut lines = String::new();
///             for metric in instances.iter().filter_map(MetricInstance::of) {
///                 let value = metric.value.map(|v| v.to_string()).unwrap_or_default();
///                 let dims: Vec<String> = metric.dimensions.iter().map(|(k, v)| format!("{k}={v}")).collect();
///                 lines += &format!("{value} {}\n", dims.join(","));
///             }
///             let mut file = file.lock().unwrap_or_else(PoisonError::into_inner);
///             file.write_all(lines.as_bytes()).map_err(unavailable)
///         }))
///     }
/// }
///
/// fn main() -> std::process::ExitCode {
///     mixer_adapter_sdk::serve(MetricFile) // on argv[1], $ADAPTER_ADDR, or 127.0.0.1:9070
/// }
/// ```
///
/// [`Adapter::build`]: mixer_adapter_api::Adapter::build
pub fn report_fn<F>(report: F) -> Arc<dyn Handler>
where
    F: Fn(&[Instance]) -> Result<(), AdapterError> + Send + Sync + 'static,
{
    Arc::new(ReportFn(report))
}

struct ReportFn<F>(F);

impl<F> Handler for ReportFn<F>
where
    F: Fn(&[Instance]) -> Result<(), AdapterError> + Send + Sync + 'static,
{
    fn as_report(&self) -> Option<&dyn ReportHandler> {
        Some(self)
    }
}

#[async_trait]
impl<F> ReportHandler for ReportFn<F>
where
    F: Fn(&[Instance]) -> Result<(), AdapterError> + Send + Sync + 'static,
{
    async fn report(&self, instances: &[Instance]) -> Result<(), AdapterError> {
        (self.0)(instances)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use mixer_adapter_api::ErrorKind;
    use mixer_model::Template;

    use super::*;

    #[tokio::test]
    async fn the_function_takes_each_batch_and_nothing_else() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        let handler = report_fn(move |instances| {
            if instances.is_empty() {
                return Err(AdapterError::transient(
                    ErrorKind::Unavailable,
                    "nothing to write",
                ));
            }
            let mut seen = kept.lock().expect("not poisoned");
            seen.extend(instances.iter().map(|i| i.name.to_string()));
            Ok(())
        });
        let instance = |name: &str| Instance {
            name: name.into(),
            template: Template::ReportNothing,
            fields: vec![],
        };
        let report = handler.as_report().expect("a report handler");
        report
            .report(&[
                instance("a.instance.default"),
                instance("b.instance.default"),
            ])
            .await
            .expect("taken");
        let refused = report.report(&[]).await.expect_err("the function's error");
        assert_eq!(refused.kind, ErrorKind::Unavailable);
        assert_eq!(
            *seen.lock().expect("not poisoned"),
            ["a.instance.default", "b.instance.default"]
        );
        assert!(handler.as_check().is_none() && handler.as_quota().is_none());
    }
}
