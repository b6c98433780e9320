//! Write a mixer plugin adapter in Rust.
//!
//! A plugin is a struct and an implementation of [`Plugin`]; [`plugin!`] makes it the
//! component's `mixer:adapter/plugin@0.1.0` world (see `proto/wit/adapter.wit`):
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
//! Build with `cargo build --release --target wasm32-wasip2`. The mixer gives a plugin no
//! WASI: do not print, read files or the environment (use [`host::log`] instead); the mixer
//! refuses a component that imports anything but `mixer:adapter/host`.
//!
//! Each call runs in a fresh instance, so a plugin keeps nothing between calls: its config
//! arrives with every call, already accepted by [`Plugin::validate`] when the mixer loaded
//! the handler.

#![allow(missing_docs)]

/// The bindings generated from `proto/wit/adapter.wit`. In a module of their own: with
/// world-level exports and a public export macro, wit-bindgen 0.61 would define the
/// macro's name twice at the crate root.
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../proto/wit",
        world: "plugin",
        pub_export_macro: true,
        default_bindings_module: "mixer_wasm_sdk::bindings",
    });
}

pub use bindings::{
    CheckResult, Field, FieldError, FieldValue, Guest, Instance, PluginInfo, QuotaArgs,
    QuotaResult, Template, Value,
};

/// The host's imports: logging, the time, counters and histograms.
pub mod host {
    pub use crate::bindings::mixer::adapter::host::{
        Level, counter_add, histogram_observe, log, now,
    };
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
    type Config: serde::de::DeserializeOwned;
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
    fn report(_config: &Self::Config, _instances: &[Instance]) -> Result<(), String> {
        Err(format!("{} does not take reports", Self::NAME))
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
                    <$plugin as $crate::Plugin>::check(&config, &instance)
                }
                fn quota(
                    config: String,
                    instance: $crate::Instance,
                    args: $crate::QuotaArgs,
                ) -> Result<$crate::QuotaResult, String> {
                    let config = $crate::__config::<$plugin>(&config)?;
                    <$plugin as $crate::Plugin>::quota(&config, &instance, &args)
                }
                fn report(config: String, instances: Vec<$crate::Instance>) -> Result<(), String> {
                    let config = $crate::__config::<$plugin>(&config)?;
                    <$plugin as $crate::Plugin>::report(&config, &instances)
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

#[doc(hidden)]
pub fn __config<P: Plugin>(config: &str) -> Result<P::Config, String> {
    serde_json::from_str(config).map_err(|e| format!("config: {e}"))
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
}
