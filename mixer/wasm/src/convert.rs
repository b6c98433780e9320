//! Between the mixer's model and the WIT types.

use std::net::IpAddr;
use std::time::Duration;

use std::sync::Arc;

use mixer_adapter_api::{Denial, Generated};
use mixer_model::{
    Code, FieldKind, FieldValue, HeaderOp, HeaderOperation, Instance, Status, StringMap, Template,
    Timestamp, Value,
};

use crate::bindings as wit;

impl From<wit::Template> for Template {
    fn from(t: wit::Template) -> Template {
        match t {
            wit::Template::Authorization => Template::Authorization,
            wit::Template::Checknothing => Template::CheckNothing,
            wit::Template::Listentry => Template::ListEntry,
            wit::Template::Quota => Template::Quota,
            wit::Template::Metric => Template::Metric,
            wit::Template::Logentry => Template::LogEntry,
            wit::Template::Tracespan => Template::TraceSpan,
            wit::Template::Reportnothing => Template::ReportNothing,
            wit::Template::Kubernetes => Template::Kubernetes,
            wit::Template::Jwt => Template::Jwt,
            wit::Template::Apikey => Template::ApiKey,
        }
    }
}

pub(crate) fn template(t: Template) -> wit::Template {
    match t {
        Template::Authorization => wit::Template::Authorization,
        Template::CheckNothing => wit::Template::Checknothing,
        Template::ListEntry => wit::Template::Listentry,
        Template::Quota => wit::Template::Quota,
        Template::Metric => wit::Template::Metric,
        Template::LogEntry => wit::Template::Logentry,
        Template::TraceSpan => wit::Template::Tracespan,
        Template::ReportNothing => wit::Template::Reportnothing,
        Template::Kubernetes => wit::Template::Kubernetes,
        Template::Jwt => wit::Template::Jwt,
        Template::ApiKey => wit::Template::Apikey,
    }
}

fn value(v: &Value) -> wit::Value {
    match v {
        Value::String(s) => wit::Value::String(s.to_string()),
        Value::Int64(n) => wit::Value::Int64(*n),
        Value::Double(d) => wit::Value::Double(*d),
        Value::Bool(b) => wit::Value::Boolean(*b),
        Value::Timestamp(t) => wit::Value::Timestamp(t.0),
        Value::Duration(d) => wit::Value::Duration(d.0),
        Value::Bytes(b) => wit::Value::Bytes(b.to_vec()),
        Value::IpAddress(IpAddr::V4(a)) => wit::Value::IpAddress(a.octets().to_vec()),
        Value::IpAddress(IpAddr::V6(a)) => wit::Value::IpAddress(a.octets().to_vec()),
        Value::EmailAddress(s) => wit::Value::EmailAddress(s.to_string()),
        Value::Uri(s) => wit::Value::Uri(s.to_string()),
        Value::DnsName(s) => wit::Value::DnsName(s.to_string()),
        Value::StringMap(m) => wit::Value::StringMap(
            m.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
    }
}

/// An instance as the plugin receives it.
pub(crate) fn instance(i: &Instance) -> wit::Instance {
    wit::Instance {
        name: i.name.to_string(),
        template: template(i.template),
        fields: i
            .fields
            .iter()
            .map(|(name, v)| wit::Field {
                name: (*name).to_string(),
                value: match (v, v.entries()) {
                    (FieldValue::Value(v), _) => wit::FieldValue::Single(value(v)),
                    (_, entries) => wit::FieldValue::Map(
                        entries
                            .unwrap_or_default()
                            .iter()
                            .map(|(k, v)| (k.to_string(), value(v)))
                            .collect(),
                    ),
                },
            })
            .collect(),
    }
}

/// A plugin's status: codes outside gRPC's 0..=16 are UNKNOWN, as the mixer treats any
/// other adapter's.
pub(crate) fn status(code: u32, message: String) -> Status {
    let code = i32::try_from(code).map_or(Code::Unknown, Code::from_i32);
    Status::new(
        code,
        if code == Code::Ok {
            String::new()
        } else {
            message
        },
    )
}

pub(crate) fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// A plugin's value as the model's; an IP address of other than 4 or 16 bytes says so.
fn value_up(v: wit::Value) -> Result<Value, String> {
    Ok(match v {
        wit::Value::String(s) => Value::String(s.into()),
        wit::Value::Int64(n) => Value::Int64(n),
        wit::Value::Double(d) => Value::Double(d),
        wit::Value::Boolean(b) => Value::Bool(b),
        wit::Value::Timestamp(t) => Value::Timestamp(Timestamp(t)),
        wit::Value::Duration(d) => Value::Duration(mixer_model::Duration(d)),
        wit::Value::Bytes(b) => Value::Bytes(b.into()),
        wit::Value::IpAddress(b) => Value::IpAddress(match b.len() {
            4 => IpAddr::from(<[u8; 4]>::try_from(b.as_slice()).map_err(|e| e.to_string())?),
            16 => IpAddr::from(<[u8; 16]>::try_from(b.as_slice()).map_err(|e| e.to_string())?),
            n => return Err(format!("an IP address of {n} bytes")),
        }),
        wit::Value::EmailAddress(s) => Value::EmailAddress(s.into()),
        wit::Value::Uri(s) => Value::Uri(s.into()),
        wit::Value::DnsName(s) => Value::DnsName(s.into()),
        wit::Value::StringMap(m) => Value::StringMap(Arc::new(StringMap::from_pairs(m))),
    })
}

/// A generator's answer for an instance of `template`: each output named by the template
/// and of its declared type, at most once, and a denial that is one (not code 0). Anything
/// else is the plugin's bug, and the whole answer is refused: a half-read identity must not
/// reach the rules.
pub(crate) fn generated(template: Template, g: wit::Generated) -> Result<Generated, String> {
    let mut outputs: Vec<(&'static str, Value)> = Vec::with_capacity(g.outputs.len());
    for (name, value) in g.outputs {
        let spec = template.output(&name).ok_or_else(|| {
            format!("output {name:?} is not one of template {template}'s outputs")
        })?;
        let value = value_up(value).map_err(|why| format!("output {name}: {why}"))?;
        if let FieldKind::Value(Some(ty)) = spec.kind
            && value.value_type() != ty
        {
            return Err(format!(
                "output {name} is a {}, template {template} declares {ty}",
                value.value_type()
            ));
        }
        if outputs.iter().any(|(n, _)| *n == spec.name) {
            return Err(format!("output {name} is given twice"));
        }
        outputs.push((spec.name, value));
    }
    let denial = match g.denial {
        None => None,
        Some(d) if d.code == 0 => {
            return Err("a denial with code 0 (OK) denies nothing".into());
        }
        Some(d) => Some(Denial {
            status: status(d.code, d.message),
            response_headers: d
                .response_headers
                .into_iter()
                .map(|h| HeaderOperation {
                    name: h.name,
                    value: h.value,
                    op: match h.op {
                        wit::HeaderOp::Replace => HeaderOp::Replace,
                        wit::HeaderOp::Append => HeaderOp::Append,
                        wit::HeaderOp::Remove => HeaderOp::Remove,
                    },
                })
                .collect(),
        }),
    };
    Ok(Generated {
        outputs,
        valid_duration: g.valid_duration_ms.map(millis),
        denial,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_maps_both_ways() {
        for t in Template::ALL {
            assert_eq!(Template::from(template(t)), t);
        }
    }

    #[test]
    fn a_generators_answer_is_refused_whole_when_an_output_is_not_the_templates() {
        let ok = wit::Generated {
            outputs: vec![
                ("principal".into(), wit::Value::String("team-a".into())),
                (
                    "claims".into(),
                    wit::Value::StringMap(vec![("tier".into(), "gold".into())]),
                ),
            ],
            valid_duration_ms: Some(1500),
            denial: None,
        };
        let g = generated(Template::ApiKey, ok.clone()).expect("fine");
        assert_eq!(g.outputs[0], ("principal", Value::from("team-a")));
        assert_eq!(g.valid_duration, Some(Duration::from_millis(1500)));
        let mut unknown = ok.clone();
        unknown
            .outputs
            .push(("tier".into(), wit::Value::String("gold".into())));
        let mut mistyped = ok.clone();
        mistyped.outputs[1].1 = wit::Value::String("tier=gold".into());
        let mut twice = ok.clone();
        twice
            .outputs
            .push(("principal".into(), wit::Value::String("b".into())));
        let mut bad_ip = ok.clone();
        bad_ip.outputs = vec![(
            "source_pod_ip".into(),
            wit::Value::IpAddress(vec![10, 0, 0]),
        )];
        let mut ok_denial = ok;
        ok_denial.denial = Some(wit::Denial {
            code: 0,
            message: String::new(),
            response_headers: vec![],
        });
        for (template, g, why) in [
            (
                Template::ApiKey,
                unknown,
                "output \"tier\" is not one of template apikey's outputs",
            ),
            (
                Template::ApiKey,
                mistyped,
                "output claims is a STRING, template apikey declares STRING_MAP",
            ),
            (Template::ApiKey, twice, "output principal is given twice"),
            (
                Template::Kubernetes,
                bad_ip,
                "output source_pod_ip: an IP address of 3 bytes",
            ),
            (
                Template::ApiKey,
                ok_denial,
                "a denial with code 0 (OK) denies nothing",
            ),
        ] {
            assert_eq!(generated(template, g).expect_err(why), why);
        }
    }

    #[test]
    fn unknown_codes_are_unknown() {
        assert_eq!(status(7, "no".into()).code, Code::PermissionDenied);
        assert_eq!(status(99, "x".into()).code, Code::Unknown);
        assert_eq!(status(0, "ignored".into()), Status::OK);
    }
}
