//! Denies a request when a header, sent as `action.properties` of an authorization
//! instance, has a given value (`x-plugin-deny: true`); allows every other.

use mixer_wasm_sdk::{
    AuthorizationInstance, CheckResult, FieldError, Instance, Plugin, Template, code,
};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// The header (the key in `action.properties`).
    header: String,
    /// The value that denies.
    #[serde(default = "yes")]
    value: String,
    /// The denial's message.
    #[serde(default = "denied")]
    message: String,
}

fn yes() -> String {
    "true".into()
}

fn denied() -> String {
    "denied by plugin".into()
}

struct DenyHeader;

impl Plugin for DenyHeader {
    type Config = Config;
    const NAME: &'static str = "deny-header";
    const TEMPLATES: &'static [Template] = &[Template::Authorization];

    fn validate(config: &Config) -> Vec<FieldError> {
        if config.header.trim().is_empty() {
            return vec![FieldError::new("header", "must not be empty")];
        }
        Vec::new()
    }

    fn check(config: &Config, instance: &Instance) -> Result<CheckResult, String> {
        let value = AuthorizationInstance::of(instance)
            .and_then(|authorization| authorization.action.properties.get(&config.header));
        Ok(match value {
            Some(v) if v.to_text() == config.value => {
                CheckResult::deny(code::PERMISSION_DENIED, &config.message)
            }
            _ => CheckResult::allow(),
        })
    }
}

mixer_wasm_sdk::plugin!(DenyHeader);
