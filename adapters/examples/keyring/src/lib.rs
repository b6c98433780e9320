//! An out-of-process attribute generator of the `apikey` template: the handler's
//! `params.keys` name each key's owner and labels; a request's key becomes `$out.principal`
//! and `$out.claims`, which the instance's `attributeBindings` put into attributes for the
//! check rules. An unknown key is a denial (UNAUTHENTICATED), not an error: the request
//! carries a bad credential, the adapter is fine.
//!
//! An example of the transport, not a key store: the built-in `apikey` adapter reads keys
//! from files, compares them in constant time on a hash and reloads them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use mixer_adapter_sdk::api::{Adapter, AdapterError, AdapterInfo, BuildContext, Denial};
use mixer_adapter_sdk::api::{Generated, Handler, ParamError, Stability};
use mixer_adapter_sdk::generate_fn;
use mixer_adapter_sdk::model::{ApiKeyInstance, Code, Status, StringMap, Template, Value};

static INFO: AdapterInfo = AdapterInfo {
    name: "keyring",
    description: "answers an API key's owner and labels, from the keys in params.keys",
    templates: &[Template::ApiKey],
    cacheable: true,
    stability: Stability::Alpha,
};

/// The handler's params.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Each key, by its value.
    pub keys: BTreeMap<String, Key>,
}

/// One key's owner and labels.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Key {
    /// Whom the key belongs to: `$out.principal`.
    pub principal: String,
    /// Its labels (`tier: gold`): `$out.claims`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// The adapter.
#[derive(Debug, Default, Clone, Copy)]
pub struct Keyring;

/// Each key's outputs, ready to answer.
type Compiled = HashMap<String, Vec<(&'static str, Value)>>;

impl Adapter for Keyring {
    type Config = Config;
    type Compiled = Arc<Compiled>;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, config: Config) -> Result<Arc<Compiled>, Vec<ParamError>> {
        let mut errors = Vec::new();
        let mut keys = HashMap::with_capacity(config.keys.len());
        for (i, (key, owner)) in config.keys.into_iter().enumerate() {
            if key.is_empty() || owner.principal.is_empty() {
                errors.push(ParamError::new(
                    format!("keys[{i}]"),
                    "a key and its principal must not be empty",
                ));
                continue;
            }
            let labels = StringMap::from_pairs(owner.labels);
            let outputs = vec![
                ("principal", Value::from(owner.principal.as_str())),
                ("claims", Value::StringMap(Arc::new(labels))),
            ];
            keys.insert(key, outputs);
        }
        if keys.is_empty() && errors.is_empty() {
            errors.push(ParamError::new("keys", "name at least one key"));
        }
        if errors.is_empty() {
            Ok(Arc::new(keys))
        } else {
            Err(errors)
        }
    }

    fn build(
        &self,
        keys: &Arc<Compiled>,
        _: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        let keys = keys.clone();
        Ok(generate_fn(move |instance| {
            let key = ApiKeyInstance::of(instance).and_then(|i| i.key);
            // The key itself is a secret: the denial says what is wrong, never which key.
            let outputs = key.and_then(|k| keys.get(k)).ok_or_else(|| {
                let why = if key.is_none() {
                    "no API key"
                } else {
                    "unknown API key"
                };
                Denial {
                    status: Status::new(Code::Unauthenticated, why),
                    response_headers: Vec::new(),
                }
            });
            Ok(match outputs {
                Ok(outputs) => Generated::outputs(outputs.clone()),
                Err(denial) => Generated::denied(denial),
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use mixer_adapter_sdk::api::host::AnyAdapter;
    use mixer_adapter_sdk::model::{FieldValue, Instance};
    use serde_json::json;

    use super::*;

    fn key(k: Option<&str>) -> Instance {
        Instance {
            name: "key.instance.istio-system".into(),
            template: Template::ApiKey,
            fields: k
                .map(|k| ("key", FieldValue::Value(Value::from(k))))
                .into_iter()
                .collect(),
        }
    }

    #[tokio::test]
    async fn a_known_key_gives_its_owner_and_labels_and_others_are_denied() {
        let ctx = BuildContext {
            handler_name: "keyring.istio-system".into(),
        };
        let params =
            json!({"keys": {"k-123": {"principal": "team-a", "labels": {"tier": "gold"}}}});
        let handler = Keyring.compile_and_build(&params, &ctx).expect("builds");
        let generator = handler.as_attributes().expect("generates");
        let known = generator
            .generate(&key(Some("k-123")))
            .await
            .expect("answer");
        assert_eq!(known.denial, None);
        assert_eq!(known.outputs[0], ("principal", Value::from("team-a")));
        let Value::StringMap(labels) = &known.outputs[1].1 else {
            panic!("claims is a map: {known:?}");
        };
        assert_eq!(labels.get("tier"), Some("gold"));
        for (k, why) in [(Some("k-999"), "unknown API key"), (None, "no API key")] {
            let denied = generator.generate(&key(k)).await.expect("answer");
            let denial = denied.denial.expect("denied");
            assert_eq!(
                (denial.status.code, denial.status.message.as_str()),
                (Code::Unauthenticated, why)
            );
            assert!(denied.outputs.is_empty());
        }
    }

    #[test]
    fn params_name_keys_with_owners() {
        let none = AnyAdapter::compile(&Keyring, &json!({"keys": {}})).expect_err("no key");
        assert_eq!(none[0].path, "keys");
        let empty = AnyAdapter::compile(&Keyring, &json!({"keys": {"k": {"principal": ""}}}))
            .expect_err("no principal");
        assert_eq!(empty[0].path, "keys[0]");
    }
}
