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
const QUOTA: &[FieldSpec] = &[map("dimensions")];
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
    pub const ALL: [Template; 8] = [
        Template::Authorization,
        Template::CheckNothing,
        Template::ListEntry,
        Template::Quota,
        Template::Metric,
        Template::LogEntry,
        Template::TraceSpan,
        Template::ReportNothing,
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
            Template::CheckNothing | Template::ReportNothing => &[],
        }
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
        assert_eq!(
            camel_to_snake("monitoredResourceType"),
            "monitored_resource_type"
        );
    }
}
