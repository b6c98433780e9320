//! The plain Rust types an adapter sees: values, instances, results and errors. Nothing here
//! is generated code; `convert.rs` maps the wire messages onto these.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

pub use tonic::Code;

/// Named values of an instance field such as `dimensions` or `variables`, sorted by name.
pub type Values = BTreeMap<String, Value>;

/// A typed attribute value, as an instance field expression produced it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `STRING`.
    String(String),
    /// `INT64`.
    Int64(i64),
    /// `DOUBLE`.
    Double(f64),
    /// `BOOL`.
    Bool(bool),
    /// `IP_ADDRESS`.
    IpAddress(IpAddr),
    /// `TIMESTAMP`.
    Timestamp(SystemTime),
    /// `DURATION`.
    Duration(Duration),
    /// `DNS_NAME`.
    DnsName(String),
    /// `EMAIL_ADDRESS`.
    EmailAddress(String),
    /// `URI`.
    Uri(String),
    /// `STRING_MAP` (for example `request.headers`).
    StringMap(BTreeMap<String, String>),
}

impl Value {
    /// The text of a string-like value (string, DNS name, e-mail address, URI).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) | Value::DnsName(s) | Value::EmailAddress(s) | Value::Uri(s) => {
                Some(s)
            }
            _ => None,
        }
    }

    /// An integer value.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int64(i) => Some(*i),
            _ => None,
        }
    }

    /// A number: a double, or an integer widened to one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Double(x) => Some(*x),
            Value::Int64(i) => Some(*i as f64),
            _ => None,
        }
    }

    /// A boolean value.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The value as JSON: numbers and booleans as themselves, durations as seconds (a number),
    /// timestamps as seconds since the Unix epoch (a number), everything else as text.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::Int64(i) => J::from(*i),
            Value::Double(x) => J::from(*x),
            Value::Bool(b) => J::from(*b),
            Value::Duration(d) => J::from(d.as_secs_f64()),
            Value::Timestamp(t) => J::from(unix_seconds(*t)),
            Value::StringMap(m) => J::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), J::from(v.clone())))
                    .collect(),
            ),
            other => J::from(other.to_string()),
        }
    }
}

fn unix_seconds(t: SystemTime) -> f64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::String(s) | Value::DnsName(s) | Value::EmailAddress(s) | Value::Uri(s) => {
                f.write_str(s)
            }
            Value::Int64(i) => write!(f, "{i}"),
            Value::Double(x) => write!(f, "{x}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::IpAddress(ip) => write!(f, "{ip}"),
            Value::Timestamp(t) => write!(f, "{}", unix_seconds(*t)),
            Value::Duration(d) => write!(f, "{d:?}"),
            Value::StringMap(m) => {
                let pairs: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "{{{}}}", pairs.join(", "))
            }
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.to_string())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::String(s)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Value {
        Value::Int64(i)
    }
}

impl From<f64> for Value {
    fn from(x: f64) -> Value {
        Value::Double(x)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

/// A `checknothing` instance: no fields, only the instance's name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CheckNothingInstance {
    /// The instance's name in config (`NAME.NAMESPACE`).
    pub name: String,
}

/// A `listentry` instance: one string to look up in a list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListEntryInstance {
    /// The instance's name in config.
    pub name: String,
    /// The entry to look up.
    pub value: String,
}

/// Who is asking, in an `authorization` instance.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Subject {
    /// The user name or id.
    pub user: String,
    /// The groups the user belongs to.
    pub groups: String,
    /// More attributes of the subject.
    pub properties: Values,
}

/// What is being done, in an `authorization` instance.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Action {
    /// The namespace of the target.
    pub namespace: String,
    /// The service acted on.
    pub service: String,
    /// The method (HTTP verb or RPC name).
    pub method: String,
    /// The HTTP path.
    pub path: String,
    /// More attributes of the action.
    pub properties: Values,
}

/// An `authorization` instance: a subject and an action.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuthorizationInstance {
    /// The instance's name in config.
    pub name: String,
    /// Who.
    pub subject: Subject,
    /// What.
    pub action: Action,
}

/// A `quota` instance: the dimensions that identify one quota bucket.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuotaInstance {
    /// The instance's name in config.
    pub name: String,
    /// The dimensions of the bucket.
    pub dimensions: Values,
}

/// How much quota is asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaArgs {
    /// Units asked for.
    pub amount: i64,
    /// When true, granting less than `amount` is fine; when false, grant all or nothing.
    pub best_effort: bool,
}

/// A `metric` instance: one value with the dimensions that identify its series.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricInstance {
    /// The instance's name in config.
    pub name: String,
    /// The value reported (absent when the expression produced none).
    pub value: Option<Value>,
    /// The dimensions of the series.
    pub dimensions: Values,
    /// The monitored resource type, if configured.
    pub monitored_resource_type: String,
    /// The monitored resource's dimensions, if configured.
    pub monitored_resource_dimensions: Values,
}

/// A `logentry` instance: one log record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogEntryInstance {
    /// The instance's name in config.
    pub name: String,
    /// The record's variables.
    pub variables: Values,
    /// When it happened.
    pub timestamp: Option<SystemTime>,
    /// Its severity (`"Default"`, `"Error"`, ...).
    pub severity: String,
    /// The monitored resource type, if configured.
    pub monitored_resource_type: String,
    /// The monitored resource's dimensions, if configured.
    pub monitored_resource_dimensions: Values,
}

/// A `tracespan` instance: one span of a distributed trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceSpanInstance {
    /// The instance's name in config.
    pub name: String,
    /// The trace's id.
    pub trace_id: String,
    /// The span's id.
    pub span_id: String,
    /// The parent span's id (empty for a root span).
    pub parent_span_id: String,
    /// The span's name.
    pub span_name: String,
    /// When the span started.
    pub start_time: Option<SystemTime>,
    /// When it ended.
    pub end_time: Option<SystemTime>,
    /// Tags.
    pub span_tags: Values,
    /// The HTTP status code, 0 if none.
    pub http_status_code: i64,
    /// True for a client span.
    pub client_span: bool,
    /// True when the client span id should be rewritten.
    pub rewrite_client_span_id: bool,
    /// The source workload's name.
    pub source_name: String,
    /// The source's IP address.
    pub source_ip: Option<IpAddr>,
    /// The destination workload's name.
    pub destination_name: String,
    /// The destination's IP address.
    pub destination_ip: Option<IpAddr>,
    /// Request body size.
    pub request_size: i64,
    /// Request size including headers.
    pub request_total_size: i64,
    /// Response body size.
    pub response_size: i64,
    /// Response size including headers.
    pub response_total_size: i64,
    /// `http`, `grpc`...
    pub api_protocol: String,
}

/// A `reportnothing` instance: no fields, only the instance's name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReportNothingInstance {
    /// The instance's name in config.
    pub name: String,
}

/// A check's answer: a status (OK lets the request through, anything else denies it) and how
/// long and how many times the mixer may reuse the answer for the same attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckResult {
    /// `Code::Ok` allows; any other code denies, and the proxy sees it (403 for
    /// `PermissionDenied` through HTTP forward-auth, for example).
    pub code: Code,
    /// Why, for a denial.
    pub message: String,
    /// How long the answer may be cached.
    pub valid_duration: Duration,
    /// How many times the answer may be reused.
    pub valid_use_count: i32,
}

impl CheckResult {
    /// The default validity of an answer: 5 seconds.
    pub const DEFAULT_VALID_DURATION: Duration = Duration::from_secs(5);
    /// The default number of uses of an answer: 1000.
    pub const DEFAULT_VALID_USE_COUNT: i32 = 1000;

    /// Allows the request.
    pub fn ok() -> CheckResult {
        CheckResult::with_code(Code::Ok, "")
    }

    /// Denies the request with `PERMISSION_DENIED` and a message.
    pub fn deny(message: impl Into<String>) -> CheckResult {
        CheckResult::with_code(Code::PermissionDenied, message)
    }

    /// An answer with any status code.
    pub fn with_code(code: Code, message: impl Into<String>) -> CheckResult {
        CheckResult {
            code,
            message: message.into(),
            valid_duration: Self::DEFAULT_VALID_DURATION,
            valid_use_count: Self::DEFAULT_VALID_USE_COUNT,
        }
    }

    /// Sets how long the answer may be cached.
    pub fn valid_for(mut self, duration: Duration) -> CheckResult {
        self.valid_duration = duration;
        self
    }

    /// Sets how many times the answer may be reused.
    pub fn valid_uses(mut self, count: i32) -> CheckResult {
        self.valid_use_count = count;
        self
    }

    /// True when the answer allows the request.
    pub fn is_ok(&self) -> bool {
        self.code == Code::Ok
    }
}

/// How much quota was granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaResult {
    /// Units granted: 0 denies.
    pub granted: i64,
    /// How long the grant may be cached.
    pub valid_duration: Duration,
}

impl QuotaResult {
    /// Grants `amount` units, valid for `valid_duration`.
    pub fn granted(amount: i64, valid_duration: Duration) -> QuotaResult {
        QuotaResult {
            granted: amount,
            valid_duration,
        }
    }

    /// Grants nothing.
    pub fn denied() -> QuotaResult {
        QuotaResult {
            granted: 0,
            valid_duration: Duration::ZERO,
        }
    }
}

/// "Could not decide": the adapter failed, as opposed to answering with a denial. The mixer
/// applies the handler's `failPolicy` (open or closed) to it. `Unavailable` (the default for
/// I/O errors) says a retry may help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// The gRPC status code the mixer receives.
    pub code: Code,
    /// What went wrong.
    pub message: String,
}

impl Error {
    /// A transient failure (a backend is down); a retry may help.
    pub fn unavailable(message: impl Into<String>) -> Error {
        Error {
            code: Code::Unavailable,
            message: message.into(),
        }
    }

    /// A bug or an unexpected state.
    pub fn internal(message: impl Into<String>) -> Error {
        Error {
            code: Code::Internal,
            message: message.into(),
        }
    }

    /// The handler's params (or the instance) cannot be used.
    pub fn invalid(message: impl Into<String>) -> Error {
        Error {
            code: Code::InvalidArgument,
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::unavailable(e.to_string())
    }
}

impl From<String> for Error {
    fn from(message: String) -> Error {
        Error::internal(message)
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Error {
        Error::internal(message)
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> tonic::Status {
        tonic::Status::new(e.code, e.message)
    }
}
