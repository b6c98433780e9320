//! The fixed templates: their names, varieties and fields.

use std::fmt;

use crate::value::ValueType;

/// Which kind of call a template's instances go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variety {
    /// A precondition check: allow or deny.
    Check,
    /// A quota allocation.
    Quota,
    /// Telemetry after the request.
    Report,
    /// Attribute production before any other rule (Istio's `TEMPLATE_VARIETY_ATTRIBUTE_GENERATOR`):
    /// the handler's outputs are bound to attributes by the instance's `attributeBindings`.
    AttributeGenerator,
}

/// The templates the mixer knows. Their shapes follow Istio 1.4's templates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Template {
    /// `authorization`: subject and action for access control.
    Authorization,
    /// `checknothing`: a check with no data.
    CheckNothing,
    /// `listentry`: one value to look up in a list.
    ListEntry,
    /// `quota`: dimensions to count against.
    Quota,
    /// `metric`: a value with dimensions.
    Metric,
    /// `logentry`: a log record.
    LogEntry,
    /// `tracespan`: a span.
    TraceSpan,
    /// `reportnothing`: a report with no data.
    ReportNothing,
    /// `kubernetes`: the pods behind a request's source and destination (Istio 1.4's
    /// kubernetesenv template), an attribute generator.
    Kubernetes,
    /// `jwt`: a bearer token verified into `request.auth.*`, an attribute generator.
    Jwt,
    /// `apikey`: an API key looked up into its principal and labels, an attribute generator.
    ApiKey,
}

/// The shape of a template field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// One value; `None` means any type.
    Value(Option<ValueType>),
    /// A map from names to values; `None` means values of any type.
    Map(Option<ValueType>),
}

/// One field of a template: its name (snake_case, dotted for nested messages) and shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    /// Field name, such as `subject.user` or `dimensions`.
    pub name: &'static str,
    /// Its shape.
    pub kind: FieldKind,
}

const fn value(name: &'static str, ty: ValueType) -> FieldSpec {
    FieldSpec {
        name,
        kind: FieldKind::Value(Some(ty)),
    }
}

const fn any(name: &'static str) -> FieldSpec {
    FieldSpec {
        name,
        kind: FieldKind::Value(None),
    }
}

const fn map(name: &'static str) -> FieldSpec {
    FieldSpec {
        name,
        kind: FieldKind::Map(None),
    }
}

use ValueType as T;

const AUTHORIZATION: &[FieldSpec] = &[
    value("subject.user", T::String),
    value("subject.groups", T::String),
    map("subject.properties"),
    value("action.namespace", T::String),
    value("action.service", T::String),
    value("action.method", T::String),
    value("action.path", T::String),
    map("action.properties"),
];
const LISTENTRY: &[FieldSpec] = &[any("value")];
// Istio 1.4's quota template has `dimensions` only; the amount came from the Check request.
// `charge`, `min_remaining` and `deduplication_id` are the mixer's: an instance with a
// `charge` is also charged by report rules (usage known only after the response), and
// `min_remaining` lets a check refuse while fewer units are left.
const QUOTA: &[FieldSpec] = &[
    map("dimensions"),
    any("charge"),
    value("min_remaining", T::Int64),
    value("deduplication_id", T::String),
];
const METRIC: &[FieldSpec] = &[
    any("value"),
    map("dimensions"),
    value("monitored_resource_type", T::String),
    map("monitored_resource_dimensions"),
];
const LOGENTRY: &[FieldSpec] = &[
    map("variables"),
    value("timestamp", T::Timestamp),
    value("severity", T::String),
    value("monitored_resource_type", T::String),
    map("monitored_resource_dimensions"),
];
// Istio 1.4 `mixer/adapter/kubernetesenv/template/template.proto`, message `Template`.
const KUBERNETES: &[FieldSpec] = &[
    value("source_uid", T::String),
    value("source_ip", T::IpAddress),
    value("destination_uid", T::String),
    value("destination_ip", T::IpAddress),
    value("destination_port", T::Int64),
];
// Istio 1.4 `mixer/adapter/kubernetesenv/template/template.proto`, message `OutputTemplate`.
const KUBERNETES_OUT: &[FieldSpec] = &[
    value("source_pod_uid", T::String),
    value("source_pod_ip", T::IpAddress),
    value("source_pod_name", T::String),
    value("source_labels", T::StringMap),
    value("source_namespace", T::String),
    value("source_service_account_name", T::String),
    value("source_host_ip", T::IpAddress),
    value("source_workload_uid", T::String),
    value("source_workload_name", T::String),
    value("source_workload_namespace", T::String),
    value("source_owner", T::String),
    value("destination_pod_uid", T::String),
    value("destination_pod_ip", T::IpAddress),
    value("destination_pod_name", T::String),
    value("destination_container_name", T::String),
    value("destination_labels", T::StringMap),
    value("destination_namespace", T::String),
    value("destination_service_account_name", T::String),
    value("destination_host_ip", T::IpAddress),
    value("destination_owner", T::String),
    value("destination_workload_uid", T::String),
    value("destination_workload_name", T::String),
    value("destination_workload_namespace", T::String),
];
// The credential as the request carries it: a header's value (a leading `Bearer ` is
// stripped), a query parameter's; `cookie` is a `Cookie` header to find a named cookie in.
const JWT: &[FieldSpec] = &[value("token", T::String), value("cookie", T::String)];
// Named after Istio's `request.auth.*` attributes they are meant to be bound to.
const JWT_OUT: &[FieldSpec] = &[
    value("principal", T::String),
    value("issuer", T::String),
    value("subject", T::String),
    value("audiences", T::String),
    value("presenter", T::String),
    value("claims", T::StringMap),
    value("raw_claims", T::String),
    value("expires_at", T::Timestamp),
];
const APIKEY: &[FieldSpec] = &[value("key", T::String)];
const APIKEY_OUT: &[FieldSpec] = &[value("principal", T::String), value("claims", T::StringMap)];
const TRACESPAN: &[FieldSpec] = &[
    value("trace_id", T::String),
    value("span_id", T::String),
    value("parent_span_id", T::String),
    value("span_name", T::String),
    value("start_time", T::Timestamp),
    value("end_time", T::Timestamp),
    map("span_tags"),
    value("http_status_code", T::Int64),
    value("client_span", T::Bool),
    value("rewrite_client_span_id", T::Bool),
    value("source_name", T::String),
    value("source_ip", T::IpAddress),
    value("destination_name", T::String),
    value("destination_ip", T::IpAddress),
    value("request_size", T::Int64),
    value("request_total_size", T::Int64),
    value("response_size", T::Int64),
    value("response_total_size", T::Int64),
    value("api_protocol", T::String),
];

impl Template {
    /// Every template.
    pub const ALL: [Template; 11] = [
        Template::Authorization,
        Template::CheckNothing,
        Template::ListEntry,
        Template::Quota,
        Template::Metric,
        Template::LogEntry,
        Template::TraceSpan,
        Template::ReportNothing,
        Template::Kubernetes,
        Template::Jwt,
        Template::ApiKey,
    ];

    /// The name used in config (`compiledTemplate: listentry`).
    pub fn name(self) -> &'static str {
        match self {
            Template::Authorization => "authorization",
            Template::CheckNothing => "checknothing",
            Template::ListEntry => "listentry",
            Template::Quota => "quota",
            Template::Metric => "metric",
            Template::LogEntry => "logentry",
            Template::TraceSpan => "tracespan",
            Template::ReportNothing => "reportnothing",
            Template::Kubernetes => "kubernetes",
            Template::Jwt => "jwt",
            Template::ApiKey => "apikey",
        }
    }

    /// Looks a template up by its config name.
    pub fn from_name(name: &str) -> Option<Template> {
        Template::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Check, quota or report.
    pub fn variety(self) -> Variety {
        match self {
            Template::Authorization | Template::CheckNothing | Template::ListEntry => {
                Variety::Check
            }
            Template::Quota => Variety::Quota,
            Template::Metric
            | Template::LogEntry
            | Template::TraceSpan
            | Template::ReportNothing => Variety::Report,
            Template::Kubernetes | Template::Jwt | Template::ApiKey => Variety::AttributeGenerator,
        }
    }

    /// The fields an instance of this template may set.
    pub fn fields(self) -> &'static [FieldSpec] {
        match self {
            Template::Authorization => AUTHORIZATION,
            Template::ListEntry => LISTENTRY,
            Template::Quota => QUOTA,
            Template::Metric => METRIC,
            Template::LogEntry => LOGENTRY,
            Template::TraceSpan => TRACESPAN,
            Template::Kubernetes => KUBERNETES,
            Template::Jwt => JWT,
            Template::ApiKey => APIKEY,
            Template::CheckNothing | Template::ReportNothing => &[],
        }
    }

    /// The fields an attribute generator answers with (Istio's `OutputTemplate`), which an
    /// instance's `attributeBindings` read as `$out.<field>`; empty for other varieties.
    pub fn outputs(self) -> &'static [FieldSpec] {
        match self {
            Template::Kubernetes => KUBERNETES_OUT,
            Template::Jwt => JWT_OUT,
            Template::ApiKey => APIKEY_OUT,
            _ => &[],
        }
    }

    /// The output field called `name` (snake case, as `$out.<name>` spells it).
    pub fn output(self, name: &str) -> Option<&'static FieldSpec> {
        self.outputs().iter().find(|f| f.name == name)
    }

    /// The field called `name`, accepting camelCase (`spanTags`) as Istio's JSON mapping did.
    pub fn field(self, name: &str) -> Option<&'static FieldSpec> {
        let snake = camel_to_snake(name);
        self.fields().iter().find(|f| f.name == snake)
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `spanTags` -> `span_tags`; names already in snake case are unchanged.
pub fn camel_to_snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_have_names_varieties_and_fields() {
        for t in Template::ALL {
            assert_eq!(Template::from_name(t.name()), Some(t));
        }
        assert_eq!(Template::ListEntry.variety(), Variety::Check);
        assert_eq!(Template::Quota.variety(), Variety::Quota);
        assert_eq!(Template::Metric.variety(), Variety::Report);
        assert_eq!(
            Template::TraceSpan.field("spanTags").map(|f| f.name),
            Some("span_tags")
        );
        assert!(Template::ListEntry.field("nope").is_none());
        assert_eq!(Template::Kubernetes.variety(), Variety::AttributeGenerator);
        assert_eq!(
            Template::Kubernetes.output("source_labels").map(|f| f.kind),
            Some(FieldKind::Value(Some(ValueType::StringMap)))
        );
        assert!(Template::Metric.outputs().is_empty());
        assert_eq!(
            camel_to_snake("monitoredResourceType"),
            "monitored_resource_type"
        );
    }
}
