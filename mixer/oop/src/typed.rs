//! Handler params encoded into the adapter's own config message, when an `adapter` document
//! gives its descriptor ([`ParamsDescriptor`]), as Istio 1.4 did: the YAML tree is read with
//! proto3's JSON mapping (field names in lowerCamelCase or as declared, enums by name or
//! number, `google.protobuf.Duration` as `"1.5s"`, nested messages, repeated fields, maps) and
//! sent as an `Any` of type `type.googleapis.com/<message>`. Without a descriptor the params
//! go as a `google.protobuf.Struct` ([`params_any`](crate::params_any)).

use mixer_adapter_api::ParamError;
use mixer_remote::ParamsDescriptor;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage};
use prost_types::Any;
use serde_path_to_error::Segment;

use crate::convert;

/// The `adapter_config` a handler sends: its params in the adapter's message when
/// `descriptor` is given, else as a `google.protobuf.Struct`.
///
/// # Errors
///
/// Params that do not fit the message (an unknown field, a value of the wrong type), with
/// the field's path inside the params; or a descriptor that does not define its message.
pub fn adapter_config(
    params: &serde_json::Value,
    descriptor: Option<&ParamsDescriptor>,
) -> Result<Any, ParamError> {
    match descriptor {
        Some(d) => typed_params_any(params, d),
        None => Ok(convert::params_any(params)),
    }
}

/// Params encoded into `descriptor.message`, packed in an `Any`. Null params are the empty
/// message.
///
/// ```
/// use std::sync::Arc;
/// use mixer_remote::ParamsDescriptor;
/// use prost::Message;
/// use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet};
/// use prost_types::field_descriptor_proto::{Label, Type};
///
/// // message Params { string file_path = 1; }  in package `mine.config`
/// let set = FileDescriptorSet { file: vec![FileDescriptorProto {
///     name: Some("config.proto".into()),
///     package: Some("mine.config".into()),
///     syntax: Some("proto3".into()),
///     message_type: vec![DescriptorProto {
///         name: Some("Params".into()),
///         field: vec![FieldDescriptorProto {
///             name: Some("file_path".into()), json_name: Some("filePath".into()), number: Some(1),
///             label: Some(Label::Optional as i32), r#type: Some(Type::String as i32),
///             ..Default::default()
///         }],
///         ..Default::default()
///     }],
///     ..Default::default()
/// }]};
/// let descriptor = ParamsDescriptor {
///     message: "mine.config.Params".into(),
///     file_descriptor_set: Arc::from(set.encode_to_vec()),
/// };
///
/// let any = mixer_oop::typed_params_any(&serde_json::json!({"filePath": "/tmp/x"}), &descriptor).unwrap();
/// assert_eq!(any.type_url, "type.googleapis.com/mine.config.Params");
/// assert_eq!(any.value, [10, 6, b'/', b't', b'm', b'p', b'/', b'x']); // field 1, 6 bytes
///
/// let e = mixer_oop::typed_params_any(&serde_json::json!({"file": "/tmp/x"}), &descriptor).unwrap_err();
/// assert_eq!(e.to_string(), "file: unknown field (params are encoded into mine.config.Params)");
/// ```
///
/// # Errors
///
/// As [`adapter_config`].
pub fn typed_params_any(
    params: &serde_json::Value,
    descriptor: &ParamsDescriptor,
) -> Result<Any, ParamError> {
    // Well-known types first, as config validation does, so both accept the same sets.
    let mut pool = DescriptorPool::global();
    pool.decode_file_descriptor_set(&descriptor.file_descriptor_set[..])
        .map_err(|e| ParamError::new("", format!("bad adapter descriptor: {e}")))?;
    let message = pool
        .get_message_by_name(&descriptor.message)
        .ok_or_else(|| {
            ParamError::new(
                "",
                format!(
                    "the adapter descriptor does not define {}",
                    descriptor.message
                ),
            )
        })?;
    let encoded = if params.is_null() {
        DynamicMessage::new(message)
    } else {
        let mut track = serde_path_to_error::Track::new();
        DynamicMessage::deserialize(
            message.clone(),
            serde_path_to_error::Deserializer::new(params, &mut track),
        )
        .map_err(|e| misfit(&e.to_string(), &track.path(), message.full_name()))?
    };
    Ok(Any {
        type_url: format!("type.googleapis.com/{}", descriptor.message),
        value: encoded.encode_to_vec(),
    })
}

/// The error for params that do not fit, at the field's path inside the params.
fn misfit(text: &str, path: &serde_path_to_error::Path, message: &str) -> ParamError {
    let mut at = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => at.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !at.is_empty() {
                    at.push('.');
                }
                at.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    // prost-reflect stops at the map holding an unknown key: point at the key itself.
    if let Some(key) = text
        .strip_prefix("unrecognized field name '")
        .and_then(|k| k.strip_suffix('\''))
    {
        let field = if at.is_empty() {
            key.to_owned()
        } else {
            format!("{at}.{key}")
        };
        return ParamError::new(
            field,
            format!("unknown field (params are encoded into {message})"),
        );
    }
    ParamError::new(at, format!("{text} (params are encoded into {message})"))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use mixer_proto::testdata::{Params, params};
    use serde_json::json;

    use super::*;

    fn descriptor() -> ParamsDescriptor {
        ParamsDescriptor {
            message: "testadapter.config.Params".into(),
            file_descriptor_set: Arc::from(mixer_proto::testdata::FILE_DESCRIPTOR_SET),
        }
    }

    fn decoded(params: serde_json::Value) -> Params {
        let any = typed_params_any(&params, &descriptor()).expect("fits");
        assert_eq!(
            any.type_url,
            "type.googleapis.com/testadapter.config.Params"
        );
        Params::decode(any.value.as_slice()).expect("protoc-generated code decodes it")
    }

    fn refused(params: serde_json::Value) -> String {
        typed_params_any(&params, &descriptor())
            .expect_err("does not fit")
            .to_string()
    }

    #[test]
    fn every_shape_arrives_as_generated_code_reads_it() {
        let p = decoded(json!({
            "backendAddress": "db:5432",
            "mode": "DENY",
            "refresh_interval": "1.5s",
            "allowed": ["alice", "bob"],
            "limits": {"alice": 3, "bob": "4"},
            "backend": {"host": "h", "port": 80, "tls": true},
            "fallbacks": [{"host": "f1"}, {"host": "f2", "port": 81}],
            "ratio": 0.25,
        }));
        assert_eq!(
            p,
            Params {
                backend_address: "db:5432".into(),
                mode: params::Mode::Deny as i32,
                refresh_interval: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 500_000_000
                }),
                allowed: vec!["alice".into(), "bob".into()],
                limits: HashMap::from([("alice".into(), 3), ("bob".into(), 4)]),
                backend: Some(params::Backend {
                    host: "h".into(),
                    port: 80,
                    tls: true
                }),
                fallbacks: vec![
                    params::Backend {
                        host: "f1".into(),
                        ..Default::default()
                    },
                    params::Backend {
                        host: "f2".into(),
                        port: 81,
                        tls: false
                    },
                ],
                ratio: 0.25,
            }
        );
        // Enums by number too; no params at all are the empty message.
        assert_eq!(decoded(json!({"mode": 1})).mode, params::Mode::Allow as i32);
        assert_eq!(decoded(json!(null)), Params::default());
        assert_eq!(decoded(json!({})), Params::default());
    }

    #[test]
    fn params_that_do_not_fit_name_the_field() {
        let suffix = " (params are encoded into testadapter.config.Params)";
        for (params, expected) in [
            (json!({"colour": "red"}), "colour: unknown field".to_string()),
            (
                json!({"backend": {"hots": "h"}}),
                "backend.hots: unknown field".to_string(),
            ),
            (
                json!({"fallbacks": [{}, {"port": "high"}]}),
                "fallbacks[1].port: invalid digit found in string".to_string(),
            ),
            (
                json!({"mode": "MAYBE"}),
                "mode: unrecognized enum value 'MAYBE'".to_string(),
            ),
            (
                json!({"limits": {"x": true}}),
                "limits.x: invalid type: boolean `true`, expected a 64-bit signed integer or decimal string"
                    .to_string(),
            ),
            (
                json!({"allowed": "alice"}),
                "allowed: invalid type: string \"alice\", expected a list".to_string(),
            ),
        ] {
            assert_eq!(refused(params.clone()), format!("{expected}{suffix}"), "{params}");
        }
        assert!(refused(json!({"refreshInterval": "soon"})).starts_with("refreshInterval: "));
        assert!(refused(json!([1])).starts_with("invalid type: sequence"));
    }

    #[test]
    fn a_descriptor_that_does_not_define_its_message() {
        let mut d = descriptor();
        d.message = "testadapter.config.Other".into();
        assert_eq!(
            typed_params_any(&json!({}), &d).unwrap_err().to_string(),
            "the adapter descriptor does not define testadapter.config.Other"
        );
        d.file_descriptor_set = Arc::from(&[0x0a, 0x05, 0xff][..]);
        assert!(
            typed_params_any(&json!({}), &d)
                .unwrap_err()
                .message
                .starts_with("bad adapter descriptor")
        );
    }

    #[test]
    fn without_a_descriptor_params_go_as_a_struct() {
        let any = adapter_config(&json!({"a": 1}), None).expect("struct");
        assert_eq!(any.type_url, crate::STRUCT_TYPE_URL);
        let typed = adapter_config(&json!({"ratio": 1}), Some(&descriptor())).expect("typed");
        assert_eq!(
            typed.type_url,
            "type.googleapis.com/testadapter.config.Params"
        );
    }
}
