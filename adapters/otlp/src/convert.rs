//! Instances to OpenTelemetry data: tracespan → [`SpanData`], logentry → [`SdkLogRecord`],
//! attribute values → OpenTelemetry values.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mixer_model::{LogEntryInstance, Timestamp, TraceSpanInstance, Value};
use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, Severity};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, Key, KeyValue, StringValue};
use opentelemetry_sdk::logs::{SdkLogRecord, SdkLogger};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

/// The span attribute carrying a tracespan's `http_status_code` (OpenTelemetry's HTTP
/// semantic conventions); a span tag of the same name wins.
pub const HTTP_STATUS_ATTRIBUTE: &str = "http.response.status_code";

/// Istio's pad for `rewrite_client_span_id`: the client span's id is the reported span id
/// XOR this pad, and the server span's parent becomes that id, as Istio's zipkin,
/// stackdriver and opencensus adapters did.
pub const REWRITE_PAD: [u8; 8] = [0x3f, 0x6a, 0x2e, 0xc3, 0xc8, 0x10, 0xc2, 0xab];

/// The instrumentation scope of an instance's telemetry: named after the instance
/// (`accesslog.instance.istio-system`), so a collector can tell instances apart.
pub fn scope(instance_name: &str) -> InstrumentationScope {
    InstrumentationScope::builder(instance_name.to_string())
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

/// A timestamp as a [`SystemTime`].
pub fn system_time(t: Timestamp) -> SystemTime {
    if t.0 >= 0 {
        UNIX_EPOCH + Duration::from_nanos(t.0 as u64)
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_nanos(t.0.unsigned_abs()))
            .unwrap_or(UNIX_EPOCH)
    }
}

fn ip_text(ip: &IpAddr) -> String {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => v6.to_string(),
        },
        IpAddr::V4(v4) => v4.to_string(),
    }
}

/// An attribute value as a span or metric attribute: strings, integers, doubles and booleans
/// keep their type; other types become their text (IP addresses as text, IPv4-mapped IPv6 as
/// IPv4; durations like `19ms`; timestamps RFC 3339; bytes in hex; string maps as `k=v` text).
pub fn attribute_value(v: &Value) -> opentelemetry::Value {
    match v {
        Value::String(s) | Value::EmailAddress(s) | Value::Uri(s) | Value::DnsName(s) => {
            opentelemetry::Value::String(StringValue::from(s.to_string()))
        }
        Value::Int64(i) => opentelemetry::Value::I64(*i),
        Value::Double(d) => opentelemetry::Value::F64(*d),
        Value::Bool(b) => opentelemetry::Value::Bool(*b),
        Value::IpAddress(ip) => opentelemetry::Value::String(ip_text(ip).into()),
        other => opentelemetry::Value::String(other.to_string().into()),
    }
}

/// An attribute value as a log attribute: as [`attribute_value`], except that bytes stay bytes
/// and string maps become maps.
pub fn any_value(v: &Value) -> AnyValue {
    match v {
        Value::String(s) | Value::EmailAddress(s) | Value::Uri(s) | Value::DnsName(s) => {
            AnyValue::String(s.to_string().into())
        }
        Value::Int64(i) => AnyValue::Int(*i),
        Value::Double(d) => AnyValue::Double(*d),
        Value::Bool(b) => AnyValue::Boolean(*b),
        Value::Bytes(b) => AnyValue::Bytes(Box::new(b.to_vec())),
        Value::IpAddress(ip) => AnyValue::String(ip_text(ip).into()),
        Value::StringMap(m) => AnyValue::Map(Box::new(
            m.iter()
                .map(|(k, v)| {
                    (
                        Key::from(k.to_string()),
                        AnyValue::String(v.to_string().into()),
                    )
                })
                .collect::<HashMap<_, _>>(),
        )),
        other => AnyValue::String(other.to_string().into()),
    }
}

/// Map entries as key-values.
pub fn attributes(entries: &[(std::sync::Arc<str>, Value)]) -> Vec<KeyValue> {
    entries
        .iter()
        .map(|(k, v)| KeyValue::new(k.to_string(), attribute_value(v)))
        .collect()
}

fn hex_id<const N: usize>(field: &str, text: &str) -> Result<[u8; N], String> {
    let digits = text.trim();
    let valid_len = if N == 16 {
        digits.len() == 32 || digits.len() == 16
    } else {
        digits.len() == 2 * N
    };
    if !valid_len || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        let wanted = if N == 16 { "32 (or 16)" } else { "16" };
        return Err(format!(
            "{field} {text:?} is not {wanted} hexadecimal digits"
        ));
    }
    // A 64-bit trace id (B3's short form) is the low half of a 128-bit one.
    let mut out = [0u8; N];
    let offset = N - digits.len() / 2;
    for (i, pair) in digits.as_bytes().chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).map_err(|e| e.to_string())?;
        out[offset + i] = u8::from_str_radix(s, 16).map_err(|e| e.to_string())?;
    }
    if out.iter().all(|b| *b == 0) {
        return Err(format!("{field} is all zeros, which is not a valid id"));
    }
    Ok(out)
}

fn time_field(value: Option<Timestamp>, field: &str) -> Result<SystemTime, String> {
    value
        .map(system_time)
        .ok_or_else(|| format!("{field} is missing"))
}

/// A tracespan instance as a span. Ids are hexadecimal: a 32-digit (or B3's 16-digit) trace
/// id, 16-digit span ids; an empty or absent parent id makes a root span.
pub fn span(
    instance: &TraceSpanInstance<'_>,
    scope: InstrumentationScope,
) -> Result<SpanData, String> {
    let trace_id = match instance.trace_id {
        Some(t) => TraceId::from_bytes(hex_id::<16>("trace_id", t)?),
        None => return Err("trace_id is missing".into()),
    };
    let mut span_id = match instance.span_id {
        Some(t) => hex_id::<8>("span_id", t)?,
        None => return Err("span_id is missing".into()),
    };
    let mut parent = match instance.parent_span_id.map(str::trim) {
        None | Some("") => None,
        Some(t) => Some(hex_id::<8>("parent_span_id", t)?),
    };
    let start_time = time_field(instance.start_time, "start_time")?;
    let end_time = time_field(instance.end_time, "end_time")?;
    if end_time < start_time {
        return Err("end_time is before start_time".into());
    }
    let client = instance.client_span.unwrap_or(false);
    let rewrite = instance.rewrite_client_span_id.unwrap_or(false);
    if rewrite {
        let mut rewritten = span_id;
        for (b, p) in rewritten.iter_mut().zip(REWRITE_PAD) {
            *b ^= p;
        }
        if client {
            span_id = rewritten;
        } else {
            parent = Some(rewritten);
        }
    }
    let span_kind = if client {
        SpanKind::Client
    } else {
        SpanKind::Server
    };
    let name = match instance.span_name {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => instance.name.to_string(),
    };

    let mut attributes = attributes(instance.span_tags.as_slice());
    let mut status = Status::Unset;
    if let Some(code) = instance.http_status_code
        && code > 0
    {
        if !attributes
            .iter()
            .any(|kv| kv.key.as_str() == HTTP_STATUS_ATTRIBUTE)
        {
            attributes.push(KeyValue::new(HTTP_STATUS_ATTRIBUTE, code));
        }
        // OpenTelemetry's HTTP conventions: 5xx is an error on both sides, 4xx only on the
        // client side (a server answering 404 did its job).
        if code >= 500 || (client && code >= 400) {
            status = Status::error("");
        }
    }

    Ok(SpanData {
        span_context: SpanContext::new(
            trace_id,
            SpanId::from_bytes(span_id),
            TraceFlags::SAMPLED,
            false,
            TraceState::NONE,
        ),
        parent_span_id: parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        // A server span's parent is the caller's span, in another process.
        parent_span_is_remote: parent.is_some() && !client,
        span_kind,
        name: Cow::Owned(name),
        start_time,
        end_time,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope,
    })
}

/// A severity string as an OpenTelemetry severity number, case-insensitively: syslog's and
/// Stackdriver's names (`Info`, `Warning`, `Error`, `Critical`...), the short forms (`warn`,
/// `err`, `crit`) and OpenTelemetry's own (`TRACE`..`FATAL4`). `None` for unknown strings and
/// for `DEFAULT` (no severity).
pub fn severity_number(severity: &str) -> Option<Severity> {
    let s = severity.trim().to_ascii_lowercase();
    Some(match s.as_str() {
        "trace" => Severity::Trace,
        "trace2" => Severity::Trace2,
        "trace3" => Severity::Trace3,
        "trace4" => Severity::Trace4,
        "debug" => Severity::Debug,
        "debug2" => Severity::Debug2,
        "debug3" => Severity::Debug3,
        "debug4" => Severity::Debug4,
        "info" | "information" | "informational" => Severity::Info,
        "info2" | "notice" => Severity::Info2,
        "info3" => Severity::Info3,
        "info4" => Severity::Info4,
        "warn" | "warning" => Severity::Warn,
        "warn2" => Severity::Warn2,
        "warn3" => Severity::Warn3,
        "warn4" => Severity::Warn4,
        "error" | "err" => Severity::Error,
        "error2" => Severity::Error2,
        "error3" => Severity::Error3,
        "error4" => Severity::Error4,
        "fatal" | "critical" | "crit" => Severity::Fatal,
        "fatal2" | "alert" => Severity::Fatal2,
        "fatal3" => Severity::Fatal3,
        "fatal4" | "emergency" | "emerg" | "panic" => Severity::Fatal4,
        _ => return None,
    })
}

/// Most distinct severity strings kept as they were written.
const MAX_SEVERITY_TEXTS: usize = 256;
/// Longest severity string kept as it was written.
const MAX_SEVERITY_TEXT_LEN: usize = 64;

/// The SDK takes severity text as `&'static str`. Severity strings come from config (a few
/// distinct values), so each distinct string is kept once for the life of the process, up to
/// [`MAX_SEVERITY_TEXTS`]; past that (or for very long strings) the canonical name of the
/// severity number is used, or no text for unknown severities.
pub fn severity_text(severity: &str) -> Option<&'static str> {
    static TEXTS: OnceLock<Mutex<std::collections::HashSet<&'static str>>> = OnceLock::new();
    let texts = TEXTS.get_or_init(Default::default);
    let mut texts = texts.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = texts.get(severity) {
        return Some(t);
    }
    if texts.len() < MAX_SEVERITY_TEXTS && severity.len() <= MAX_SEVERITY_TEXT_LEN {
        let t: &'static str = Box::leak(severity.to_string().into_boxed_str());
        texts.insert(t);
        return Some(t);
    }
    severity_number(severity).map(|s| s.name())
}

/// A logentry instance as a log record: `timestamp` (now when absent), the severity string
/// as text and number, the `variables` as attributes.
pub fn log_record(
    instance: &LogEntryInstance<'_>,
    logger: &SdkLogger,
) -> Result<SdkLogRecord, String> {
    let mut record = logger.create_log_record();
    let now = SystemTime::now();
    let timestamp = instance.timestamp.map_or(now, system_time);
    record.set_timestamp(timestamp);
    record.set_observed_timestamp(now);
    if let Some(severity) = instance.severity.filter(|s| !s.is_empty()) {
        if let Some(number) = severity_number(severity) {
            record.set_severity_number(number);
        }
        if let Some(text) = severity_text(severity) {
            record.set_severity_text(text);
        }
    }
    for (k, v) in instance.variables {
        record.add_attribute(Key::from(k.to_string()), any_value(v));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mixer_model::{FieldValue, Instance, Template};

    /// `span` of an instance these tests build.
    fn span_of(instance: &Instance, scope: InstrumentationScope) -> Result<SpanData, String> {
        span(
            &TraceSpanInstance::of(instance).expect("a tracespan"),
            scope,
        )
    }

    fn tracespan(fields: Vec<(&'static str, Value)>) -> Instance {
        Instance {
            name: "span.istio-system".into(),
            template: Template::TraceSpan,
            fields: fields
                .into_iter()
                .map(|(k, v)| (k, FieldValue::Value(v)))
                .collect(),
        }
    }

    fn base() -> Vec<(&'static str, Value)> {
        vec![
            ("trace_id", Value::from("463ac35c9f6413ad48485a3953bb6124")),
            ("span_id", Value::from("a2fb4a1d1a96d312")),
            ("start_time", Value::Timestamp(Timestamp(1_000))),
            ("end_time", Value::Timestamp(Timestamp(2_000))),
        ]
    }

    #[test]
    fn ids() {
        assert_eq!(
            hex_id::<16>("t", "00000000000000000000000000000001").unwrap()[15],
            1
        );
        assert_eq!(hex_id::<16>("t", "a2fb4a1d1a96d312").unwrap()[8], 0xa2);
        assert!(hex_id::<16>("t", "xyz").is_err());
        assert!(hex_id::<16>("t", "0000000000000000").is_err());
        assert!(hex_id::<8>("s", "a2fb4a1d1a96d3").is_err());
        assert!(hex_id::<8>("s", "+2fb4a1d1a96d312").is_err());
    }

    #[test]
    fn istio_rewrites_client_span_ids() {
        let mut f = base();
        f.push(("client_span", Value::Bool(true)));
        f.push(("rewrite_client_span_id", Value::Bool(true)));
        let s = span_of(&tracespan(f), scope("x")).unwrap();
        // Istio's own test vector.
        assert_eq!(
            s.span_context.span_id(),
            SpanId::from_bytes([0x9d, 0x91, 0x64, 0xde, 0xd2, 0x86, 0x11, 0xb9])
        );
        assert_eq!(s.span_kind, SpanKind::Client);
        let mut f = base();
        f.push(("rewrite_client_span_id", Value::Bool(true)));
        let s = span_of(&tracespan(f), scope("x")).unwrap();
        assert_eq!(
            s.parent_span_id,
            SpanId::from_bytes([0x9d, 0x91, 0x64, 0xde, 0xd2, 0x86, 0x11, 0xb9])
        );
        assert_eq!(s.span_kind, SpanKind::Server);
        assert!(s.parent_span_is_remote);
    }

    #[test]
    fn bad_spans() {
        let mut f = base();
        f[0].1 = Value::from("nothex");
        assert!(
            span_of(&tracespan(f), scope("x"))
                .unwrap_err()
                .contains("trace_id")
        );
        let mut f = base();
        f.remove(3);
        assert!(
            span_of(&tracespan(f), scope("x"))
                .unwrap_err()
                .contains("end_time")
        );
        let mut f = base();
        f[2].1 = Value::Timestamp(Timestamp(5_000));
        assert!(
            span_of(&tracespan(f), scope("x"))
                .unwrap_err()
                .contains("before")
        );
    }

    #[test]
    fn http_status() {
        let mut f = base();
        f.push(("http_status_code", Value::Int64(404)));
        let s = span_of(&tracespan(f.clone()), scope("x")).unwrap();
        assert_eq!(s.status, Status::Unset);
        assert!(
            s.attributes
                .contains(&KeyValue::new(HTTP_STATUS_ATTRIBUTE, 404))
        );
        f.push(("client_span", Value::Bool(true)));
        let s = span_of(&tracespan(f), scope("x")).unwrap();
        assert_eq!(s.status, Status::error(""));
    }

    #[test]
    fn severities() {
        assert_eq!(severity_number("Info"), Some(Severity::Info));
        assert_eq!(severity_number(" WARNING "), Some(Severity::Warn));
        assert_eq!(severity_number("Critical"), Some(Severity::Fatal));
        assert_eq!(severity_number("Default"), None);
        assert_eq!(severity_text("Warning"), Some("Warning"));
        let long = "x".repeat(100);
        assert_eq!(severity_text(&long), None);
        assert_eq!(severity_text(&"error".repeat(20)), None);
    }

    #[test]
    fn values() {
        let ip: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(
            attribute_value(&Value::IpAddress(ip)),
            opentelemetry::Value::from("10.0.0.1")
        );
        assert_eq!(
            attribute_value(&Value::Duration(mixer_model::Duration(19_000_000))),
            opentelemetry::Value::from("19ms")
        );
        assert_eq!(
            any_value(&Value::Bytes(vec![1u8, 2].into())),
            AnyValue::Bytes(Box::new(vec![1, 2]))
        );
        assert_eq!(
            system_time(Timestamp(-1_000_000_000)),
            UNIX_EPOCH - Duration::from_secs(1)
        );
    }
}
