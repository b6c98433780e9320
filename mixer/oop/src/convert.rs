//! Conversions between the mixer's model and the adapter protocol's messages: instances to
//! each template's `InstanceMsg`, values to `istio.policy.v1beta1.Value`, params to a
//! `google.protobuf.Struct` in an `Any`, and results back.

use std::collections::HashMap;

use mixer_model::{
    AuthorizationInstance, CheckResult, Code, Entries, ListEntryInstance, LogEntryInstance,
    MetricInstance, QuotaInstance, QuotaResult, Status, Template, TraceSpanInstance, Value,
    ValueType,
};
use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_proto::istio::policy::v1beta1 as policy;
use mixer_proto::{authorization, listentry, logentry, metric, quota, tracespan};
use mixer_remote::{InferredField, RemoteInstance};
use prost::Message;
use prost_types::Any;

mod outputs;
pub use outputs::{apikey, apikey_generated, jwt, jwt_generated, kubernetes, kubernetes_generated};

/// `type_url` of an adapter config sent as a `google.protobuf.Struct` (params as written,
/// when no adapter descriptor is known).
pub const STRUCT_TYPE_URL: &str = "type.googleapis.com/google.protobuf.Struct";

/// `type_url` of an adapter config that carries a session id instead of the config, as
/// Istio 1.4's template protos describe it: the `value` is the session id in UTF-8.
pub const SESSION_TYPE_URL: &str = "google.protobuf.Any.type_url";

/// A model value as `istio.policy.v1beta1.Value`. Bytes (no protocol type) go as a string of
/// lowercase hex.
pub fn value(v: &Value) -> policy::Value {
    use policy::value::Value as V;
    let inner = match v {
        Value::String(s) => V::StringValue(s.to_string()),
        Value::Int64(i) => V::Int64Value(*i),
        Value::Double(d) => V::DoubleValue(*d),
        Value::Bool(b) => V::BoolValue(*b),
        Value::Timestamp(t) => V::TimestampValue(timestamp(*t)),
        Value::Duration(d) => V::DurationValue(policy::Duration {
            value: Some(duration(d.0)),
        }),
        Value::Bytes(b) => V::StringValue(b.iter().map(|x| format!("{x:02x}")).collect()),
        Value::IpAddress(ip) => V::IpAddressValue(ip_address(*ip)),
        Value::EmailAddress(s) => V::EmailAddressValue(policy::EmailAddress {
            value: s.to_string(),
        }),
        Value::Uri(s) => V::UriValue(policy::Uri {
            value: s.to_string(),
        }),
        Value::DnsName(s) => V::DnsNameValue(policy::DnsName {
            value: s.to_string(),
        }),
        Value::StringMap(m) => V::StringMapValue(policy::StringMap {
            value: m
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        }),
    };
    policy::Value { value: Some(inner) }
}

fn duration(nanos: i64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: nanos.div_euclid(1_000_000_000),
        nanos: i32::try_from(nanos.rem_euclid(1_000_000_000)).unwrap_or(0),
    }
}

fn timestamp(t: mixer_model::Timestamp) -> policy::TimeStamp {
    let d = duration(t.0);
    policy::TimeStamp {
        value: Some(prost_types::Timestamp {
            seconds: d.seconds,
            nanos: d.nanos,
        }),
    }
}

fn ip_address(ip: std::net::IpAddr) -> policy::IpAddress {
    let value = match ip {
        std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
        std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    policy::IpAddress { value }
}

/// The proto package of `template`'s handler service: the template's name, but for Istio's
/// kubernetesenv template, which its generator put under `adapter.template.kubernetes`.
pub fn package(template: Template) -> &'static str {
    match template {
        Template::Kubernetes => "adapter.template.kubernetes",
        other => other.name(),
    }
}

/// The model's type as `istio.policy.v1beta1.ValueType` (BYTES has none: unspecified).
pub fn value_type(t: ValueType) -> policy::ValueType {
    use policy::ValueType as P;
    match t {
        ValueType::String => P::String,
        ValueType::Int64 => P::Int64,
        ValueType::Double => P::Double,
        ValueType::Bool => P::Bool,
        ValueType::Timestamp => P::Timestamp,
        ValueType::Duration => P::Duration,
        ValueType::Bytes => P::Unspecified,
        ValueType::IpAddress => P::IpAddress,
        ValueType::EmailAddress => P::EmailAddress,
        ValueType::Uri => P::Uri,
        ValueType::DnsName => P::DnsName,
        ValueType::StringMap => P::StringMap,
    }
}

fn values(entries: Entries<'_>) -> HashMap<String, policy::Value> {
    entries
        .iter()
        .map(|(k, v)| (k.to_owned(), value(v)))
        .collect()
}

fn text(s: Option<&str>) -> String {
    s.unwrap_or_default().to_owned()
}

fn ip(ip: Option<std::net::IpAddr>) -> Option<policy::IpAddress> {
    ip.map(ip_address)
}

/// `authorization.InstanceMsg`.
pub fn authorization(i: &AuthorizationInstance<'_>) -> authorization::InstanceMsg {
    authorization::InstanceMsg {
        name: i.name.to_owned(),
        subject: Some(authorization::SubjectMsg {
            user: text(i.subject.user),
            groups: text(i.subject.groups),
            properties: values(i.subject.properties),
        }),
        action: Some(authorization::ActionMsg {
            namespace: text(i.action.namespace),
            service: text(i.action.service),
            method: text(i.action.method),
            path: text(i.action.path),
            properties: values(i.action.properties),
        }),
    }
}

/// `listentry.InstanceMsg`: its `value` is a string in the protocol, so a value of another
/// type goes as its text, as Istio's string fields took it.
pub fn listentry(i: &ListEntryInstance<'_>) -> listentry::InstanceMsg {
    listentry::InstanceMsg {
        name: i.name.to_owned(),
        value: match i.value {
            None => String::new(),
            Some(v) => v.as_str().map_or_else(|| v.to_string(), str::to_owned),
        },
    }
}

/// `quota.InstanceMsg`.
pub fn quota(i: &QuotaInstance<'_>) -> quota::InstanceMsg {
    quota::InstanceMsg {
        name: i.name.to_owned(),
        dimensions: values(i.dimensions),
    }
}

/// `metric.InstanceMsg`.
pub fn metric(i: &MetricInstance<'_>) -> metric::InstanceMsg {
    metric::InstanceMsg {
        name: i.name.to_owned(),
        value: i.value.map(value),
        dimensions: values(i.dimensions),
        monitored_resource_type: text(i.monitored_resource_type),
        monitored_resource_dimensions: values(i.monitored_resource_dimensions),
    }
}

/// `logentry.InstanceMsg`.
pub fn logentry(i: &LogEntryInstance<'_>) -> logentry::InstanceMsg {
    logentry::InstanceMsg {
        name: i.name.to_owned(),
        variables: values(i.variables),
        timestamp: i.timestamp.map(timestamp),
        severity: text(i.severity),
        monitored_resource_type: text(i.monitored_resource_type),
        monitored_resource_dimensions: values(i.monitored_resource_dimensions),
    }
}

/// `tracespan.InstanceMsg`.
pub fn tracespan(i: &TraceSpanInstance<'_>) -> tracespan::InstanceMsg {
    tracespan::InstanceMsg {
        name: i.name.to_owned(),
        trace_id: text(i.trace_id),
        span_id: text(i.span_id),
        parent_span_id: text(i.parent_span_id),
        span_name: text(i.span_name),
        start_time: i.start_time.map(timestamp),
        end_time: i.end_time.map(timestamp),
        span_tags: values(i.span_tags),
        http_status_code: i.http_status_code.unwrap_or(0),
        client_span: i.client_span.unwrap_or(false),
        rewrite_client_span_id: i.rewrite_client_span_id.unwrap_or(false),
        source_name: text(i.source_name),
        source_ip: ip(i.source_ip),
        destination_name: text(i.destination_name),
        destination_ip: ip(i.destination_ip),
        request_size: i.request_size.unwrap_or(0),
        request_total_size: i.request_total_size.unwrap_or(0),
        response_size: i.response_size.unwrap_or(0),
        response_total_size: i.response_total_size.unwrap_or(0),
        api_protocol: text(i.api_protocol),
    }
}

/// Handler params (a JSON-like tree) as a `google.protobuf.Struct` packed in an `Any`.
/// Params that are not a map are wrapped as `{"value": params}`.
pub fn params_any(params: &serde_json::Value) -> Any {
    let fields = match params {
        serde_json::Value::Object(map) => map
            .iter()
            .map(|(k, v)| (k.clone(), json_value(v)))
            .collect(),
        serde_json::Value::Null => Default::default(),
        other => [("value".to_owned(), json_value(other))].into(),
    };
    Any {
        type_url: STRUCT_TYPE_URL.to_owned(),
        value: prost_types::Struct { fields }.encode_to_vec(),
    }
}

fn json_value(v: &serde_json::Value) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match v {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(a) => Kind::ListValue(prost_types::ListValue {
            values: a.iter().map(json_value).collect(),
        }),
        serde_json::Value::Object(m) => Kind::StructValue(prost_types::Struct {
            fields: m.iter().map(|(k, v)| (k.clone(), json_value(v))).collect(),
        }),
    };
    prost_types::Value { kind: Some(kind) }
}

/// The adapter config of a call made within a session: the session id.
pub fn session_any(session_id: &str) -> Any {
    Any {
        type_url: SESSION_TYPE_URL.to_owned(),
        value: session_id.as_bytes().to_vec(),
    }
}

fn type_map(fields: &[InferredField], field: &str) -> HashMap<String, i32> {
    fields
        .iter()
        .filter(|f| f.field == field)
        .filter_map(|f| {
            let key = f.key.as_ref()?;
            let t = f
                .value_type
                .map_or(policy::ValueType::Unspecified, value_type);
            Some((key.to_string(), t as i32))
        })
        .collect()
}

fn type_of(fields: &[InferredField], field: &str) -> i32 {
    fields
        .iter()
        .find(|f| f.field == field && f.key.is_none())
        .and_then(|f| f.value_type)
        .map_or(policy::ValueType::Unspecified, value_type) as i32
}

fn pack<M: Message>(package: &str, m: &M) -> Any {
    Any {
        type_url: format!("type.googleapis.com/{package}.Type"),
        value: m.encode_to_vec(),
    }
}

/// The `inferred_types` of Validate and CreateSession: each instance's template `Type`.
pub fn inferred_types(instances: &[RemoteInstance]) -> HashMap<String, Any> {
    instances
        .iter()
        .map(|i| {
            let f = &i.fields;
            let any = match i.template {
                Template::Authorization => pack(
                    "authorization",
                    &authorization::Type {
                        subject: Some(authorization::SubjectType {
                            properties: type_map(f, "subject.properties"),
                        }),
                        action: Some(authorization::ActionType {
                            properties: type_map(f, "action.properties"),
                        }),
                    },
                ),
                Template::CheckNothing => pack("checknothing", &mixer_proto::checknothing::Type {}),
                Template::ListEntry => pack("listentry", &listentry::Type {}),
                Template::Quota => pack(
                    "quota",
                    &quota::Type {
                        dimensions: type_map(f, "dimensions"),
                    },
                ),
                Template::Metric => pack(
                    "metric",
                    &metric::Type {
                        value: type_of(f, "value"),
                        dimensions: type_map(f, "dimensions"),
                        monitored_resource_dimensions: type_map(f, "monitored_resource_dimensions"),
                    },
                ),
                Template::LogEntry => pack(
                    "logentry",
                    &logentry::Type {
                        variables: type_map(f, "variables"),
                        monitored_resource_dimensions: type_map(f, "monitored_resource_dimensions"),
                    },
                ),
                // Their inputs have fixed types: an empty `Type` message, as Istio generated
                // for kubernetes (`adapter.template.kubernetes.Type` has no field).
                Template::Kubernetes => pack(
                    "adapter.template.kubernetes",
                    &mixer_proto::adapter::template::kubernetes::Type {},
                ),
                Template::Jwt => pack("jwt", &mixer_proto::jwt::Type {}),
                Template::ApiKey => pack("apikey", &mixer_proto::apikey::Type {}),
                Template::TraceSpan => pack(
                    "tracespan",
                    &tracespan::Type {
                        span_tags: type_map(f, "span_tags"),
                    },
                ),
                Template::ReportNothing => {
                    pack("reportnothing", &mixer_proto::reportnothing::Type {})
                }
            };
            (i.name.to_string(), any)
        })
        .collect()
}

/// A `google.rpc.Status` as the model's status (`None` = OK, as proto3 leaves it unset).
pub fn status(s: Option<&mixer_proto::google::rpc::Status>) -> Status {
    match s {
        None => Status::OK,
        Some(s) => Status::new(Code::from_i32(s.code), s.message.clone()),
    }
}

fn std_duration(d: Option<&prost_types::Duration>) -> Option<std::time::Duration> {
    let d = d?;
    let nanos = i128::from(d.seconds) * 1_000_000_000 + i128::from(d.nanos);
    u64::try_from(nanos.max(0))
        .ok()
        .map(std::time::Duration::from_nanos)
}

/// A `CheckResult` from the adapter. An unset duration means "do not reuse" (zero).
pub fn check_result(r: &model::CheckResult) -> CheckResult {
    CheckResult {
        status: status(r.status.as_ref()),
        valid_duration: std_duration(r.valid_duration.as_ref()).unwrap_or_default(),
        valid_use_count: r.valid_use_count.max(0),
    }
}

/// The entry for `name` of a `QuotaResult`; a missing entry grants nothing.
pub fn quota_result(r: &model::QuotaResult, name: &str) -> QuotaResult {
    match r.quotas.get(name) {
        Some(q) => QuotaResult {
            status: status(q.status.as_ref()),
            valid_duration: std_duration(q.valid_duration.as_ref()).unwrap_or_default(),
            granted_amount: q.granted_amount.max(0),
            limit: None,
        },
        None => QuotaResult {
            status: Status::OK,
            valid_duration: std::time::Duration::ZERO,
            granted_amount: 0,
            limit: None,
        },
    }
}
