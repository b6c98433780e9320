//! Template instances: what a rule sends to a handler, and the typed view of each template
//! that adapters read them through.
//!
//! An [`Instance`] keeps its fields generically (name and value, in template order), which is
//! what the code that moves instances around needs: the report queue, the out-of-process and
//! Wasm transports, the check cache. An adapter reads one through [`Instance::view`]: a struct
//! per template whose fields are typed as the template declares them, borrowed from the
//! instance, so reading costs no allocation.
//!
//! ```
//! use std::sync::Arc;
//! use mixer_model::{FieldValue, Instance, InstanceView, MetricInstance, Template, Value};
//!
//! let instance = Instance {
//!     name: "requestcount.instance.istio-system".into(),
//!     template: Template::Metric,
//!     fields: vec![
//!         ("value", FieldValue::Value(Value::Int64(1))),
//!         ("dimensions", FieldValue::Map(vec![(Arc::from("code"), Value::Int64(200))])),
//!     ],
//! };
//! let InstanceView::Metric(metric) = instance.view() else { unreachable!() };
//! assert_eq!(metric.value, Some(&Value::Int64(1)));
//! assert_eq!(metric.dimensions.get("code"), Some(&Value::Int64(200)));
//! assert_eq!(metric.monitored_resource_type, None);
//! // The same, for an adapter that takes one template:
//! assert_eq!(MetricInstance::of(&instance).map(|m| m.name), Some("requestcount.instance.istio-system"));
//! ```

use std::net::IpAddr;
use std::sync::Arc;

use crate::decision_record::DecisionRecord;
use crate::template::Template;
use crate::value::{Timestamp, Value};

/// The value of one instance field.
#[derive(Clone, Debug, PartialEq)]
pub enum FieldValue {
    /// A single value.
    Value(Value),
    /// Named values (dimensions, tags, variables), in config order.
    Map(Vec<(Arc<str>, Value)>),
    /// A decision-log record, read as named values in name order
    /// ([`DecisionRecord::entries`]): the `variables` of a decision-log instance.
    Decision(Arc<DecisionRecord>),
}

impl FieldValue {
    /// The named values of a map field (a decision record's as it reads); `None` for a
    /// single value.
    pub fn entries(&self) -> Option<&[(Arc<str>, Value)]> {
        match self {
            FieldValue::Map(entries) => Some(entries),
            FieldValue::Decision(record) => Some(record.entries()),
            FieldValue::Value(_) => None,
        }
    }
}

/// A template instance: what a rule sends to a handler, built from the request's attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// The instance's fully qualified name (`name.namespace`).
    pub name: Arc<str>,
    /// Its template.
    pub template: Template,
    /// Fields that evaluated to a value, in template order. Fields whose expression found
    /// nothing are left out, as Istio did.
    pub fields: Vec<(&'static str, FieldValue)>,
}

impl Instance {
    /// A field's value, by its template name (`dimensions`, `subject.user`).
    pub fn field(&self, name: &str) -> Option<&FieldValue> {
        self.fields.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// The instance as its template's typed view.
    pub fn view(&self) -> InstanceView<'_> {
        let name = &*self.name;
        match self.template {
            Template::Authorization => {
                InstanceView::Authorization(AuthorizationInstance::read(self))
            }
            Template::CheckNothing => InstanceView::CheckNothing(CheckNothingInstance { name }),
            Template::ListEntry => InstanceView::ListEntry(ListEntryInstance::read(self)),
            Template::Quota => InstanceView::Quota(QuotaInstance::read(self)),
            Template::Metric => InstanceView::Metric(MetricInstance::read(self)),
            Template::LogEntry => InstanceView::LogEntry(LogEntryInstance::read(self)),
            Template::TraceSpan => InstanceView::TraceSpan(TraceSpanInstance::read(self)),
            Template::ReportNothing => InstanceView::ReportNothing(ReportNothingInstance { name }),
            Template::Kubernetes => InstanceView::Kubernetes(KubernetesInstance::read(self)),
            Template::Jwt => InstanceView::Jwt(JwtInstance::read(self)),
            Template::ApiKey => InstanceView::ApiKey(ApiKeyInstance::read(self)),
        }
    }
}

/// An instance read as its template: one variant per template, each a struct whose fields
/// are typed as the template declares them. A field the instance does not set is `None` (or
/// an empty [`Entries`]); Istio's protocol sent the type's zero value instead, which cannot
/// tell "unset" from "zero".
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InstanceView<'a> {
    /// `authorization`.
    Authorization(AuthorizationInstance<'a>),
    /// `checknothing`.
    CheckNothing(CheckNothingInstance<'a>),
    /// `listentry`.
    ListEntry(ListEntryInstance<'a>),
    /// `quota`.
    Quota(QuotaInstance<'a>),
    /// `metric`.
    Metric(MetricInstance<'a>),
    /// `logentry`.
    LogEntry(LogEntryInstance<'a>),
    /// `tracespan`.
    TraceSpan(TraceSpanInstance<'a>),
    /// `reportnothing`.
    ReportNothing(ReportNothingInstance<'a>),
    /// `kubernetes`.
    Kubernetes(KubernetesInstance<'a>),
    /// `jwt`.
    Jwt(JwtInstance<'a>),
    /// `apikey`.
    ApiKey(ApiKeyInstance<'a>),
}

/// The named values of a map field (dimensions, properties, tags, variables), in config
/// order.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Entries<'a>(&'a [(Arc<str>, Value)]);

impl<'a> Entries<'a> {
    /// The value named `key`.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.0.iter().find(|(k, _)| &**k == key).map(|(_, v)| v)
    }

    /// Names and values, in config order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&'a str, &'a Value)> + use<'a> {
        self.0.iter().map(|(k, v)| (&**k, v))
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The entries as the instance holds them.
    pub fn as_slice(&self) -> &'a [(Arc<str>, Value)] {
        self.0
    }
}

impl<'a> IntoIterator for Entries<'a> {
    type Item = (&'a str, &'a Value);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (Arc<str>, Value)>,
        fn(&'a (Arc<str>, Value)) -> (&'a str, &'a Value),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (&**k, v))
    }
}

/// Reads one instance's fields into a view, one pass over them.
struct Reader<'a>(&'a Instance);

impl<'a> Reader<'a> {
    fn each(&self, mut f: impl FnMut(&'static str, &'a FieldValue)) {
        for (name, value) in &self.0.fields {
            f(name, value);
        }
    }
}

fn value(v: &FieldValue) -> Option<&Value> {
    match v {
        FieldValue::Value(v) => Some(v),
        FieldValue::Map(_) | FieldValue::Decision(_) => None,
    }
}

fn text(v: &FieldValue) -> Option<&str> {
    value(v).and_then(Value::as_str)
}

fn int(v: &FieldValue) -> Option<i64> {
    value(v).and_then(Value::as_i64)
}

fn boolean(v: &FieldValue) -> Option<bool> {
    value(v).and_then(Value::as_bool)
}

fn timestamp(v: &FieldValue) -> Option<Timestamp> {
    match value(v) {
        Some(Value::Timestamp(t)) => Some(*t),
        _ => None,
    }
}

fn ip(v: &FieldValue) -> Option<IpAddr> {
    match value(v) {
        Some(Value::IpAddress(ip)) => Some(*ip),
        _ => None,
    }
}

fn entries(v: &FieldValue) -> Entries<'_> {
    match v {
        FieldValue::Map(m) => Entries(m),
        FieldValue::Decision(record) => Entries(record.entries()),
        FieldValue::Value(_) => Entries::default(),
    }
}

/// Each view's `of`: the view when the instance is of its template.
macro_rules! view_of {
    ($view:ident, $variant:ident) => {
        impl<'a> $view<'a> {
            /// The instance read as this template, or `None` when it is of another.
            pub fn of(instance: &'a Instance) -> Option<$view<'a>> {
                match instance.view() {
                    InstanceView::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
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
    fn read(instance: &'a Instance) -> AuthorizationInstance<'a> {
        let mut out = AuthorizationInstance {
            name: &instance.name,
            subject: Subject::default(),
            action: Action::default(),
        };
        Reader(instance).each(|name, v| match name {
            "subject.user" => out.subject.user = text(v),
            "subject.groups" => out.subject.groups = text(v),
            "subject.properties" => out.subject.properties = entries(v),
            "action.namespace" => out.action.namespace = text(v),
            "action.service" => out.action.service = text(v),
            "action.method" => out.action.method = text(v),
            "action.path" => out.action.path = text(v),
            "action.properties" => out.action.properties = entries(v),
            _ => {}
        });
        out
    }
}
view_of!(AuthorizationInstance, Authorization);

/// A `checknothing` instance: only its name.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CheckNothingInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
}
view_of!(CheckNothingInstance, CheckNothing);

/// A `listentry` instance: one value to look up in a list.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ListEntryInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// `value`: the entry to look up, of any type.
    pub value: Option<&'a Value>,
}

impl<'a> ListEntryInstance<'a> {
    fn read(instance: &'a Instance) -> ListEntryInstance<'a> {
        ListEntryInstance {
            name: &instance.name,
            value: instance.field("value").and_then(value),
        }
    }
}
view_of!(ListEntryInstance, ListEntry);

/// A `quota` instance: the dimensions that name one counter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuotaInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// `dimensions`.
    pub dimensions: Entries<'a>,
    /// `charge`: the units a report charges (any type; the runtime takes integers and
    /// integer strings such as a header's value).
    pub charge: Option<&'a Value>,
    /// `min_remaining`: a check is refused while fewer units than this are left.
    pub min_remaining: Option<i64>,
    /// `deduplication_id`: a report record's id; a retried record is not charged twice.
    pub deduplication_id: Option<&'a str>,
}

impl<'a> QuotaInstance<'a> {
    fn read(instance: &'a Instance) -> QuotaInstance<'a> {
        QuotaInstance {
            name: &instance.name,
            dimensions: instance
                .field("dimensions")
                .map(entries)
                .unwrap_or_default(),
            charge: instance.field("charge").and_then(value),
            min_remaining: instance.field("min_remaining").and_then(int),
            deduplication_id: instance.field("deduplication_id").and_then(text),
        }
    }
}
view_of!(QuotaInstance, Quota);

/// A `metric` instance: a value with the dimensions that name its series.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MetricInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// `value`, of any type.
    pub value: Option<&'a Value>,
    /// `dimensions`.
    pub dimensions: Entries<'a>,
    /// `monitored_resource_type`.
    pub monitored_resource_type: Option<&'a str>,
    /// `monitored_resource_dimensions`.
    pub monitored_resource_dimensions: Entries<'a>,
}

impl<'a> MetricInstance<'a> {
    fn read(instance: &'a Instance) -> MetricInstance<'a> {
        let mut out = MetricInstance {
            name: &instance.name,
            value: None,
            dimensions: Entries::default(),
            monitored_resource_type: None,
            monitored_resource_dimensions: Entries::default(),
        };
        Reader(instance).each(|name, v| match name {
            "value" => out.value = value(v),
            "dimensions" => out.dimensions = entries(v),
            "monitored_resource_type" => out.monitored_resource_type = text(v),
            "monitored_resource_dimensions" => out.monitored_resource_dimensions = entries(v),
            _ => {}
        });
        out
    }
}
view_of!(MetricInstance, Metric);

/// A `logentry` instance: one log record.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogEntryInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// `variables`: the record's fields.
    pub variables: Entries<'a>,
    /// `timestamp`: when it happened.
    pub timestamp: Option<Timestamp>,
    /// `severity` (`"Default"`, `"Error"`, ...).
    pub severity: Option<&'a str>,
    /// `monitored_resource_type`.
    pub monitored_resource_type: Option<&'a str>,
    /// `monitored_resource_dimensions`.
    pub monitored_resource_dimensions: Entries<'a>,
}

impl<'a> LogEntryInstance<'a> {
    fn read(instance: &'a Instance) -> LogEntryInstance<'a> {
        let mut out = LogEntryInstance {
            name: &instance.name,
            variables: Entries::default(),
            timestamp: None,
            severity: None,
            monitored_resource_type: None,
            monitored_resource_dimensions: Entries::default(),
        };
        Reader(instance).each(|name, v| match name {
            "variables" => out.variables = entries(v),
            "timestamp" => out.timestamp = timestamp(v),
            "severity" => out.severity = text(v),
            "monitored_resource_type" => out.monitored_resource_type = text(v),
            "monitored_resource_dimensions" => out.monitored_resource_dimensions = entries(v),
            _ => {}
        });
        out
    }
}
view_of!(LogEntryInstance, LogEntry);

/// A `tracespan` instance: one span of a distributed trace.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
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
    pub start_time: Option<Timestamp>,
    /// `end_time`.
    pub end_time: Option<Timestamp>,
    /// `span_tags`.
    pub span_tags: Entries<'a>,
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
    fn read(instance: &'a Instance) -> TraceSpanInstance<'a> {
        let mut out = TraceSpanInstance {
            name: &instance.name,
            ..TraceSpanInstance::default()
        };
        Reader(instance).each(|name, v| match name {
            "trace_id" => out.trace_id = text(v),
            "span_id" => out.span_id = text(v),
            "parent_span_id" => out.parent_span_id = text(v),
            "span_name" => out.span_name = text(v),
            "start_time" => out.start_time = timestamp(v),
            "end_time" => out.end_time = timestamp(v),
            "span_tags" => out.span_tags = entries(v),
            "http_status_code" => out.http_status_code = int(v),
            "client_span" => out.client_span = boolean(v),
            "rewrite_client_span_id" => out.rewrite_client_span_id = boolean(v),
            "source_name" => out.source_name = text(v),
            "source_ip" => out.source_ip = ip(v),
            "destination_name" => out.destination_name = text(v),
            "destination_ip" => out.destination_ip = ip(v),
            "request_size" => out.request_size = int(v),
            "request_total_size" => out.request_total_size = int(v),
            "response_size" => out.response_size = int(v),
            "response_total_size" => out.response_total_size = int(v),
            "api_protocol" => out.api_protocol = text(v),
            _ => {}
        });
        out
    }
}
view_of!(TraceSpanInstance, TraceSpan);

/// A `reportnothing` instance: only its name.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReportNothingInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
}
view_of!(ReportNothingInstance, ReportNothing);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::{FieldKind, Template};
    use crate::value::ValueType;

    /// A value of the type a template field declares (any type: a string).
    fn sample(ty: Option<ValueType>, n: i64) -> Value {
        match ty {
            None | Some(ValueType::String) => Value::string(format!("v{n}")),
            Some(ValueType::Int64) => Value::Int64(n),
            Some(ValueType::Bool) => Value::Bool(n % 2 == 1),
            Some(ValueType::Timestamp) => Value::Timestamp(Timestamp(n)),
            Some(ValueType::IpAddress) => Value::IpAddress(IpAddr::from([10, 0, 0, n as u8])),
            Some(other) => panic!("no template field is of type {other}"),
        }
    }

    /// Every field of `template` set, from its declaration in `template.rs`.
    fn full(template: Template) -> Instance {
        let fields = template
            .fields()
            .iter()
            .zip(1..)
            .map(|(spec, n)| {
                let v = match spec.kind {
                    FieldKind::Value(ty) => FieldValue::Value(sample(ty, n)),
                    FieldKind::Map(_) => {
                        FieldValue::Map(vec![(Arc::from(format!("k{n}")), Value::Int64(n))])
                    }
                };
                (spec.name, v)
            })
            .collect();
        Instance {
            name: format!("{template}.instance.ns").into(),
            template,
            fields,
        }
    }

    /// What the view says of each declared field, as (field, debug text of the value), so
    /// that a field the view forgets (left `None`) shows up against the declaration.
    fn seen(view: InstanceView<'_>) -> Vec<(&'static str, String)> {
        fn t<T: std::fmt::Debug>(
            name: &'static str,
            v: Option<T>,
        ) -> Option<(&'static str, String)> {
            v.map(|v| (name, format!("{v:?}")))
        }
        fn e(name: &'static str, v: Entries<'_>) -> Option<(&'static str, String)> {
            (!v.is_empty()).then(|| (name, format!("{:?}", v.iter().collect::<Vec<_>>())))
        }
        let all = match view {
            InstanceView::Authorization(a) => vec![
                t("subject.user", a.subject.user),
                t("subject.groups", a.subject.groups),
                e("subject.properties", a.subject.properties),
                t("action.namespace", a.action.namespace),
                t("action.service", a.action.service),
                t("action.method", a.action.method),
                t("action.path", a.action.path),
                e("action.properties", a.action.properties),
            ],
            InstanceView::ListEntry(l) => vec![t("value", l.value)],
            InstanceView::Kubernetes(k) => vec![
                t("source_uid", k.source_uid),
                t("source_ip", k.source_ip),
                t("destination_uid", k.destination_uid),
                t("destination_ip", k.destination_ip),
                t("destination_port", k.destination_port),
            ],
            InstanceView::Jwt(j) => vec![t("token", j.token), t("cookie", j.cookie)],
            InstanceView::ApiKey(a) => vec![t("key", a.key)],
            InstanceView::Quota(q) => vec![
                e("dimensions", q.dimensions),
                t("charge", q.charge),
                t("min_remaining", q.min_remaining),
                t("deduplication_id", q.deduplication_id),
            ],
            InstanceView::Metric(m) => vec![
                t("value", m.value),
                e("dimensions", m.dimensions),
                t("monitored_resource_type", m.monitored_resource_type),
                e(
                    "monitored_resource_dimensions",
                    m.monitored_resource_dimensions,
                ),
            ],
            InstanceView::LogEntry(l) => vec![
                e("variables", l.variables),
                t("timestamp", l.timestamp),
                t("severity", l.severity),
                t("monitored_resource_type", l.monitored_resource_type),
                e(
                    "monitored_resource_dimensions",
                    l.monitored_resource_dimensions,
                ),
            ],
            InstanceView::TraceSpan(s) => vec![
                t("trace_id", s.trace_id),
                t("span_id", s.span_id),
                t("parent_span_id", s.parent_span_id),
                t("span_name", s.span_name),
                t("start_time", s.start_time),
                t("end_time", s.end_time),
                e("span_tags", s.span_tags),
                t("http_status_code", s.http_status_code),
                t("client_span", s.client_span),
                t("rewrite_client_span_id", s.rewrite_client_span_id),
                t("source_name", s.source_name),
                t("source_ip", s.source_ip),
                t("destination_name", s.destination_name),
                t("destination_ip", s.destination_ip),
                t("request_size", s.request_size),
                t("request_total_size", s.request_total_size),
                t("response_size", s.response_size),
                t("response_total_size", s.response_total_size),
                t("api_protocol", s.api_protocol),
            ],
            InstanceView::CheckNothing(_) | InstanceView::ReportNothing(_) => vec![],
        };
        all.into_iter().flatten().collect()
    }

    #[test]
    fn every_declared_field_reaches_its_view() {
        for template in Template::ALL {
            let instance = full(template);
            let view = instance.view();
            let names: Vec<&str> = seen(view).into_iter().map(|(n, _)| n).collect();
            let declared: Vec<&str> = template.fields().iter().map(|f| f.name).collect();
            assert_eq!(names, declared, "{template}");
        }
    }

    #[test]
    fn a_view_reads_the_values_the_instance_holds() {
        let metric = full(Template::Metric);
        let m = MetricInstance::of(&metric).expect("a metric");
        assert_eq!(m.name, "metric.instance.ns");
        assert_eq!(m.value, Some(&Value::string("v1")));
        assert_eq!(m.dimensions.get("k2"), Some(&Value::Int64(2)));
        assert_eq!(m.dimensions.get("k1"), None);
        assert_eq!(m.monitored_resource_type, Some("v3"));
        let span = full(Template::TraceSpan);
        let s = TraceSpanInstance::of(&span).expect("a span");
        assert_eq!(s.http_status_code, Some(8));
        assert_eq!(s.client_span, Some(true));
        assert_eq!(s.rewrite_client_span_id, Some(false));
        assert_eq!(s.source_ip, Some(IpAddr::from([10, 0, 0, 12])));
        assert_eq!(s.start_time, Some(Timestamp(5)));
        assert!(MetricInstance::of(&span).is_none());
    }

    #[test]
    fn unset_fields_read_as_none_and_empty() {
        for template in Template::ALL {
            let empty = Instance {
                name: "i".into(),
                template,
                fields: vec![],
            };
            assert!(seen(empty.view()).is_empty(), "{template}");
        }
    }
}

/// A `kubernetes` instance: what names the pods at both ends of a request (Istio 1.4's
/// kubernetesenv inputs). A uid is `kubernetes://<pod>.<namespace>`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KubernetesInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// `source_uid`.
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
    fn read(instance: &'a Instance) -> KubernetesInstance<'a> {
        let field = |name| instance.field(name);
        KubernetesInstance {
            name: &instance.name,
            source_uid: field("source_uid").and_then(text),
            source_ip: field("source_ip").and_then(ip),
            destination_uid: field("destination_uid").and_then(text),
            destination_ip: field("destination_ip").and_then(ip),
            destination_port: field("destination_port").and_then(int),
        }
    }
}
view_of!(KubernetesInstance, Kubernetes);

/// A `jwt` instance: the credential as the request carries it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JwtInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// `token`: the token, or a header value holding it after a `Bearer ` scheme.
    pub token: Option<&'a str>,
    /// `cookie`: a `Cookie` header to find the handler's named cookie in.
    pub cookie: Option<&'a str>,
}

impl<'a> JwtInstance<'a> {
    fn read(instance: &'a Instance) -> JwtInstance<'a> {
        JwtInstance {
            name: &instance.name,
            token: instance.field("token").and_then(text),
            cookie: instance.field("cookie").and_then(text),
        }
    }
}
view_of!(JwtInstance, Jwt);

/// An `apikey` instance: the key as the request carries it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ApiKeyInstance<'a> {
    /// The instance's name.
    pub name: &'a str,
    /// `key`.
    pub key: Option<&'a str>,
}

impl<'a> ApiKeyInstance<'a> {
    fn read(instance: &'a Instance) -> ApiKeyInstance<'a> {
        ApiKeyInstance {
            name: &instance.name,
            key: instance.field("key").and_then(text),
        }
    }
}
view_of!(ApiKeyInstance, ApiKey);
