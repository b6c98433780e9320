//! A readable summary of a config for the admin endpoint `/config_dump`.

use mixer_adapter_api::host::FailPolicy;
use mixer_model::HeaderOp;
use serde_json::{Map, Value, json};

use crate::model::{Config, FieldExprValue, HeaderOperationConfig, MatchErrorPolicy};

impl Config {
    /// A JSON summary: handlers (name, adapter, params with their secrets hidden, failPolicy, connection, the `adapter`
    /// document of a remote one), instances (name, template, field -> expression source) and
    /// rules (name, match, actions by name, header operations), plus the attributes added to
    /// Istio's vocabulary.
    pub fn dump(&self) -> Value {
        let handlers: Vec<Value> = self
            .handlers
            .iter()
            .map(|h| {
                json!({
                    "name": &*h.name,
                    "adapter": h.adapter,
                    "params": h.shown_params(),
                    "failPolicy": h.fail_policy.map(|p| match p {
                        FailPolicy::Open => "OPEN",
                        FailPolicy::Closed => "CLOSED",
                    }),
                    "connection": h.connection.as_ref().map(|c| json!({
                        "address": c.address,
                        "timeout": c.timeout.map(|t| format!("{}s", t.as_secs_f64())),
                        "authentication": c.authentication.as_ref().map(|a| a.describe()),
                    })),
                    "adapterResource": h.adapter_resource.as_ref().map(|a| json!({
                        "name": &*a.name,
                        "templates": a.templates.iter().map(|t| t.name()).collect::<Vec<_>>(),
                        "paramsMessage": a.params.as_ref().map(|p| &*p.message),
                    })),
                    "file": h.file,
                })
            })
            .collect();
        let instances: Vec<Value> = self
            .instances
            .iter()
            .map(|i| {
                let mut fields = Map::new();
                for f in &i.fields {
                    let v = match &f.value {
                        FieldExprValue::Value(e) => Value::from(e.source()),
                        FieldExprValue::Map(entries) => Value::Object(
                            entries
                                .iter()
                                .map(|(k, e)| (k.to_string(), Value::from(e.source())))
                                .collect(),
                        ),
                    };
                    fields.insert(f.name.to_string(), v);
                }
                let mut shown =
                    json!({"name": &*i.name, "template": i.template.name(), "fields": fields});
                if let Some(log) = &i.decision_log {
                    let names = |selectors: &[crate::AttributeSelector]| -> Vec<String> {
                        selectors
                            .iter()
                            .map(|s| {
                                let name = self.vocabulary.name(s.attr);
                                match &s.key {
                                    Some(key) => format!("{name}[{key}]"),
                                    None => name.to_string(),
                                }
                            })
                            .collect()
                    };
                    shown["template"] = Value::from(crate::DECISION_LOG_TEMPLATE);
                    shown["decisionLog"] = json!({
                        "percentSampled": log.percent_sampled,
                        "alwaysLogDenials": log.always_log_denials,
                        "drop": names(&log.drop),
                        "hash": names(&log.hash),
                    });
                }
                if !i.bindings.is_empty() {
                    let bindings: Map<String, Value> = i
                        .bindings
                        .iter()
                        .map(|b| (b.name.to_string(), Value::from(&*b.source)))
                        .collect();
                    shown["attributeBindings"] = Value::Object(bindings);
                }
                shown
            })
            .collect();
        let name_of = |list: &[&str], i: usize| list.get(i).map_or("?", |n| *n).to_string();
        let handler_names: Vec<&str> = self.handlers.iter().map(|h| &*h.name).collect();
        let instance_names: Vec<&str> = self.instances.iter().map(|i| &*i.name).collect();
        let rules: Vec<Value> = self
            .rules
            .iter()
            .map(|r| {
                let actions: Vec<Value> = r
                    .actions
                    .iter()
                    .map(|a| {
                        json!({
                            "name": a.name,
                            "handler": name_of(&handler_names, a.handler),
                            "instances": a.instances.iter().map(|i| name_of(&instance_names, *i)).collect::<Vec<_>>(),
                        })
                    })
                    .collect();
                let mut shown = json!({
                    "name": &*r.name,
                    "match": r.match_expr.as_ref().map(|e| e.source()),
                    "matchErrorPolicy": r.match_error_policy.map(|p| match p {
                        MatchErrorPolicy::NoMatch => "NO_MATCH",
                        MatchErrorPolicy::Deny => "DENY",
                    }),
                    "actions": actions,
                    "requestHeaderOperations": header_ops(&r.request_header_operations),
                    "responseHeaderOperations": header_ops(&r.response_header_operations),
                });
                // Shown only when set, so dumps of rules without them read as before.
                if r.dry_run {
                    shown["dryRun"] = Value::Bool(true);
                }
                if let Some(s) = &r.sampling {
                    shown["sampling"] = sampling(s);
                }
                shown
            })
            .collect();
        let standard = mixer_model::Vocabulary::istio();
        let attributes: Map<String, Value> = self
            .vocabulary
            .iter()
            .filter(|(_, a)| standard.lookup(&a.name).is_none())
            .map(|(_, a)| {
                (
                    a.name.to_string(),
                    Value::from(a.value_type.manifest_name()),
                )
            })
            .collect();
        json!({
            "defaultNamespace": &*self.default_namespace,
            "attributes": attributes,
            "handlers": handlers,
            "instances": instances,
            "rules": rules,
        })
    }
}

/// A rule's sampling as resolved: the percentage in parts per million.
fn sampling(s: &crate::model::SamplingConfig) -> Value {
    let mut shown = json!({});
    if let Some(r) = &s.random {
        shown["random"] = json!({
            "partsPerMillion": r.parts_per_million,
            "attributeExpression": r.attribute_expression.as_ref().map(|e| e.source()),
            "useIndependentRandomness": r.use_independent_randomness,
        });
    }
    if let Some(r) = &s.rate_limit {
        shown["rateLimit"] = json!({
            "samplingDuration": format!("{}s", r.sampling_duration.as_secs_f64()),
            "maxUnsampledEntries": r.max_unsampled_entries,
            "samplingRate": r.sampling_rate,
        });
    }
    shown
}

fn header_ops(ops: &[HeaderOperationConfig]) -> Vec<Value> {
    ops.iter()
        .map(|op| {
            json!({
                "name": op.name,
                "values": op.values.iter().map(|v| v.source()).collect::<Vec<_>>(),
                "operation": match op.operation {
                    HeaderOp::Replace => "REPLACE",
                    HeaderOp::Append => "APPEND",
                    HeaderOp::Remove => "REMOVE",
                },
            })
        })
        .collect()
}
