//! [`Config`]: a handler's params as the mixer sent them, either as JSON or as the adapter's
//! own config message.

use std::ops::Deref;

/// A handler's `params`, as the mixer sent them in `adapter_config` (or as it stored them in
/// a session). Two forms:
///
/// - **JSON**, when the mixer has no description of the adapter's config: the params travel
///   as a `google.protobuf.Struct` and read as a [`serde_json::Value`] through `Deref`
///   (`config["users"]`, `config.get("file")`; `Null` when the handler has none);
/// - **the adapter's own message**, when the mixer's config has an `adapter` document whose
///   `config` is the descriptor set of the adapter's `Params` message (as in Istio 1.4): the
///   params travel as that message (`type.googleapis.com/<package>.Params`) and
///   [`Config::decode`] gives it as the prost type generated from the same `.proto`. The
///   JSON view is then `Null`.
///
/// ```
/// use mixer_adapter_sdk::{Adapter, Config};
/// use prost::Message;
///
/// /// What prost-build generates for the adapter's
/// /// `message Params { string backend_address = 1; repeated string allowed = 2; }`.
/// #[derive(Clone, PartialEq, prost::Message)]
/// pub struct Params {
///     #[prost(string, tag = "1")]
///     pub backend_address: String,
///     #[prost(string, repeated, tag = "2")]
///     pub allowed: Vec<String>,
/// }
///
/// struct Mine;
///
/// impl Adapter for Mine {
///     fn validate(&self, config: &Config) -> Result<(), String> {
///         let params: Params = config.decode()?;
///         if params.backend_address.is_empty() {
///             return Err("backend_address: required".into());
///         }
///         Ok(())
///     }
/// }
///
/// // What the SDK hands the adapter when the mixer sends `mine.config.Params`:
/// let sent = Params { backend_address: "db:5432".into(), allowed: vec!["alice".into()] };
/// let config = Config::from_message(prost_types::Any {
///     type_url: "type.googleapis.com/mine.config.Params".into(),
///     value: sent.encode_to_vec(),
/// });
/// assert_eq!(config.type_url(), Some("type.googleapis.com/mine.config.Params"));
/// assert_eq!(config.decode::<Params>().unwrap(), sent);
/// assert!(Mine.validate(&config).is_ok());
/// assert!(config.is_null()); // no JSON view of a typed config
///
/// // Params sent as JSON (no `adapter` document in the mixer's config) do not decode.
/// let json = Config::from_json(serde_json::json!({"backend_address": "db:5432"}));
/// assert_eq!(json["backend_address"], "db:5432");
/// assert!(json.decode::<Params>().unwrap_err().contains("google.protobuf.Struct"));
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    json: serde_json::Value,
    message: Option<prost_types::Any>,
}

impl Config {
    /// Params sent as JSON (a `google.protobuf.Struct`).
    pub fn from_json(json: serde_json::Value) -> Config {
        Config {
            json,
            message: None,
        }
    }

    /// Params sent as the adapter's own message.
    pub fn from_message(message: prost_types::Any) -> Config {
        Config {
            json: serde_json::Value::Null,
            message: Some(message),
        }
    }

    /// The JSON view (also reached through `Deref`): the params sent as JSON, `Null` when
    /// there are none or they came as the adapter's own message.
    pub fn json(&self) -> &serde_json::Value {
        &self.json
    }

    /// The adapter's own message as sent (`type_url` and encoded bytes), if it came so.
    pub fn message(&self) -> Option<&prost_types::Any> {
        self.message.as_ref()
    }

    /// The `type_url` of the adapter's own message (`type.googleapis.com/<package>.Params`),
    /// if the params came so.
    pub fn type_url(&self) -> Option<&str> {
        self.message.as_ref().map(|m| m.type_url.as_str())
    }

    /// The params as the adapter's config message `M` (the prost type generated from the
    /// `.proto` whose descriptor set the mixer's `adapter` document carries). No params at all
    /// decode as `M::default()`.
    ///
    /// The type is not checked against [`Config::type_url`]: compare it first if an adapter
    /// accepts several messages.
    ///
    /// # Errors
    ///
    /// The bytes are not an `M`, or the params came as JSON (the mixer's config has no
    /// `adapter` document describing `M`).
    pub fn decode<M: prost::Message + Default>(&self) -> Result<M, String> {
        match &self.message {
            Some(m) => M::decode(m.value.as_slice())
                .map_err(|e| format!("params ({}): {e}", m.type_url)),
            None if self.json.is_null() => Ok(M::default()),
            None => Err(
                "params came as a google.protobuf.Struct (JSON), not as the adapter's own message: \
                 give the mixer an `adapter` document whose `config` is the descriptor set of the \
                 message, and name it in the handler's `adapter`"
                    .into(),
            ),
        }
    }
}

impl Deref for Config {
    type Target = serde_json::Value;

    fn deref(&self) -> &serde_json::Value {
        &self.json
    }
}

impl From<serde_json::Value> for Config {
    fn from(json: serde_json::Value) -> Config {
        Config::from_json(json)
    }
}

impl PartialEq<serde_json::Value> for Config {
    fn eq(&self, other: &serde_json::Value) -> bool {
        self.message.is_none() && self.json == *other
    }
}
