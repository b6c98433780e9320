//! An attribute generator of the `apikey` template: the handler's `config.keys` name each
//! key's owner and labels; a request's key becomes `$out.principal` and `$out.claims`, which
//! the instance's `attributeBindings` put into attributes for the check rules. An unknown or
//! missing key is a denial (UNAUTHENTICATED), not an error: the request carries a bad
//! credential, the plugin is fine.
//!
//! An example of the transport, not a key store: the built-in `apikey` adapter reads keys
//! from files, compares them in constant time on a hash and reloads them.

use std::collections::BTreeMap;

use mixer_wasm_sdk::{
    ApiKeyInstance, FieldError, Generated, Instance, Plugin, Template, Value, code,
};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    /// Each key, by its value.
    keys: BTreeMap<String, Key>,
    /// How long an answer holds, in milliseconds (how soon a removed key stops working).
    #[serde(default = "a_minute")]
    valid_ms: u64,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Key {
    principal: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

fn a_minute() -> u64 {
    60_000
}

struct KeyLabels;

impl Plugin for KeyLabels {
    type Config = Config;
    const NAME: &'static str = "key-labels";
    const TEMPLATES: &'static [Template] = &[Template::Apikey];

    fn validate(config: &Config) -> Vec<FieldError> {
        if config.keys.is_empty() {
            return vec![FieldError::new("keys", "name at least one key")];
        }
        config
            .keys
            .iter()
            .filter(|(key, owner)| key.is_empty() || owner.principal.is_empty())
            .map(|(key, _)| {
                // The path names the entry by position: a key is a secret, even in a log.
                let at = config.keys.keys().position(|k| k == key).unwrap_or(0);
                FieldError::new(
                    format!("keys[{at}]"),
                    "a key and its principal must not be empty",
                )
            })
            .collect()
    }

    fn generate(config: &Config, instance: &Instance) -> Result<Generated, String> {
        let key = ApiKeyInstance::of(instance).and_then(|i| i.key);
        let Some(key) = key else {
            return Ok(Generated::denied(code::UNAUTHENTICATED, "no API key"));
        };
        Ok(match config.keys.get(key) {
            Some(owner) => Generated::new()
                .output("principal", Value::String(owner.principal.clone()))
                .output("claims", Value::string_map(owner.labels.clone()))
                .valid_for_ms(config.valid_ms),
            None => Generated::denied(code::UNAUTHENTICATED, "unknown API key"),
        })
    }
}

mixer_wasm_sdk::plugin!(KeyLabels);
