//! An adapter's own config message: found in the descriptor set an `adapter` document
//! carries, and handler `params` checked against it with proto3's JSON mapping (field names
//! in lowerCamelCase or as declared, enums by name, durations as `"1.5s"`), the mapping
//! `mixer-oop` encodes with.

use std::sync::Arc;

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use mixer_remote::ParamsDescriptor;
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MessageDescriptor};
use serde_json::Value;
use serde_path_to_error::Segment;

use crate::document::type_name;
use crate::error::{did_you_mean, index, join};

/// The message Istio takes as an adapter's config in its descriptor set.
const PARAMS_MESSAGE: &str = "Params";

/// Standard base64, padded or not: Istio's decoder insists on padding, but nothing is gained
/// by refusing a descriptor that only lost its `=`.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Decodes an `adapter` document's `spec.config` and finds the params message in it: the
/// first top-level message named `Params`, as Istio did.
pub(crate) fn params_message(text: &str) -> Result<(ParamsDescriptor, MessageDescriptor), String> {
    // YAML block scalars keep line breaks; Go's base64 decoder (Istio's) skips them too.
    let compact: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let bytes = BASE64
        .decode(&compact)
        .map_err(|e| format!("not base64: {e}"))?;
    // Starting from the well-known types lets a set that imports google/protobuf/*.proto
    // without including them (protoc without --include_imports) still resolve.
    let mut pool = DescriptorPool::global();
    pool.decode_file_descriptor_set(bytes.as_slice())
        .map_err(|e| format!("not a serialized google.protobuf.FileDescriptorSet: {e}"))?;
    let message = pool
        .files()
        .flat_map(|f| f.messages().collect::<Vec<_>>())
        .find(|m| m.name() == PARAMS_MESSAGE)
        .ok_or_else(|| {
            format!(
                "the descriptor set has no top-level message named {PARAMS_MESSAGE} (the adapter's config message)"
            )
        })?;
    let descriptor = ParamsDescriptor {
        message: Arc::from(message.full_name()),
        file_descriptor_set: Arc::from(bytes),
    };
    Ok((descriptor, message))
}

/// Checks a handler's `params` against the adapter's message. On error: the field path
/// inside `params` (empty for the whole) and what is wrong.
pub(crate) fn check_params(
    message: &MessageDescriptor,
    params: &Value,
) -> Result<(), (String, String)> {
    if params.is_null() {
        return Ok(());
    }
    let mut track = serde_path_to_error::Track::new();
    let result = DynamicMessage::deserialize(
        message.clone(),
        serde_path_to_error::Deserializer::new(params, &mut track),
    );
    let Err(error) = result else {
        return Ok(());
    };
    let segments: Vec<Segment> = track.path().iter().cloned().collect();
    let mut path = String::new();
    let mut at = Some(At::Kind(Kind::Message(message.clone())));
    let mut found = Some(params);
    for segment in &segments {
        match segment {
            Segment::Seq { index: i } => {
                path = index(&path, *i);
                found = found.and_then(|v| v.get(*i));
            }
            Segment::Map { key } => {
                path = join(&path, key);
                found = found.and_then(|v| v.get(key));
            }
            Segment::Enum { .. } | Segment::Unknown => found = None,
        }
        at = at.and_then(|a| a.step(segment));
    }
    Err(explain(error.to_string(), path, at, found))
}

/// prost-reflect's messages name neither the field nor the alternatives: say both.
fn explain(text: String, path: String, at: Option<At>, found: Option<&Value>) -> (String, String) {
    let found = found.map_or_else(|| "something else".to_string(), shown);
    match at {
        Some(At::Kind(Kind::Message(m))) => {
            if let Some(key) = text
                .strip_prefix("unrecognized field name '")
                .and_then(|k| k.strip_suffix('\''))
            {
                let names: Vec<String> = m.fields().map(|f| f.name().to_owned()).collect();
                let hint = did_you_mean(key, names.iter().map(String::as_str));
                return (
                    join(&path, key),
                    format!("unknown field of {}{hint}", m.full_name()),
                );
            }
            let message = match m.full_name() {
                "google.protobuf.Duration" => {
                    format!("{found} is not a duration such as \"5s\" or \"0.5s\"")
                }
                "google.protobuf.Timestamp" => {
                    format!("{found} is not a timestamp such as \"2020-01-01T00:00:00Z\"")
                }
                name if text.starts_with("invalid type") => {
                    format!("expected a mapping of {name}'s fields, found {found}")
                }
                _ => text,
            };
            (path, message)
        }
        Some(At::Kind(Kind::Enum(e))) => {
            let names: Vec<String> = e.values().map(|v| v.name().to_owned()).collect();
            (
                path,
                format!(
                    "{found} is not one of {} ({})",
                    names.join(", "),
                    e.full_name()
                ),
            )
        }
        Some(At::Kind(k)) => (path, format!("expected {}, found {found}", scalar(&k))),
        Some(At::List(_)) if text.starts_with("invalid type") => {
            (path, format!("expected a list, found {found}"))
        }
        Some(At::Map(_)) if text.starts_with("invalid type") => {
            (path, format!("expected a mapping, found {found}"))
        }
        _ => (path, text),
    }
}

/// A value as an error message shows it: scalars as written, containers by their type.
fn shown(value: &Value) -> String {
    match value {
        Value::String(_) | Value::Number(_) | Value::Bool(_) => value.to_string(),
        other => type_name(other).to_string(),
    }
}

/// What a scalar field takes, for messages.
fn scalar(kind: &Kind) -> &'static str {
    match kind {
        Kind::Double | Kind::Float => "a number",
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => "a 32-bit integer",
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => "a 64-bit integer",
        Kind::Uint32 | Kind::Fixed32 => "a non-negative 32-bit integer",
        Kind::Uint64 | Kind::Fixed64 => "a non-negative 64-bit integer",
        Kind::Bool => "true or false",
        Kind::String => "a string",
        Kind::Bytes => "base64-encoded bytes",
        Kind::Message(_) | Kind::Enum(_) => "a value",
    }
}

/// Where a path inside `params` points in the message.
enum At {
    Kind(Kind),
    List(Kind),
    Map(Kind),
}

impl At {
    fn step(self, segment: &Segment) -> Option<At> {
        match (self, segment) {
            (At::Kind(Kind::Message(m)), Segment::Map { key }) => {
                let f = m
                    .get_field_by_json_name(key)
                    .or_else(|| m.get_field_by_name(key))?;
                Some(if f.is_map() {
                    match f.kind() {
                        Kind::Message(entry) => At::Map(entry.map_entry_value_field().kind()),
                        _ => return None,
                    }
                } else if f.is_list() {
                    At::List(f.kind())
                } else {
                    At::Kind(f.kind())
                })
            }
            (At::List(k), Segment::Seq { .. }) | (At::Map(k), Segment::Map { .. }) => {
                Some(At::Kind(k))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use prost::Message;
    use serde_json::json;

    use super::*;

    fn message() -> MessageDescriptor {
        let text = STANDARD.encode(mixer_proto::testdata::FILE_DESCRIPTOR_SET);
        let (descriptor, message) = params_message(&text).expect("the test descriptor");
        assert_eq!(&*descriptor.message, "testadapter.config.Params");
        message
    }

    fn problem(params: Value) -> String {
        let (path, message) = check_params(&message(), &params).expect_err("must not fit");
        format!("{path}: {message}")
    }

    #[test]
    fn params_in_either_spelling_fit() {
        let m = message();
        for params in [
            json!(null),
            json!({}),
            json!({"backendAddress": "db:1", "mode": "DENY", "refreshInterval": "1.5s",
                "allowed": ["a"], "limits": {"x": 3}, "backend": {"host": "h", "port": 80},
                "fallbacks": [{"tls": true}], "ratio": 0.5}),
            json!({"backend_address": "db:1", "mode": 2, "refresh_interval": "0s",
                "limits": {"x": "3"}, "ratio": 1}),
        ] {
            assert_eq!(check_params(&m, &params), Ok(()), "{params}");
        }
    }

    #[test]
    fn each_misfit_names_its_field_and_what_it_takes() {
        let cases = [
            (
                json!({"backend": {"hots": "h"}}),
                "backend.hots: unknown field of testadapter.config.Params.Backend (did you mean host?)",
            ),
            (
                json!({"colour": "red"}),
                "colour: unknown field of testadapter.config.Params",
            ),
            (
                json!({"fallbacks": [{}, {"port": "high"}]}),
                "fallbacks[1].port: expected a 32-bit integer, found \"high\"",
            ),
            (
                json!({"backend": {"tls": "yes"}}),
                "backend.tls: expected true or false, found \"yes\"",
            ),
            (
                json!({"mode": "MAYBE"}),
                "mode: \"MAYBE\" is not one of MODE_UNSPECIFIED, ALLOW, DENY (testadapter.config.Params.Mode)",
            ),
            (
                json!({"refreshInterval": "soon"}),
                "refreshInterval: \"soon\" is not a duration such as \"5s\" or \"0.5s\"",
            ),
            (
                json!({"limits": {"x": "lots"}}),
                "limits.x: expected a 64-bit integer, found \"lots\"",
            ),
            (
                json!({"limits": ["x"]}),
                "limits: expected a mapping, found a list",
            ),
            (
                json!({"allowed": "a"}),
                "allowed: expected a list, found \"a\"",
            ),
            (
                json!({"backend": "db"}),
                "backend: expected a mapping of testadapter.config.Params.Backend's fields, found \"db\"",
            ),
            (
                json!([1, 2]),
                ": expected a mapping of testadapter.config.Params's fields, found a list",
            ),
        ];
        for (params, expected) in cases {
            assert_eq!(problem(params.clone()), expected, "{params}");
        }
    }

    #[test]
    fn descriptor_sets_that_do_not_fit() {
        let e = |text: &str| params_message(text).map(|_| ()).expect_err("bad");
        // Spaces are dropped before decoding (YAML may fold the text).
        assert_eq!(e("not base64!"), "not base64: Invalid symbol 33, offset 9.");
        assert!(e("CgX/////").starts_with("not a serialized google.protobuf.FileDescriptorSet"));
        let other = prost_types::FileDescriptorSet {
            file: vec![prost_types::FileDescriptorProto {
                name: Some("other.proto".into()),
                message_type: vec![prost_types::DescriptorProto {
                    name: Some("Config".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        assert_eq!(
            e(&STANDARD.encode(other.encode_to_vec())),
            "the descriptor set has no top-level message named Params (the adapter's config message)"
        );
        // Line breaks (a YAML block scalar) and missing padding are fine.
        let text = STANDARD.encode(mixer_proto::testdata::FILE_DESCRIPTOR_SET);
        let folded: String = text
            .trim_end_matches('=')
            .as_bytes()
            .chunks(60)
            .map(|c| String::from_utf8_lossy(c).into_owned() + "\n")
            .collect();
        assert!(params_message(&folded).is_ok());
    }
}
