//! OTLP log records and spans -> attribute bags. The tables in the module doc are the
//! contract; keep them in step with [`MAPPED`].

use std::collections::BTreeMap;
use std::fmt::Write as _;

use mixer_model::{AttributeBag, BagError, Duration, StringMap, Timestamp, Value};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;

/// Values nested deeper than this are cut off when rendered as text.
const MAX_DEPTH: usize = 8;

/// Semantic-convention keys and the standard attribute each becomes. When several keys map to
/// one attribute, the first present wins (current names before their deprecated forms).
pub const MAPPED: &[(&str, &str)] = &[
    ("http.request.method", "request.method"),
    ("http.method", "request.method"),
    ("url.scheme", "request.scheme"),
    ("http.scheme", "request.scheme"),
    ("server.address", "request.host"),
    ("http.host", "request.host"),
    ("server.port", "destination.port"),
    ("client.address", "source.ip"),
    ("http.client_ip", "source.ip"),
    ("client.port", "source.port"),
    ("http.response.status_code", "response.code"),
    ("http.status_code", "response.code"),
    ("user_agent.original", "request.useragent"),
    ("http.user_agent", "request.useragent"),
    ("http.request.body.size", "request.size"),
    ("http.request_content_length", "request.size"),
    ("http.request.size", "request.total_size"),
    ("http.response.body.size", "response.size"),
    ("http.response_content_length", "response.size"),
    ("http.response.size", "response.total_size"),
    ("rpc.grpc.status_code", "response.grpc_status"),
    ("rpc.service", "api.service"),
    ("rpc.method", "api.operation"),
    ("destination.address", "destination.ip"),
    ("destination.port", "destination.port"),
];

/// Where a record came from: its resource and instrumentation scope, prepared once for all
/// the records under them.
#[derive(Debug, Default)]
pub struct Origin<'a> {
    resource: Vec<&'a KeyValue>,
    scope: Option<&'a InstrumentationScope>,
    resource_map: Option<Value>,
}

impl<'a> Origin<'a> {
    /// The origin of the records under `resource` and `scope`.
    pub fn new(resource: Option<&'a Resource>, scope: Option<&'a InstrumentationScope>) -> Self {
        let resource: Vec<&KeyValue> = resource
            .map(|r| r.attributes.iter().collect())
            .unwrap_or_default();
        let resource_map = (!resource.is_empty()).then(|| {
            let map: BTreeMap<&str, &AnyValue> = resource
                .iter()
                .filter_map(|kv| kv.value.as_ref().map(|v| (kv.key.as_str(), v)))
                .collect();
            Value::from(text_map(&map))
        });
        Origin {
            resource,
            scope,
            resource_map,
        }
    }

    /// The instrumentation scope, if the records have one.
    pub(super) fn scope(&self) -> Option<&'a InstrumentationScope> {
        self.scope
    }

    /// Resource, then scope, then the record's own attributes: a later one wins on a key.
    fn merged<'b>(&'b self, own: &'b [KeyValue]) -> BTreeMap<&'b str, &'b AnyValue> {
        let scope = self.scope.map(|s| s.attributes.as_slice()).unwrap_or(&[]);
        self.resource
            .iter()
            .copied()
            .chain(scope)
            .chain(own)
            .filter_map(|kv| {
                let value = kv.value.as_ref()?;
                // A value of the profiles' string table cannot be read without the table.
                (!matches!(value.value, None | Some(Any::StringValueStrindex(_))))
                    .then_some((kv.key.as_str(), value))
            })
            .collect()
    }

    pub(super) fn common(&self, set: &mut impl FnMut(&str, Value), own: &[KeyValue]) {
        let merged = self.merged(own);
        if let Some(resource) = &self.resource_map {
            set("otel.resource", resource.clone());
        }
        if let Some(scope) = self.scope {
            if !scope.name.is_empty() {
                set("otel.scope.name", Value::from(scope.name.as_str()));
            }
            if !scope.version.is_empty() {
                set("otel.scope.version", Value::from(scope.version.as_str()));
            }
        }
        if !merged.is_empty() {
            set("otel.attributes", text_map(&merged).into());
        }
        semantic_attributes(set, &merged);
    }
}

/// Fills `bag` from one log record. `now` is the mixer's clock, used for `context.time` when
/// the record carries no time at all.
pub fn fill_log(bag: &mut AttributeBag, origin: &Origin<'_>, record: &LogRecord, now: Timestamp) {
    let mut set = setter(bag);
    origin.common(&mut set, &record.attributes);
    let time = nanos(record.time_unix_nano).or_else(|| nanos(record.observed_time_unix_nano));
    if let Some(time) = time {
        set("request.time", Value::Timestamp(time));
    }
    set("context.time", Value::Timestamp(time.unwrap_or(now)));
    let severity = if record.severity_text.is_empty() {
        severity_name(record.severity_number).map(str::to_string)
    } else {
        Some(record.severity_text.clone())
    };
    if let Some(severity) = severity {
        set("otel.severity", Value::from(severity));
    }
    if record.severity_number != 0 {
        set(
            "otel.severity_number",
            Value::Int64(i64::from(record.severity_number)),
        );
    }
    if let Some(body) = record.body.as_ref().and_then(|b| b.value.as_ref()) {
        set("otel.body", Value::from(plain_text(body)));
    }
    if !record.event_name.is_empty() {
        set("otel.event_name", Value::from(record.event_name.as_str()));
    }
    ids(&mut set, &record.trace_id, &record.span_id, &[]);
}

/// Fills `bag` from one span. `now` is the mixer's clock, for `context.time` when the span has
/// no end or start time.
pub fn fill_span(bag: &mut AttributeBag, origin: &Origin<'_>, span: &Span, now: Timestamp) {
    let mut set = setter(bag);
    origin.common(&mut set, &span.attributes);
    ids(
        &mut set,
        &span.trace_id,
        &span.span_id,
        &span.parent_span_id,
    );
    if !span.name.is_empty() {
        set("otel.span_name", Value::from(span.name.as_str()));
    }
    let kind = SpanKind::try_from(span.kind).unwrap_or(SpanKind::Unspecified);
    set("otel.span_kind", Value::from(span_kind_name(kind)));
    // A server span is what the callee saw (Istio's inbound report); a client span is the
    // caller's (outbound).
    match kind {
        SpanKind::Server | SpanKind::Consumer => {
            set("context.reporter.kind", Value::from("inbound"));
        }
        SpanKind::Client | SpanKind::Producer => {
            set("context.reporter.kind", Value::from("outbound"));
        }
        SpanKind::Internal | SpanKind::Unspecified => {}
    }
    if let Some(status) = span.status.as_ref() {
        let code = StatusCode::try_from(status.code).unwrap_or(StatusCode::Unset);
        set(
            "otel.status_code",
            Value::from(match code {
                StatusCode::Unset => "unset",
                StatusCode::Ok => "ok",
                StatusCode::Error => "error",
            }),
        );
        if !status.message.is_empty() {
            set("otel.status_message", Value::from(status.message.as_str()));
        }
    }
    let start = nanos(span.start_time_unix_nano);
    let end = nanos(span.end_time_unix_nano);
    if let Some(start) = start {
        set("request.time", Value::Timestamp(start));
    }
    if let Some(end) = end {
        set("response.time", Value::Timestamp(end));
    }
    if let (Some(start), Some(end)) = (start, end) {
        set(
            "response.duration",
            Value::Duration(Duration(end.0.saturating_sub(start.0))),
        );
    }
    set(
        "context.time",
        Value::Timestamp(end.or(start).unwrap_or(now)),
    );
}

/// Sets a value, converted to the declared type where it can be (`"10.0.0.1"` to an IP
/// address, an integer to text for a STRING attribute). One that does not fit is left out:
/// telemetry is not refused for one odd attribute.
pub(super) fn setter(bag: &mut AttributeBag) -> impl FnMut(&str, Value) + '_ {
    |name: &str, value: Value| {
        if let Err(BagError::WrongType { .. }) = bag.set(name, value.clone())
            && value.as_str().is_none()
        {
            let _ = bag.set(name, Value::from(value.to_string()));
        }
    }
}

/// The well-known keys: [`MAPPED`], plus the path, query, headers and protocol, which take
/// more than one key or some parsing.
fn semantic_attributes(set: &mut impl FnMut(&str, Value), merged: &BTreeMap<&str, &AnyValue>) {
    let mut done: Vec<&str> = Vec::new();
    for (key, attribute) in MAPPED {
        if done.contains(attribute) {
            continue;
        }
        if let Some(value) = merged.get(key).and_then(|v| v.value.as_ref()) {
            set(attribute, typed(value));
            done.push(attribute);
        }
    }
    if let Some(host) = merged.get("server.address").and_then(|v| v.value.as_ref()) {
        set("destination.service.host", Value::from(plain_text(host)));
    }

    let text = |key: &str| {
        merged
            .get(key)
            .and_then(|v| v.value.as_ref())
            .map(plain_text)
    };
    // `url.path` + `url.query`; the older `http.target` holds both.
    let path = match (text("url.path"), text("url.query")) {
        (Some(path), Some(query)) if !query.is_empty() => Some(format!("{path}?{query}")),
        (Some(path), _) => Some(path),
        (None, _) => text("http.target"),
    };
    if let Some(path) = path {
        set("request.path", Value::from(path.as_str()));
        let (url_path, query) = path.split_once('?').unwrap_or((&path, ""));
        set("request.url_path", Value::from(url_path));
        if !query.is_empty() {
            let params = query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| p.split_once('=').unwrap_or((p, "")));
            set("request.query_params", StringMap::from_pairs(params).into());
        }
    }

    // `http.request.header.<name>` (a list of values) -> request.headers[<name>].
    for (prefix, attribute) in [
        ("http.request.header.", "request.headers"),
        ("http.response.header.", "response.headers"),
    ] {
        let headers: Vec<(String, String)> = merged
            .range(prefix..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter_map(|(k, v)| {
                let name = k[prefix.len()..].to_ascii_lowercase();
                let value = v.value.as_ref()?;
                let value = match value {
                    Any::ArrayValue(list) => list
                        .values
                        .iter()
                        .filter_map(|v| v.value.as_ref())
                        .map(plain_text)
                        .collect::<Vec<_>>()
                        .join(","),
                    other => plain_text(other),
                };
                (!name.is_empty()).then_some((name, value))
            })
            .collect();
        if !headers.is_empty() {
            set(attribute, StringMap::from_pairs(headers).into());
        }
    }

    let rpc_system = text("rpc.system");
    let protocol = if rpc_system.as_deref() == Some("grpc") {
        Some("grpc")
    } else if merged.contains_key("http.request.method") || merged.contains_key("http.method") {
        Some("http")
    } else {
        None
    };
    if let Some(protocol) = protocol {
        set("context.protocol", Value::from(protocol));
    }
}

/// A scalar keeps its type (the bag converts it to the declared one); lists, maps and bytes
/// become text.
fn typed(value: &Any) -> Value {
    match value {
        Any::StringValue(s) => Value::from(s.as_str()),
        Any::BoolValue(b) => Value::Bool(*b),
        Any::IntValue(i) => Value::Int64(*i),
        Any::DoubleValue(d) => Value::Double(*d),
        other => Value::from(plain_text(other)),
    }
}

/// Every key with its value as text.
pub(super) fn text_map(map: &BTreeMap<&str, &AnyValue>) -> StringMap {
    StringMap::from_pairs(
        map.iter()
            .filter_map(|(k, v)| v.value.as_ref().map(|v| (*k, plain_text(v)))),
    )
}

/// A value as text: strings as they are, numbers and booleans printed, bytes as lower-case
/// hex, lists and maps as compact JSON.
pub fn plain_text(value: &Any) -> String {
    match value {
        Any::StringValue(s) => s.clone(),
        other => {
            let mut out = String::new();
            json(other, 0, &mut out);
            out
        }
    }
}

fn json(value: &Any, depth: usize, out: &mut String) {
    match value {
        Any::StringValue(s) => json_string(s, out),
        Any::BoolValue(b) => out.push_str(if *b { "true" } else { "false" }),
        Any::IntValue(i) => {
            let _ = write!(out, "{i}");
        }
        Any::DoubleValue(d) => {
            if d.is_finite() {
                let _ = write!(out, "{d}");
            } else {
                json_string(&d.to_string(), out);
            }
        }
        Any::BytesValue(bytes) => {
            if depth > 0 {
                out.push('"');
            }
            for b in bytes {
                let _ = write!(out, "{b:02x}");
            }
            if depth > 0 {
                out.push('"');
            }
        }
        Any::ArrayValue(list) => {
            out.push('[');
            if depth < MAX_DEPTH {
                for (i, v) in list.values.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    match v.value.as_ref() {
                        Some(v) => json(v, depth + 1, out),
                        None => out.push_str("null"),
                    }
                }
            }
            out.push(']');
        }
        Any::KvlistValue(kvs) => {
            out.push('{');
            if depth < MAX_DEPTH {
                for (i, kv) in kvs.values.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    json_string(&kv.key, out);
                    out.push(':');
                    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                        Some(v) => json(v, depth + 1, out),
                        None => out.push_str("null"),
                    }
                }
            }
            out.push('}');
        }
        Any::StringValueStrindex(_) => out.push_str("null"),
    }
}

fn json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Trace, span and parent span ids as lower-case hex; empty (or all-zero, "no id") ids are
/// left out.
fn ids(set: &mut impl FnMut(&str, Value), trace: &[u8], span: &[u8], parent: &[u8]) {
    for (name, id) in [
        ("otel.trace_id", trace),
        ("otel.span_id", span),
        ("otel.parent_span_id", parent),
    ] {
        if id.iter().any(|b| *b != 0) {
            set(name, Value::from(hex(id)));
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

pub(super) fn nanos(n: u64) -> Option<Timestamp> {
    (n != 0).then(|| Timestamp(i64::try_from(n).unwrap_or(i64::MAX)))
}

/// OTel's short severity names: `INFO`, `INFO2` ... for numbers 1 to 24.
fn severity_name(number: i32) -> Option<&'static str> {
    const NAMES: [&str; 24] = [
        "TRACE", "TRACE2", "TRACE3", "TRACE4", "DEBUG", "DEBUG2", "DEBUG3", "DEBUG4", "INFO",
        "INFO2", "INFO3", "INFO4", "WARN", "WARN2", "WARN3", "WARN4", "ERROR", "ERROR2", "ERROR3",
        "ERROR4", "FATAL", "FATAL2", "FATAL3", "FATAL4",
    ];
    usize::try_from(number)
        .ok()
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| NAMES.get(i).copied())
}

fn span_kind_name(kind: SpanKind) -> &'static str {
    match kind {
        SpanKind::Unspecified => "unspecified",
        SpanKind::Internal => "internal",
        SpanKind::Server => "server",
        SpanKind::Client => "client",
        SpanKind::Producer => "producer",
        SpanKind::Consumer => "consumer",
    }
}

#[cfg(test)]
mod tests;
