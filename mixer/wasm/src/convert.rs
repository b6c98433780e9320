//! Between the mixer's model and the WIT types.

use std::net::IpAddr;
use std::time::Duration;

use mixer_model::{Code, FieldValue, Instance, Status, Template, Value};

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
        // Interim until the WIT world carries attribute generators: never sent to a plugin,
        // since no plugin declares them.
        Template::Kubernetes | Template::Jwt | Template::ApiKey => wit::Template::Reportnothing,
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
                value: match v {
                    FieldValue::Value(v) => wit::FieldValue::Single(value(v)),
                    FieldValue::Map(entries) => wit::FieldValue::Map(
                        entries
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
    fn unknown_codes_are_unknown() {
        assert_eq!(status(7, "no".into()).code, Code::PermissionDenied);
        assert_eq!(status(99, "x".into()).code, Code::Unknown);
        assert_eq!(status(0, "ignored".into()), Status::OK);
    }
}
