//! Counts metric instances by one dimension, in the mixer's own metrics:
//! `mixer_wasm_plugin_counter_total{handler, name="<name>", key="<dimension's value>"}`.
//! The metric's `value` is added when it is a whole number, otherwise 1.

use mixer_wasm_sdk::{Batch, FieldError, MetricInstance, Plugin, Template, ValueRef, host};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The dimension to count by.
    dimension: String,
    /// The counter's name.
    #[serde(default = "requests")]
    name: String,
}

fn requests() -> String {
    "requests".into()
}

struct CountBy;

impl Plugin for CountBy {
    type Config = Config;
    const NAME: &'static str = "count-by";
    const TEMPLATES: &'static [Template] = &[Template::Metric];

    fn validate(config: &Config) -> Vec<FieldError> {
        if config.dimension.trim().is_empty() {
            return vec![FieldError::new("dimension", "must not be empty")];
        }
        Vec::new()
    }

    fn report(config: &Config, batch: &Batch) -> Result<(), String> {
        for metric in batch.iter().filter_map(MetricInstance::of) {
            let delta = match metric.value {
                Some(ValueRef::Int64(n)) if n >= 0 => n as u64,
                _ => 1,
            };
            match metric.dimensions.get(&config.dimension) {
                Some(ValueRef::String(key)) => host::counter_add(&config.name, key, delta),
                Some(other) => host::counter_add(&config.name, &other.to_text(), delta),
                None => host::counter_add(&config.name, "unknown", delta),
            }
        }
        Ok(())
    }
}

mixer_wasm_sdk::plugin!(CountBy);
