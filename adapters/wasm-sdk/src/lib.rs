//! Write a mixer plugin adapter in Rust.
//!
//! A plugin is a struct and an implementation of [`Plugin`]; [`plugin!`] makes it the
//! component's `mixer:adapter/plugin@0.2.0` world (see `proto/wit/adapter.wit`):
//!
//! ```ignore
//! use mixer_wasm_sdk::{CheckResult, Instance, Plugin, Template};
//!
//! struct AllowAll;
//! impl Plugin for AllowAll {
//!     type Config = serde_json::Value;
//!     const NAME: &'static str = "allow-all";
//!     const TEMPLATES: &'static [Template] = &[Template::Checknothing];
//!     fn check(_: &Self::Config, _: &Instance) -> Result<CheckResult, String> {
//!         Ok(CheckResult::allow())
//!     }
//! }
//! mixer_wasm_sdk::plugin!(AllowAll);
//! ```
//!
//! The plugin crate is a `cdylib` (`[lib] crate-type = ["cdylib"]`); build it with
//! `adapters/wasm-sdk/build-plugin.sh <crate-dir> <out.wasm>`, not a plain `cargo build`:
//! the mixer takes a component, and the script builds for `wasm32-unknown-unknown` and links
//! with the toolchain's `wasm-component-ld`. (For `wasm32-unknown-unknown` alone, cargo makes
//! a core module, which is not a component; for `wasm32-wasip2`, Rust's std imports WASI.)
//! The mixer gives a plugin no WASI: do not print, read files or the environment (use
//! [`host::log`] instead); the mixer refuses a component that imports anything but
//! `mixer:adapter/host`. See the crate's README.md.
//!
//! By default each call runs in a fresh instance, so a plugin keeps nothing between calls
//! (with the handler's `instances: warm`, an instance serves many calls, but a plugin must
//! not count on what it left in memory): its config arrives with every call, already
//! accepted by [`Plugin::validate`] when the mixer loaded the handler.
//!
//! Read an instance through its template's typed view, shaped like the host's
//! (`mixer_model::instance`): [`AuthorizationInstance::of`]`(&instance)` in a check,
//! [`QuotaInstance::of`] in a quota call. A report takes a [`Batch`], read in place: iterate
//! it for [`InstanceRef`]s and read each as its template (`batch.iter().filter_map(
//! MetricInstance::of)`). An attribute generator (templates `kubernetes`, `jwt`, `apikey`)
//! implements [`Plugin::generate`] and answers a [`Generated`]: outputs by the template's
//! output names (`Generated::new().output("principal", ...)`), or a denial
//! ([`Generated::denied`]).

#![allow(missing_docs)]

/// The bindings generated from `proto/wit/adapter.wit`. In a module of their own: with
/// world-level exports and a public export macro, wit-bindgen 0.61 would define the
/// macro's name twice at the crate root.
#[allow(clippy::too_many_arguments)] // The generated import shims take a WIT call's flattened arguments.
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../proto/wit",
        world: "plugin",
        pub_export_macro: true,
        default_bindings_module: "mixer_wasm_sdk::bindings",
        // For the typed views' comparisons, as the host's views have them.
        additional_derives: [PartialEq],
    });
}

pub use bindings::{
    CheckResult, Denial, Field, FieldError, FieldValue, Generated, Guest, HeaderOp,
    HeaderOperation, Instance, PluginInfo, QuotaArgs, QuotaResult, Template, Value,
};

mod batch;
mod views;

pub use batch::Batch;
pub use mixer_wasm_batch::{FieldRef, InstanceRef, Instances, MapRef, StringMapRef, ValueRef};
pub use views::{
    Action, ApiKeyInstance, AuthorizationInstance, BatchEntries, CheckNothingInstance, Entries,
    JwtInstance, KubernetesInstance, ListEntryInstance, LogEntryInstance, MetricInstance,
    QuotaInstance, ReportNothingInstance, Subject, TraceSpanInstance,
};

/// The host's imports: logging, the time, counters and histograms.
pub mod host {
    use mixer_wasm_batch::text;
    use std::cell::RefCell;

    pub use crate::bindings::mixer::adapter::host::{Level, histogram_observe, log, now};

    /// The counter deltas of the call under way: by name, then by key, each list sorted.
    type Pending = Vec<(String, Vec<(String, u64)>)>;

    thread_local! {
        static PENDING: RefCell<Pending> = const { RefCell::new(Vec::new()) };
    }

    /// Adds `delta` to the counter `name` with the label value `key`, exported by the mixer
    /// as `mixer_wasm_plugin_counter_total{handler, name, key}`.
    ///
    /// The deltas of one call are summed here and handed to the host once per counter
    /// when the call returns: a report of 500 instances that counts by one dimension
    /// crosses into the host once per distinct key, not 500 times. A call that traps
    /// counts nothing, as it reports nothing.
    pub fn counter_add(name: &str, key: &str, delta: u64) {
        PENDING.with_borrow_mut(|pending| {
            let keys = match pending.binary_search_by(|(n, _)| text::cmp(n, name)) {
                Ok(at) => &mut pending[at].1,
                Err(at) => {
                    pending.insert(at, (name.to_string(), Vec::new()));
                    &mut pending[at].1
                }
            };
            match keys.binary_search_by(|(k, _)| text::cmp(k, key)) {
                Ok(at) => keys[at].1 = keys[at].1.saturating_add(delta),
                Err(at) => keys.insert(at, (key.to_string(), delta)),
            }
        });
    }

    /// Hands the call's summed counters to the host; the export wrappers of
    /// [`plugin!`](crate::plugin) call it when the plugin's function returns.
    #[doc(hidden)]
    pub fn __flush() {
        let pending = PENDING.with_borrow_mut(std::mem::take);
        for (name, keys) in pending {
            for (key, delta) in keys {
                crate::bindings::mixer::adapter::host::counter_add(&name, &key, delta);
            }
        }
    }
}

pub use serde;
pub use serde_json;

/// gRPC status codes a plugin answers with.
pub mod code {
    pub const OK: u32 = 0;
    pub const INVALID_ARGUMENT: u32 = 3;
    pub const PERMISSION_DENIED: u32 = 7;
    pub const RESOURCE_EXHAUSTED: u32 = 8;
    pub const UNAVAILABLE: u32 = 14;
    pub const UNAUTHENTICATED: u32 = 16;
}

/// A plugin adapter.
pub trait Plugin {
    /// The plugin's config, from the handler's `params.config`.
    type Config: serde::de::DeserializeOwned + 'static;
    /// Its name, for logs and metrics.
    const NAME: &'static str;
    /// The templates it takes; rules that send another are config errors.
    const TEMPLATES: &'static [Template];

    /// Checks a config that parsed; the default accepts it.
    fn validate(_config: &Self::Config) -> Vec<FieldError> {
        Vec::new()
    }

    /// Decides a check.
    fn check(_config: &Self::Config, _instance: &Instance) -> Result<CheckResult, String> {
        Err(format!("{} does not decide checks", Self::NAME))
    }

    /// Allocates quota.
    fn quota(
        _config: &Self::Config,
        _instance: &Instance,
        _args: &QuotaArgs,
    ) -> Result<QuotaResult, String> {
        Err(format!("{} does not allocate quota", Self::NAME))
    }

    /// Takes a report batch.
    fn report(_config: &Self::Config, _batch: &Batch) -> Result<(), String> {
        Err(format!("{} does not take reports", Self::NAME))
    }

    /// Produces attributes: the outputs of an instance of `kubernetes`, `jwt` or `apikey`,
    /// which the instance's `attributeBindings` put into the request's attributes.
    fn generate(_config: &Self::Config, _instance: &Instance) -> Result<Generated, String> {
        Err(format!("{} does not generate attributes", Self::NAME))
    }
}

/// Makes `$plugin` (a [`Plugin`]) the component's exports.
#[macro_export]
macro_rules! plugin {
    ($plugin:ty) => {
        const _: () = {
            struct Exports;
            impl $crate::Guest for Exports {
                fn info() -> $crate::PluginInfo {
                    $crate::__info::<$plugin>()
                }
                fn validate(config: String) -> Vec<$crate::FieldError> {
                    $crate::__validate::<$plugin>(&config)
                }
                fn check(
                    config: String,
                    instance: $crate::Instance,
                ) -> Result<$crate::CheckResult, String> {
                    let config = $crate::__config::<$plugin>(&config)?;
                    let answer = <$plugin as $crate::Plugin>::check(&config, &instance);
                    $crate::host::__flush();
                    answer
                }
                fn quota(
                    config: String,
                    instance: $crate::Instance,
                    args: $crate::QuotaArgs,
                ) -> Result<$crate::QuotaResult, String> {
                    let config = $crate::__config::<$plugin>(&config)?;
                    let answer = <$plugin as $crate::Plugin>::quota(&config, &instance, &args);
                    $crate::host::__flush();
                    answer
                }
                fn report(
                    config: String,
                    batch: $crate::bindings::ReportBatch,
                ) -> Result<(), String> {
                    let config = $crate::__config::<$plugin>(&config)?;
                    let batch = $crate::Batch::__new(batch)?;
                    let answer = <$plugin as $crate::Plugin>::report(&config, &batch);
                    $crate::host::__flush();
                    answer
                }
                fn generate(
                    config: String,
                    instance: $crate::Instance,
                ) -> Result<$crate::Generated, String> {
                    let config = $crate::__config::<$plugin>(&config)?;
                    let answer = <$plugin as $crate::Plugin>::generate(&config, &instance);
                    $crate::host::__flush();
                    answer
                }
            }
            $crate::bindings::export!(Exports);
        };
    };
}

#[doc(hidden)]
pub fn __info<P: Plugin>() -> PluginInfo {
    PluginInfo {
        name: P::NAME.to_string(),
        templates: P::TEMPLATES.to_vec(),
    }
}

#[doc(hidden)]
pub fn __validate<P: Plugin>(config: &str) -> Vec<FieldError> {
    match serde_json::from_str::<P::Config>(config) {
        Ok(c) => P::validate(&c),
        Err(e) => vec![FieldError::new("", e.to_string())],
    }
}

thread_local! {
    /// The last config parsed, by its text: a warm instance (`instances: warm`) serves
    /// many calls of one handler, and parsing its JSON on each was a sixth of a check
    /// through deny-header (docs/wasm.md).
    static CONFIG: std::cell::RefCell<Option<(String, std::rc::Rc<dyn std::any::Any>)>> =
        const { std::cell::RefCell::new(None) };
}

#[doc(hidden)]
pub fn __config<P: Plugin>(config: &str) -> Result<std::rc::Rc<P::Config>, String> {
    let cached = CONFIG.with_borrow(|cached| match cached {
        Some((text, parsed)) if text == config => parsed.clone().downcast::<P::Config>().ok(),
        _ => None,
    });
    if let Some(parsed) = cached {
        return Ok(parsed);
    }
    let parsed = std::rc::Rc::new(
        serde_json::from_str::<P::Config>(config).map_err(|e| format!("config: {e}"))?,
    );
    CONFIG.set(Some((config.to_string(), parsed.clone())));
    Ok(parsed)
}

impl FieldError {
    /// A problem at `path` (dotted, inside the plugin's config).
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl CheckResult {
    /// Allows, for 5 s or 10 000 uses.
    pub fn allow() -> CheckResult {
        CheckResult {
            code: code::OK,
            message: String::new(),
            valid_duration_ms: 5_000,
            valid_use_count: 10_000,
        }
    }

    /// Denies with a gRPC `code` (see [`code`]) and a message, for 5 s or 10 000 uses.
    pub fn deny(code: u32, message: impl Into<String>) -> CheckResult {
        CheckResult {
            code,
            message: message.into(),
            ..CheckResult::allow()
        }
    }
}

impl Generated {
    /// No outputs yet: every binding at its default. Add them with [`Generated::output`].
    pub fn new() -> Generated {
        Generated {
            outputs: Vec::new(),
            valid_duration_ms: None,
            denial: None,
        }
    }

    /// With the output `name` (one of the template's output fields) set to `value`.
    pub fn output(mut self, name: &str, value: Value) -> Generated {
        self.outputs.push((name.to_string(), value));
        self
    }

    /// Valid for `ms` milliseconds: a verdict decided on these outputs is cached no longer.
    pub fn valid_for_ms(mut self, ms: u64) -> Generated {
        self.valid_duration_ms = Some(ms);
        self
    }

    /// A denial with a gRPC `code` other than OK (see [`code`]) and a message that says why
    /// (never the credential itself), with no outputs.
    pub fn denied(code: u32, message: impl Into<String>) -> Generated {
        Generated {
            denial: Some(Denial {
                code,
                message: message.into(),
                response_headers: Vec::new(),
            }),
            ..Generated::new()
        }
    }
}

impl Default for Generated {
    fn default() -> Generated {
        Generated::new()
    }
}

impl Instance {
    /// A field, by its template name (`subject.user`, `dimensions`).
    pub fn field(&self, name: &str) -> Option<&FieldValue> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .map(|f| &f.value)
    }

    /// A single-valued field.
    pub fn value(&self, name: &str) -> Option<&Value> {
        match self.field(name)? {
            FieldValue::Single(v) => Some(v),
            FieldValue::Map(_) => None,
        }
    }

    /// One entry of a map field (`action.properties`, `dimensions`).
    pub fn map_entry(&self, field: &str, key: &str) -> Option<&Value> {
        match self.field(field)? {
            FieldValue::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            FieldValue::Single(_) => None,
        }
    }
}

impl Value {
    /// The value as text: strings as they are, numbers and the rest formatted.
    pub fn to_text(&self) -> String {
        match self {
            Value::String(s) | Value::EmailAddress(s) | Value::Uri(s) | Value::DnsName(s) => {
                s.clone()
            }
            Value::Int64(n) | Value::Timestamp(n) | Value::Duration(n) => n.to_string(),
            Value::Double(d) => d.to_string(),
            Value::Boolean(b) => b.to_string(),
            Value::Bytes(b) | Value::IpAddress(b) => format!("{b:?}"),
            Value::StringMap(m) => format!("{m:?}"),
        }
    }

    /// A string-map value (`claims`, `source_labels`) from its pairs.
    pub fn string_map<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Value {
        Value::StringMap(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}
