//! A request's `adapter_config`: a session id, or the handler's params, which the SDK turns
//! into the JSON tree [`AnyAdapter::compile`](mixer_adapter_api::AnyAdapter::compile) takes,
//! whichever form they came in.

use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};
use prost_types::Any;

/// What a request's `adapter_config` carries.
pub(crate) enum Carried<'a> {
    /// The handler's params (`None`: it has none), in whichever form they came.
    Params(Option<&'a Any>),
    /// A session id from `CreateSession`.
    Session(String),
}

/// Tells a session id from params. A `google.protobuf.Struct` (or `Value`) is the params; a
/// `google.protobuf.StringValue` is a session id; another type URL with a `/`
/// (`type.googleapis.com/<package>.Params`) is the adapter's own config message; anything
/// else is a session id in the bytes (the mixer sends `type_url:
/// "google.protobuf.Any.type_url"` with the id as the value).
pub(crate) fn carried(any: Option<&Any>) -> Result<Carried<'_>, String> {
    let Some(any) = any else {
        return Ok(Carried::Params(None));
    };
    match any.type_url.rsplit('/').next().unwrap_or_default() {
        "google.protobuf.StringValue" => String::decode(any.value.as_slice())
            .map(Carried::Session)
            .map_err(|e| format!("adapter_config: bad google.protobuf.StringValue: {e}")),
        "" if any.value.is_empty() => Ok(Carried::Params(None)),
        // A message's bytes may well be valid UTF-8: never mistake one for a session id.
        _ if any.type_url.contains('/') => Ok(Carried::Params(Some(any))),
        _ => String::from_utf8(any.value.clone())
            .map(Carried::Session)
            .map_err(|_| format!("adapter_config: unknown type {:?}", any.type_url)),
    }
}

/// Reads params into JSON: a `google.protobuf.Struct` as it is, the adapter's own message by
/// the protobuf JSON mapping, with the descriptors the server was given.
#[derive(Clone, Default)]
pub(crate) struct ParamsReader {
    /// The adapter's config messages (and the well-known types they use), once it has any.
    pool: Option<DescriptorPool>,
}

/// Int64 fields as JSON numbers (a serde config reads `i64` from a number, not from the
/// mapping's string); names in lowerCamelCase and default fields left out, as the mapping
/// writes them, so the config sees what a handler's YAML written in that mapping says.
const JSON: SerializeOptions = SerializeOptions::new().stringify_64_bit_integers(false);

impl ParamsReader {
    /// Adds the messages of a serialized `google.protobuf.FileDescriptorSet`.
    pub(crate) fn add(&mut self, file_descriptor_set: &[u8]) -> Result<(), String> {
        // The well-known types first, so a set built without `--include_imports` still
        // resolves `google.protobuf.Duration` and the like.
        let mut pool = self.pool.take().unwrap_or_else(DescriptorPool::global);
        let added = pool
            .decode_file_descriptor_set(file_descriptor_set)
            .map_err(|e| format!("bad file descriptor set: {e}"));
        self.pool = Some(pool);
        added
    }

    /// The params as JSON; `null` when there are none.
    pub(crate) fn json(&self, params: Option<&Any>) -> Result<serde_json::Value, String> {
        let Some(any) = params else {
            return Ok(serde_json::Value::Null);
        };
        let name = any.type_url.rsplit('/').next().unwrap_or_default();
        match name {
            "google.protobuf.Struct" => prost_types::Struct::decode(any.value.as_slice())
                .map(|s| struct_to_json(&s))
                .map_err(|e| format!("adapter_config: bad google.protobuf.Struct: {e}")),
            "google.protobuf.Value" => prost_types::Value::decode(any.value.as_slice())
                .map(|v| value_to_json(&v))
                .map_err(|e| format!("adapter_config: bad google.protobuf.Value: {e}")),
            _ => self.message(name, &any.value),
        }
    }

    fn message(&self, name: &str, bytes: &[u8]) -> Result<serde_json::Value, String> {
        let Some(descriptor) = self.pool.as_ref().and_then(|p| p.get_message_by_name(name)) else {
            return Err(format!(
                "the params came as {name}, a message this adapter was not told about: give \
                 the adapter's server the descriptor set of the message \
                 (Server::params_message, the `config` of the mixer's `adapter` document), \
                 or remove the `adapter` document so that the mixer sends the params as JSON"
            ));
        };
        let message = DynamicMessage::decode(descriptor, bytes)
            .map_err(|e| format!("the params do not decode as {name}: {e}"))?;
        message
            .serialize_with_options(serde_json::value::Serializer, &JSON)
            .map_err(|e| format!("the params ({name}) have no JSON form: {e}"))
    }
}

/// A `google.protobuf.Struct` as a JSON object.
fn struct_to_json(s: &prost_types::Struct) -> serde_json::Value {
    serde_json::Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_to_json(v)))
            .collect(),
    )
}

fn value_to_json(v: &prost_types::Value) -> serde_json::Value {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::NumberValue(x)) => {
            // A Struct has only doubles; an integral one is given back as an integer, so
            // that a config field of an integer type reads it.
            if x.fract() == 0.0 && x.abs() < 9.0e15 {
                serde_json::Value::from(*x as i64)
            } else {
                serde_json::Value::from(*x)
            }
        }
        Some(Kind::StringValue(s)) => serde_json::Value::from(s.clone()),
        Some(Kind::BoolValue(b)) => serde_json::Value::from(*b),
        Some(Kind::StructValue(s)) => struct_to_json(s),
        Some(Kind::ListValue(l)) => {
            serde_json::Value::Array(l.values.iter().map(value_to_json).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn json_of(params: &Any) -> serde_json::Value {
        let Ok(Carried::Params(Some(params))) = carried(Some(params)) else {
            panic!("not params");
        };
        ParamsReader::default().json(Some(params)).expect("JSON")
    }

    #[test]
    fn params_survive_the_mixers_struct() {
        let params = json!({"file": "/tmp/allowed.txt", "ttl": 5, "ratio": 0.5,
            "tags": ["a", true], "sub": {"x": null}});
        assert_eq!(json_of(&mixer_oop::params_any(&params)), params);
    }

    #[test]
    fn a_session_id_is_read_from_the_bytes() {
        let session = mixer_oop::session_any("session-7");
        assert!(matches!(carried(Some(&session)), Ok(Carried::Session(id)) if id == "session-7"));
        assert!(matches!(carried(None), Ok(Carried::Params(None))));
        // The adapter's own message, even when its bytes happen to be valid UTF-8.
        let typed = Any {
            type_url: "type.googleapis.com/mine.config.Params".into(),
            value: b"\n\x02db".to_vec(),
        };
        assert!(matches!(carried(Some(&typed)), Ok(Carried::Params(Some(m))) if *m == typed));
    }

    #[test]
    fn a_message_reads_by_the_json_mapping_once_its_descriptor_is_known() {
        use mixer_proto::testdata::{Params, params};
        let sent = Params {
            backend_address: "db:5432".into(),
            mode: params::Mode::Deny as i32,
            refresh_interval: Some(prost_types::Duration {
                seconds: 1,
                nanos: 500_000_000,
            }),
            limits: [("alice".to_string(), 3)].into(),
            ..Default::default()
        };
        let any = Any {
            type_url: "type.googleapis.com/testadapter.config.Params".into(),
            value: sent.encode_to_vec(),
        };
        let unknown = ParamsReader::default().json(Some(&any)).unwrap_err();
        assert!(unknown.contains("Server::params_message"), "{unknown}");
        let mut reader = ParamsReader::default();
        reader
            .add(mixer_proto::testdata::FILE_DESCRIPTOR_SET)
            .expect("a good set");
        assert_eq!(
            reader.json(Some(&any)).expect("known"),
            json!({"backendAddress": "db:5432", "mode": "DENY", "refreshInterval": "1.500s",
                "limits": {"alice": 3}})
        );
        assert!(reader.add(&[0x0a, 0x05, 0xff]).is_err());
    }
}
