//! Instances read as their templates: one struct per template, shaped like the host's
//! (`mixer_model::instance`), its fields typed as the template declares them and borrowed
//! from the instance, so reading one costs no allocation. A field the instance does not set
//! is `None` (or empty entries).
//!
//! The check templates (authorization, checknothing, listentry) and quota arrive as an
//! [`Instance`] record, whose values are [`Value`]s and whose maps are [`Entries`]; the report
//! templates (metric, logentry, tracespan, reportnothing) arrive in a [`Batch`](crate::Batch),
//! read in place, whose values are [`ValueRef`]s and whose maps are [`BatchEntries`].
//!
//! ```ignore
//! fn check(config: &Config, instance: &Instance) -> Result<CheckResult, String> {
//!     let auth = AuthorizationInstance::of(instance).ok_or("not an authorization")?;
//!     let user = auth.subject.user.unwrap_or("anonymous");
//!     // ...
//! }
//! fn report(config: &Config, batch: &Batch) -> Result<(), String> {
//!     for metric in batch.iter().filter_map(MetricInstance::of) {
//!         let code = metric.dimensions.get("response_code");
//!         // ...
//!     }
//!     Ok(())
//! }
//! ```

use std::net::IpAddr;

use mixer_wasm_batch::{FieldRef, InstanceRef, MapRef, ValueRef};

use crate::bindings::{FieldValue, Instance, Template, Value};

/// The named values of a map field of a check or quota instance (`subject.properties`,
/// `action.properties`, `dimensions`), in config order.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Entries<'a>(&'a [(String, Value)]);

impl<'a> Entries<'a> {
    /// The value named `key`.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Names and values, in config order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&'a str, &'a Value)> + use<'a> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The named values of a map field of a report instance (`dimensions`, `variables`,
/// `span_tags`), read in place from the batch, in config order.
#[derive(Clone, Copy, Default)]
pub struct BatchEntries<'a>(Option<MapRef<'a>>);

impl<'a> BatchEntries<'a> {
    /// The value named `key`.
    pub fn get(&self, key: &str) -> Option<ValueRef<'a>> {
        self.0?.get(key)
    }

    /// Names and values, in config order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, ValueRef<'a>)> {
        self.0.iter().flat_map(|map| map.iter())
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
}

impl std::fmt::Debug for BatchEntries<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Value {
    /// The text of a string-like value (string, e-mail address, URI, DNS name).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) | Value::EmailAddress(s) | Value::Uri(s) | Value::DnsName(s) => {
                Some(s)
            }
            _ => None,
        }
    }
}

fn single(v: &FieldValue) -> Option<&Value> {
    match v {
        FieldValue::Single(v) => Some(v),
        FieldValue::Map(_) => None,
    }
}

fn text(v: &FieldValue) -> Option<&str> {
    single(v).and_then(Value::as_str)
}

fn entries(v: &FieldValue) -> Entries<'_> {
    match v {
        FieldValue::Map(m) => Entries(m),
        FieldValue::Single(_) => Entries::default(),
    }
}

/// The fields of `instance` when it is of `template`, one by one.
fn fields(
    instance: &Instance,
    template: Template,
) -> Option<impl Iterator<Item = (&str, &FieldValue)>> {
    (instance.template == template)
        .then(|| instance.fields.iter().map(|f| (f.name.as_str(), &f.value)))
}

/// Who asks, in an `authorization` instance.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Subject<'a> {
    /// `subject.user`: the user name or id.
    pub user: Option<&'a str>,
    /// `subject.groups`: the groups the user belongs to.
    pub groups: Option<&'a str>,
    /// `subject.properties`: more attributes of the subject.
    pub properties: Entries<'a>,
}

/// What is done, in an `authorization` instance.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Action<'a> {
    /// `action.namespace`: the namespace of the target.
    pub namespace: Option<&'a str>,
    /// `action.service`: the service acted on.
    pub service: Option<&'a str>,
    /// `action.method`: the HTTP verb or RPC name.
    pub method: Option<&'a str>,
    /// `action.path`: the HTTP path.
    pub path: Option<&'a str>,
    /// `action.properties`: more attributes of the action.
    pub properties: Entries<'a>,
}

/// An `authorization` instance: a subject and an action.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AuthorizationInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// Who.
    pub subject: Subject<'a>,
    /// What.
    pub action: Action<'a>,
}

impl<'a> AuthorizationInstance<'a> {
    /// The instance read as this template, or `None` when it is of another.
    pub fn of(instance: &'a Instance) -> Option<AuthorizationInstance<'a>> {
        let mut out = AuthorizationInstance {
            name: &instance.name,
            subject: Subject::default(),
            action: Action::default(),
        };
        for (name, v) in fields(instance, Template::Authorization)? {
            match name {
                "subject.user" => out.subject.user = text(v),
                "subject.groups" => out.subject.groups = text(v),
                "subject.properties" => out.subject.properties = entries(v),
                "action.namespace" => out.action.namespace = text(v),
                "action.service" => out.action.service = text(v),
                "action.method" => out.action.method = text(v),
                "action.path" => out.action.path = text(v),
                "action.properties" => out.action.properties = entries(v),
                _ => {}
            }
        }
        Some(out)
    }
}

/// A `checknothing` instance: only its name.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CheckNothingInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
}

impl<'a> CheckNothingInstance<'a> {
    /// The instance read as this template, or `None` when it is of another.
    pub fn of(instance: &'a Instance) -> Option<CheckNothingInstance<'a>> {
        (instance.template == Template::Checknothing).then_some(CheckNothingInstance {
            name: &instance.name,
        })
    }
}

/// A `listentry` instance: one value to look up in a list.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ListEntryInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// `value`: the entry to look up, of any type.
    pub value: Option<&'a Value>,
}

impl<'a> ListEntryInstance<'a> {
    /// The instance read as this template, or `None` when it is of another.
    pub fn of(instance: &'a Instance) -> Option<ListEntryInstance<'a>> {
        let mut fields = fields(instance, Template::Listentry)?;
        Some(ListEntryInstance {
            name: &instance.name,
            value: fields
                .find(|(n, _)| *n == "value")
                .and_then(|(_, v)| single(v)),
        })
    }
}

/// A `quota` instance: the dimensions that name one counter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuotaInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// `dimensions`.
    pub dimensions: Entries<'a>,
}

impl<'a> QuotaInstance<'a> {
    /// The instance read as this template, or `None` when it is of another.
    pub fn of(instance: &'a Instance) -> Option<QuotaInstance<'a>> {
        let mut fields = fields(instance, Template::Quota)?;
        Some(QuotaInstance {
            name: &instance.name,
            dimensions: fields
                .find(|(n, _)| *n == "dimensions")
                .map(|(_, v)| entries(v))
                .unwrap_or_default(),
        })
    }
}

/// A field's value read from `instance`, by name.
fn field<'a>(instance: &'a Instance, name: &str) -> Option<&'a FieldValue> {
    instance
        .fields
        .iter()
        .find(|f| f.name == name)
        .map(|f| &f.value)
}

fn ip(v: &Value) -> Option<IpAddr> {
    match v {
        Value::IpAddress(b) => match b.len() {
            4 => <[u8; 4]>::try_from(b.as_slice()).ok().map(IpAddr::from),
            16 => <[u8; 16]>::try_from(b.as_slice()).ok().map(IpAddr::from),
            _ => None,
        },
        _ => None,
    }
}

/// A `kubernetes` instance: what names the pods at both ends of a request (Istio 1.4's
/// kubernetesenv inputs), answered by [`Plugin::generate`](crate::Plugin::generate).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KubernetesInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// `source_uid`: `kubernetes://<pod>.<namespace>`.
    pub source_uid: Option<&'a str>,
    /// `source_ip`.
    pub source_ip: Option<IpAddr>,
    /// `destination_uid`.
    pub destination_uid: Option<&'a str>,
    /// `destination_ip`.
    pub destination_ip: Option<IpAddr>,
    /// `destination_port`.
    pub destination_port: Option<i64>,
}

impl<'a> KubernetesInstance<'a> {
    /// The instance read as this template, or `None` when it is of another.
    pub fn of(instance: &'a Instance) -> Option<KubernetesInstance<'a>> {
        (instance.template == Template::Kubernetes).then(|| {
            let f = |name| field(instance, name);
            KubernetesInstance {
                name: &instance.name,
                source_uid: f("source_uid").and_then(text),
                source_ip: f("source_ip").and_then(single).and_then(ip),
                destination_uid: f("destination_uid").and_then(text),
                destination_ip: f("destination_ip").and_then(single).and_then(ip),
                destination_port: f("destination_port")
                    .and_then(single)
                    .and_then(|v| match v {
                        Value::Int64(n) => Some(*n),
                        _ => None,
                    }),
            }
        })
    }
}

/// A `jwt` instance: the credential as the request carries it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JwtInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// `token`: the token, or a header value holding it after a `Bearer ` scheme.
    pub token: Option<&'a str>,
    /// `cookie`: a `Cookie` header to find a named cookie in.
    pub cookie: Option<&'a str>,
}

impl<'a> JwtInstance<'a> {
    /// The instance read as this template, or `None` when it is of another.
    pub fn of(instance: &'a Instance) -> Option<JwtInstance<'a>> {
        (instance.template == Template::Jwt).then(|| JwtInstance {
            name: &instance.name,
            token: field(instance, "token").and_then(text),
            cookie: field(instance, "cookie").and_then(text),
        })
    }
}

/// An `apikey` instance: the key as the request carries it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ApiKeyInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// `key`.
    pub key: Option<&'a str>,
}

impl<'a> ApiKeyInstance<'a> {
    /// The instance read as this template, or `None` when it is of another.
    pub fn of(instance: &'a Instance) -> Option<ApiKeyInstance<'a>> {
        (instance.template == Template::Apikey).then(|| ApiKeyInstance {
            name: &instance.name,
            key: field(instance, "key").and_then(text),
        })
    }
}

/// The fields of a report `instance` when it is of `template`, one by one.
fn report_fields<'a>(
    instance: &InstanceRef<'a>,
    template: Template,
) -> Option<impl Iterator<Item = (&'a str, FieldRef<'a>)>> {
    (Template::of(instance) == Some(template)).then(|| instance.fields())
}

fn value_ref(v: FieldRef<'_>) -> Option<ValueRef<'_>> {
    match v {
        FieldRef::Single(v) => Some(v),
        FieldRef::Map(_) => None,
    }
}

fn text_ref(v: FieldRef<'_>) -> Option<&str> {
    value_ref(v).and_then(|v| v.as_str())
}

fn int_ref(v: FieldRef<'_>) -> Option<i64> {
    match value_ref(v) {
        Some(ValueRef::Int64(n)) => Some(n),
        _ => None,
    }
}

fn bool_ref(v: FieldRef<'_>) -> Option<bool> {
    match value_ref(v) {
        Some(ValueRef::Boolean(b)) => Some(b),
        _ => None,
    }
}

fn timestamp_ref(v: FieldRef<'_>) -> Option<i64> {
    match value_ref(v) {
        Some(ValueRef::Timestamp(t)) => Some(t),
        _ => None,
    }
}

fn ip_ref(v: FieldRef<'_>) -> Option<IpAddr> {
    match value_ref(v) {
        Some(ValueRef::IpAddress(b)) => match b.len() {
            4 => <[u8; 4]>::try_from(b).ok().map(IpAddr::from),
            16 => <[u8; 16]>::try_from(b).ok().map(IpAddr::from),
            _ => None,
        },
        _ => None,
    }
}

fn entries_ref(v: FieldRef<'_>) -> BatchEntries<'_> {
    match v {
        FieldRef::Map(m) => BatchEntries(Some(m)),
        FieldRef::Single(_) => BatchEntries::default(),
    }
}

/// A `metric` instance: a value with the dimensions that name its series.
#[derive(Clone, Copy, Debug)]
pub struct MetricInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// `value`, of any type.
    pub value: Option<ValueRef<'a>>,
    /// `dimensions`.
    pub dimensions: BatchEntries<'a>,
    /// `monitored_resource_type`.
    pub monitored_resource_type: Option<&'a str>,
    /// `monitored_resource_dimensions`.
    pub monitored_resource_dimensions: BatchEntries<'a>,
}

impl<'a> MetricInstance<'a> {
    /// The instance read as this template, or `None` when it is of another.
    pub fn of(instance: InstanceRef<'a>) -> Option<MetricInstance<'a>> {
        let mut out = MetricInstance {
            name: instance.name(),
            value: None,
            dimensions: BatchEntries::default(),
            monitored_resource_type: None,
            monitored_resource_dimensions: BatchEntries::default(),
        };
        for (name, v) in report_fields(&instance, Template::Metric)? {
            match name {
                "value" => out.value = value_ref(v),
                "dimensions" => out.dimensions = entries_ref(v),
                "monitored_resource_type" => out.monitored_resource_type = text_ref(v),
                "monitored_resource_dimensions" => {
                    out.monitored_resource_dimensions = entries_ref(v);
                }
                _ => {}
            }
        }
        Some(out)
    }
}

/// A `logentry` instance: one log record.
#[derive(Clone, Copy, Debug)]
pub struct LogEntryInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// `variables`: the record's fields.
    pub variables: BatchEntries<'a>,
    /// `timestamp`: when it happened, nanoseconds since the Unix epoch.
    pub timestamp: Option<i64>,
    /// `severity` (`"Default"`, `"Error"`, ...).
    pub severity: Option<&'a str>,
    /// `monitored_resource_type`.
    pub monitored_resource_type: Option<&'a str>,
    /// `monitored_resource_dimensions`.
    pub monitored_resource_dimensions: BatchEntries<'a>,
}

impl<'a> LogEntryInstance<'a> {
    /// The instance read as this template, or `None` when it is of another.
    pub fn of(instance: InstanceRef<'a>) -> Option<LogEntryInstance<'a>> {
        let mut out = LogEntryInstance {
            name: instance.name(),
            variables: BatchEntries::default(),
            timestamp: None,
            severity: None,
            monitored_resource_type: None,
            monitored_resource_dimensions: BatchEntries::default(),
        };
        for (name, v) in report_fields(&instance, Template::Logentry)? {
            match name {
                "variables" => out.variables = entries_ref(v),
                "timestamp" => out.timestamp = timestamp_ref(v),
                "severity" => out.severity = text_ref(v),
                "monitored_resource_type" => out.monitored_resource_type = text_ref(v),
                "monitored_resource_dimensions" => {
                    out.monitored_resource_dimensions = entries_ref(v);
                }
                _ => {}
            }
        }
        Some(out)
    }
}

/// A `tracespan` instance: one span of a distributed trace. Times are nanoseconds since the
/// Unix epoch.
#[derive(Clone, Copy, Debug, Default)]
pub struct TraceSpanInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// `trace_id`.
    pub trace_id: Option<&'a str>,
    /// `span_id`.
    pub span_id: Option<&'a str>,
    /// `parent_span_id` (unset for a root span).
    pub parent_span_id: Option<&'a str>,
    /// `span_name`.
    pub span_name: Option<&'a str>,
    /// `start_time`.
    pub start_time: Option<i64>,
    /// `end_time`.
    pub end_time: Option<i64>,
    /// `span_tags`.
    pub span_tags: BatchEntries<'a>,
    /// `http_status_code`.
    pub http_status_code: Option<i64>,
    /// `client_span`: true for the client's side of a call.
    pub client_span: Option<bool>,
    /// `rewrite_client_span_id`.
    pub rewrite_client_span_id: Option<bool>,
    /// `source_name`: the calling workload.
    pub source_name: Option<&'a str>,
    /// `source_ip`.
    pub source_ip: Option<IpAddr>,
    /// `destination_name`: the called workload.
    pub destination_name: Option<&'a str>,
    /// `destination_ip`.
    pub destination_ip: Option<IpAddr>,
    /// `request_size`: the request body's bytes.
    pub request_size: Option<i64>,
    /// `request_total_size`: with headers.
    pub request_total_size: Option<i64>,
    /// `response_size`: the response body's bytes.
    pub response_size: Option<i64>,
    /// `response_total_size`: with headers.
    pub response_total_size: Option<i64>,
    /// `api_protocol` (`http`, `grpc`...).
    pub api_protocol: Option<&'a str>,
}

impl<'a> TraceSpanInstance<'a> {
    /// The instance read as this template, or `None` when it is of another.
    pub fn of(instance: InstanceRef<'a>) -> Option<TraceSpanInstance<'a>> {
        let mut out = TraceSpanInstance {
            name: instance.name(),
            ..TraceSpanInstance::default()
        };
        for (name, v) in report_fields(&instance, Template::Tracespan)? {
            match name {
                "trace_id" => out.trace_id = text_ref(v),
                "span_id" => out.span_id = text_ref(v),
                "parent_span_id" => out.parent_span_id = text_ref(v),
                "span_name" => out.span_name = text_ref(v),
                "start_time" => out.start_time = timestamp_ref(v),
                "end_time" => out.end_time = timestamp_ref(v),
                "span_tags" => out.span_tags = entries_ref(v),
                "http_status_code" => out.http_status_code = int_ref(v),
                "client_span" => out.client_span = bool_ref(v),
                "rewrite_client_span_id" => out.rewrite_client_span_id = bool_ref(v),
                "source_name" => out.source_name = text_ref(v),
                "source_ip" => out.source_ip = ip_ref(v),
                "destination_name" => out.destination_name = text_ref(v),
                "destination_ip" => out.destination_ip = ip_ref(v),
                "request_size" => out.request_size = int_ref(v),
                "request_total_size" => out.request_total_size = int_ref(v),
                "response_size" => out.response_size = int_ref(v),
                "response_total_size" => out.response_total_size = int_ref(v),
                "api_protocol" => out.api_protocol = text_ref(v),
                _ => {}
            }
        }
        Some(out)
    }
}

/// A `reportnothing` instance: only its name.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReportNothingInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
}

impl<'a> ReportNothingInstance<'a> {
    /// The instance read as this template, or `None` when it is of another.
    pub fn of(instance: InstanceRef<'a>) -> Option<ReportNothingInstance<'a>> {
        (Template::of(&instance) == Some(Template::Reportnothing)).then(|| ReportNothingInstance {
            name: instance.name(),
        })
    }
}

#[cfg(test)]
mod tests {
    use mixer_wasm_batch::{Writer, case};

    use super::*;
    use crate::Batch;
    use crate::bindings::{Field, ReportBatch};

    fn field(name: &str, value: FieldValue) -> Field {
        Field {
            name: name.into(),
            value,
        }
    }

    fn string(s: &str) -> Value {
        Value::String(s.into())
    }

    #[test]
    fn a_check_instance_reads_as_its_template_and_no_other() {
        let instance = Instance {
            name: "auth.istio-system".into(),
            template: Template::Authorization,
            fields: vec![
                field("subject.user", FieldValue::Single(string("alice"))),
                field("action.path", FieldValue::Single(string("/admin"))),
                field(
                    "action.properties",
                    FieldValue::Map(vec![
                        ("x-plugin-deny".into(), string("true")),
                        ("port".into(), Value::Int64(8080)),
                    ]),
                ),
                // A field of the wrong kind reads as unset, not as a panic.
                field("action.method", FieldValue::Map(Vec::new())),
            ],
        };
        let auth = AuthorizationInstance::of(&instance).expect("an authorization");
        assert_eq!(auth.name, "auth.istio-system");
        assert_eq!(auth.subject.user, Some("alice"));
        assert_eq!(auth.subject.groups, None);
        assert!(auth.subject.properties.is_empty());
        assert_eq!(auth.action.path, Some("/admin"));
        assert_eq!(auth.action.method, None);
        assert_eq!(
            auth.action.properties.get("x-plugin-deny"),
            Some(&string("true"))
        );
        assert_eq!(
            auth.action
                .properties
                .iter()
                .map(|(k, _)| k)
                .collect::<Vec<_>>(),
            ["x-plugin-deny", "port"]
        );
        assert_eq!(
            auth.action.properties.get("port"),
            Some(&Value::Int64(8080))
        );
        assert_eq!(ListEntryInstance::of(&instance), None);
        assert_eq!(QuotaInstance::of(&instance), None);
        assert_eq!(CheckNothingInstance::of(&instance), None);

        let list = Instance {
            name: "ip.istio-system".into(),
            template: Template::Listentry,
            fields: vec![field("value", FieldValue::Single(string("10.0.0.1")))],
        };
        let entry = ListEntryInstance::of(&list).expect("a listentry");
        assert_eq!(entry.value.and_then(Value::as_str), Some("10.0.0.1"));
        assert_eq!(AuthorizationInstance::of(&list), None);

        let quota = Instance {
            name: "rate.istio-system".into(),
            template: Template::Quota,
            fields: vec![field(
                "dimensions",
                FieldValue::Map(vec![("user".into(), string("bob"))]),
            )],
        };
        let q = QuotaInstance::of(&quota).expect("a quota");
        assert_eq!(q.dimensions.len(), 1);
        assert_eq!(q.dimensions.get("user"), Some(&string("bob")));

        let key = Instance {
            name: "key.istio-system".into(),
            template: Template::Apikey,
            fields: vec![field("key", FieldValue::Single(string("k-123")))],
        };
        assert_eq!(ApiKeyInstance::of(&key).and_then(|k| k.key), Some("k-123"));
        assert_eq!(JwtInstance::of(&key), None);
        let pods = Instance {
            name: "attributes.istio-system".into(),
            template: Template::Kubernetes,
            fields: vec![
                field(
                    "source_ip",
                    FieldValue::Single(Value::IpAddress(vec![10, 0, 0, 7])),
                ),
                field("destination_port", FieldValue::Single(Value::Int64(9080))),
            ],
        };
        let k = KubernetesInstance::of(&pods).expect("a kubernetes instance");
        assert_eq!(k.source_ip, Some(IpAddr::from([10, 0, 0, 7])));
        assert_eq!((k.destination_port, k.source_uid), (Some(9080), None));

        let nothing = Instance {
            name: "n.istio-system".into(),
            template: Template::Checknothing,
            fields: Vec::new(),
        };
        assert_eq!(
            CheckNothingInstance::of(&nothing).map(|c| c.name),
            Some("n.istio-system")
        );
    }

    /// A batch of a metric, a logentry, a tracespan and a reportnothing, as the mixer
    /// writes one.
    fn batch() -> Batch {
        let mut w = Writer::default();
        let metric = w.instance("requestcount.istio-system", 4, 3);
        let f = w.field("value");
        w.wide(case::INT64, 3);
        w.end(f);
        let f = w.field("dimensions");
        w.map(2);
        w.key("destination");
        w.text(case::STRING, "reviews");
        w.key("code");
        w.wide(case::INT64, 200);
        w.end(f);
        let f = w.field("monitored_resource_type");
        w.text(case::STRING, "UNSPECIFIED");
        w.end(f);
        w.end(metric);

        let log = w.instance("accesslog.istio-system", 5, 2);
        let f = w.field("timestamp");
        w.wide(case::TIMESTAMP, 1_700_000_000_000_000_000);
        w.end(f);
        let f = w.field("severity");
        w.text(case::STRING, "Error");
        w.end(f);
        w.end(log);

        let span = w.instance("span.istio-system", 6, 4);
        let f = w.field("trace_id");
        w.text(case::STRING, "abc");
        w.end(f);
        let f = w.field("http_status_code");
        w.wide(case::INT64, 503);
        w.end(f);
        let f = w.field("client_span");
        w.boolean(true);
        w.end(f);
        let f = w.field("source_ip");
        w.bytes(case::IP_ADDRESS, &[10, 0, 0, 7]);
        w.end(f);
        w.end(span);

        let nothing = w.instance("nothing.istio-system", 7, 0);
        w.end(nothing);
        let packed = w.finish();
        Batch::__new(ReportBatch {
            text: packed.text,
            bytes: packed.bytes,
            words: packed.words,
        })
        .expect("a batch")
    }

    #[test]
    fn report_instances_read_in_place_as_their_templates() {
        let batch = batch();
        let metrics: Vec<_> = batch.iter().filter_map(MetricInstance::of).collect();
        assert_eq!(metrics.len(), 1);
        let m = metrics[0];
        assert_eq!(m.name, "requestcount.istio-system");
        assert_eq!(m.value, Some(ValueRef::Int64(3)));
        assert_eq!(
            m.dimensions.get("destination"),
            Some(ValueRef::String("reviews"))
        );
        assert_eq!(m.dimensions.get("code"), Some(ValueRef::Int64(200)));
        assert_eq!(m.dimensions.get("missing"), None);
        assert_eq!(m.monitored_resource_type, Some("UNSPECIFIED"));
        assert!(m.monitored_resource_dimensions.is_empty());

        let logs: Vec<_> = batch.iter().filter_map(LogEntryInstance::of).collect();
        assert_eq!(logs.len(), 1);
        assert_eq!(logs[0].timestamp, Some(1_700_000_000_000_000_000));
        assert_eq!(logs[0].severity, Some("Error"));
        assert!(logs[0].variables.is_empty());

        let spans: Vec<_> = batch.iter().filter_map(TraceSpanInstance::of).collect();
        assert_eq!(spans.len(), 1);
        let s = spans[0];
        assert_eq!(s.trace_id, Some("abc"));
        assert_eq!(s.http_status_code, Some(503));
        assert_eq!(s.client_span, Some(true));
        assert_eq!(s.source_ip, Some(IpAddr::from([10, 0, 0, 7])));
        assert_eq!(s.destination_ip, None);

        let nothing: Vec<_> = batch.iter().filter_map(ReportNothingInstance::of).collect();
        assert_eq!(
            nothing,
            [ReportNothingInstance {
                name: "nothing.istio-system"
            }]
        );
    }
}
