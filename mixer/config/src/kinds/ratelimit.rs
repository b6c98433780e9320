//! `ratelimitconfig` documents: envoyproxy/ratelimit's configuration format, translated at load
//! time into one handler, quota instances and rules.
//!
//! The document wraps an envoyproxy/ratelimit file as its `spec` (the file's text, indented):
//!
//! ```yaml
//! apiVersion: config.istio.io/v1alpha2
//! kind: ratelimitconfig
//! metadata: {name: edge, namespace: istio-system}
//! spec:
//!   domain: edge                     # required
//!   backend:                         # optional; default {adapter: memquota}
//!     adapter: redisquota
//!     params: {redisServerUrl: "redis:6379"}
//!   failPolicy: OPEN                 # optional: the handler's failPolicy
//!   descriptors:
//!   - key: remote_address
//!     rate_limit: {unit: second, requests_per_unit: 10}
//!   - key: remote_address
//!     value: 50.0.0.5
//!     rate_limit: {unit: second, requests_per_unit: 0}
//!   - key: message_type
//!     value: marketing
//!     descriptors:
//!     - key: to_number
//!       shadow_mode: true
//!       rate_limit: {unit: day, requests_per_unit: 5, name: marketing}
//! ```
//!
//! What it becomes (names from `metadata.name`, say `edge`, in the document's namespace):
//!
//! * **one handler** `edge`: the backend adapter. For `memquota` and `redisquota` its params
//!   are `backend.params` plus one entry per limit in `quotas`:
//!   `{name: <instance>.<namespace>, maxAmount: requests_per_unit, validDuration: 1s|60s|3600s|86400s|604800s, shadowMode}`
//!   (after any `quotas` written in `backend.params`). Other quota adapters get `backend.params`
//!   as written: the limits are then theirs to know.
//! * **one `quota` instance per descriptor with a `rate_limit`** (at any depth), named
//!   `edge-<key>[-<value>]-...` after its path, with one dimension per entry of the path:
//!   `<key>: ratelimit.descriptor["<key>"]` (so a key-only entry counts each value apart).
//! * **one rule per such descriptor**, sending that instance to the handler, whose match is
//!   made of literal tests only:
//!   `ratelimit.domain == "edge" && ratelimit.descriptor_keys == "message_type.to_number" &&
//!   ratelimit.descriptor["message_type"] == "marketing" && "to_number" in ratelimit.descriptor`.
//!   The rule index finds the candidate rules by looking those literals up, so the cost of a
//!   request does not grow with the number of limits.
//!
//! Matching follows envoyproxy/ratelimit: a request descriptor matches a config path of the
//! same length, level by level, preferring at each level an entry with that exact value, then
//! a wildcard value (`value: "prefix*"`, the first that matches), then the key-only entry. So a
//! key-only entry's rule excludes the values (and prefixes) its siblings with the same key
//! name, and a wildcard's excludes the exact values and the earlier wildcards.
//!
//! `rate_limit: {unlimited: true}` and descriptors without `rate_limit` produce no rule (the
//! descriptor is allowed). `detailed_metric` is accepted and has no effect. `replaces` is not
//! supported (an error). Units: `second`, `minute`, `hour`, `day`, `week` (any case); `month`
//! and `year` have no fixed length and are refused.
//!
//! Rules only see requests of their namespace's scope: the rate limit front end's requests
//! carry no namespace, so a `ratelimitconfig` outside the default namespace gets a warning.

mod descriptors;
mod naming;

use std::collections::HashSet;
use std::sync::Arc;

use mixer_adapter_api::{AdapterRegistry, FailPolicy};
use mixer_model::{Template, ValueType, Vocabulary};
use serde_json::{Map, Value};

use super::{Doc, parse_enum};
use crate::document::{as_map, check_keys, opt_string, type_name};
use crate::error::{Diagnostics, did_you_mean, join};
use crate::expr::{Expression, Syntax};
use crate::model::{
    ActionConfig, FieldExpr, FieldExprValue, HandlerConfig, InstanceConfig, MatchErrorPolicy,
    RuleConfig,
};
use descriptors::walk;
use naming::{match_source, quote, unique_name};

/// The backend adapter when `backend` is not given.
pub(crate) const DEFAULT_BACKEND: &str = "memquota";

/// Backends whose params take memquota's `quotas` list.
const QUOTA_PARAM_ADAPTERS: [&str; 2] = ["memquota", "redisquota"];

const SPEC_KEYS: &[&str] = &["domain", "descriptors", "backend", "failPolicy"];
/// What one `ratelimitconfig` document becomes.
pub(crate) struct Translated {
    pub handler: HandlerConfig,
    pub instances: Vec<InstanceConfig>,
    /// Rules; their one action's handler and instance indices are local (handler 0, and
    /// indices into `instances`): the caller shifts them.
    pub rules: Vec<RuleConfig>,
}

/// Validates and translates a `kind: ratelimitconfig` document.
pub(crate) fn ratelimit(
    doc: &Doc<'_>,
    registry: &AdapterRegistry,
    vocabulary: &Vocabulary,
    default_namespace: &str,
    diags: &mut Diagnostics,
) -> Option<Translated> {
    let raw = doc.raw;
    let before = diags.errors.len();
    let spec = as_map(&raw.spec, "spec", &raw.doc, diags)?;
    check_keys(&spec, SPEC_KEYS, "spec", &raw.doc, diags);
    let domain = opt_string(&spec, "domain", "spec", &raw.doc, diags);
    let domain = match domain {
        Some(d) if !d.is_empty() => Some(d),
        _ => {
            if !matches!(spec.get("domain"), Some(v) if !v.is_string() && !v.is_null()) {
                diags.error(&raw.doc, "spec.domain", "missing");
            }
            None
        }
    };
    let fail_policy = parse_enum(
        doc,
        spec.get("failPolicy"),
        "spec.failPolicy",
        &[("OPEN", FailPolicy::Open), ("CLOSED", FailPolicy::Closed)],
        diags,
    );
    let mut leaves = Vec::new();
    match spec.get("descriptors") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => walk(doc, list, "spec.descriptors", &[], &mut leaves, diags),
        Some(other) => diags.error(
            &raw.doc,
            "spec.descriptors",
            format!("expected a list, found {}", type_name(other)),
        ),
    }
    let (adapter, adapter_path, params) = backend(doc, &spec, diags)?;
    if raw.namespace != default_namespace {
        diags.warn(
            &raw.doc,
            "metadata.namespace",
            format!(
                "rules outside namespace {default_namespace} only apply to requests of namespace {}; rate limit service requests carry no namespace",
                raw.namespace
            ),
        );
    }
    if diags.errors.len() > before {
        return None;
    }
    let domain = domain?;

    let namespace: Arc<str> = Arc::from(raw.namespace.as_str());
    let mut names = HashSet::new();
    let mut instances = Vec::new();
    let mut rules = Vec::new();
    let mut quotas = Vec::new();
    for leaf in &leaves {
        let short = unique_name(&raw.name, &leaf.levels, &mut names);
        let full: Arc<str> = Arc::from(format!("{short}.{}", raw.namespace));
        let mut dimensions = Vec::new();
        for level in &leaf.levels {
            let source = format!("ratelimit.descriptor[{}]", quote(&level.key));
            let expr = compile(doc, &source, ValueType::String, vocabulary, diags)?;
            dimensions.push((Arc::from(level.key.as_str()), expr));
        }
        let source = match_source(&domain, &leaf.levels);
        let match_expr = compile(doc, &source, ValueType::Bool, vocabulary, diags)?;
        quotas.push(serde_json::json!({
            "name": full.as_ref(),
            "maxAmount": leaf.limit.requests_per_unit,
            "validDuration": leaf.limit.window,
            "shadowMode": leaf.limit.shadow,
        }));
        rules.push(RuleConfig {
            name: full.clone(),
            namespace: namespace.clone(),
            match_expr: Some(match_expr),
            // A request of the same shape always has the keys read; should one be missing
            // anyway, the rule does not apply, whatever the global policy says.
            match_error_policy: Some(MatchErrorPolicy::NoMatch),
            actions: vec![ActionConfig {
                handler: 0,
                instances: vec![instances.len()],
                name: None,
            }],
            request_header_operations: Vec::new(),
            response_header_operations: Vec::new(),
        });
        instances.push(InstanceConfig {
            name: full,
            namespace: namespace.clone(),
            template: Template::Quota,
            fields: vec![FieldExpr {
                name: "dimensions",
                value: FieldExprValue::Map(dimensions),
            }],
        });
    }

    let params = with_quotas(&adapter, params, quotas);
    if !check_backend(doc, registry, &adapter, &adapter_path, &params, diags) {
        return None;
    }
    Some(Translated {
        handler: HandlerConfig {
            name: Arc::from(format!("{}.{}", raw.name, raw.namespace)),
            namespace,
            adapter,
            params,
            connection: None,
            fail_policy,
            adapter_resource: None,
            file: raw.doc.file.clone(),
        },
        instances,
        rules,
    })
}

/// `(adapter, field path of the adapter, params)` from `spec.backend`.
fn backend(
    doc: &Doc<'_>,
    spec: &Map<String, Value>,
    diags: &mut Diagnostics,
) -> Option<(String, String, Value)> {
    let raw = doc.raw;
    let Some(value) = spec.get("backend").filter(|v| !v.is_null()) else {
        return Some((DEFAULT_BACKEND.to_string(), "spec".to_string(), Value::Null));
    };
    let map = as_map(value, "spec.backend", &raw.doc, diags)?;
    check_keys(
        &map,
        &["adapter", "params"],
        "spec.backend",
        &raw.doc,
        diags,
    );
    let adapter = opt_string(&map, "adapter", "spec.backend", &raw.doc, diags)
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| DEFAULT_BACKEND.to_string());
    let params = map.get("params").cloned().unwrap_or(Value::Null);
    if !matches!(params, Value::Object(_) | Value::Null) {
        diags.error(
            &raw.doc,
            "spec.backend.params",
            format!("expected a mapping, found {}", type_name(&params)),
        );
        return None;
    }
    Some((adapter, "spec.backend.adapter".to_string(), params))
}

/// Adds the generated quotas to the params of a backend that takes them.
fn with_quotas(adapter: &str, params: Value, generated: Vec<Value>) -> Value {
    if !QUOTA_PARAM_ADAPTERS.contains(&adapter) {
        return params;
    }
    let mut map = match params {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    let mut quotas = match map.remove("quotas") {
        Some(Value::Array(q)) => q,
        _ => Vec::new(),
    };
    quotas.extend(generated);
    map.insert("quotas".to_string(), Value::Array(quotas));
    Value::Object(map)
}

/// The backend must be registered, take quota instances and accept the params.
fn check_backend(
    doc: &Doc<'_>,
    registry: &AdapterRegistry,
    name: &str,
    field: &str,
    params: &Value,
    diags: &mut Diagnostics,
) -> bool {
    let raw = doc.raw;
    let Some(adapter) = registry.get(name) else {
        let hint = did_you_mean(name, registry.names());
        let known: Vec<&str> = registry.names().collect();
        let what = if field == "spec" {
            format!("the default backend adapter {name:?} is not available in this mixer")
        } else {
            format!("unknown adapter {name:?}")
        };
        let message = if hint.is_empty() {
            format!(
                "{what} (known adapters: {}; choose one with backend.adapter)",
                known.join(", ")
            )
        } else {
            format!("{what}{hint}")
        };
        diags.error(&raw.doc, field, message);
        return false;
    };
    if !adapter.info().templates.contains(&Template::Quota) {
        diags.error(
            &raw.doc,
            field,
            format!("adapter {name:?} does not take quota instances"),
        );
        return false;
    }
    match adapter.validate(params) {
        Ok(()) => true,
        Err(errors) => {
            for e in errors {
                diags.error(&raw.doc, join("spec.backend.params", &e.path), e.message);
            }
            false
        }
    }
}

fn compile(
    doc: &Doc<'_>,
    source: &str,
    ty: ValueType,
    vocabulary: &Vocabulary,
    diags: &mut Diagnostics,
) -> Option<Expression> {
    match Expression::compile_expecting(source, Syntax::Cel, vocabulary, ty) {
        Ok(e) => Some(e),
        Err(e) => {
            // Only when the vocabulary lost the ratelimit attributes (a manifest redeclared
            // them with other types) or a value defeats the quoting.
            diags.error(
                &doc.raw.doc,
                "spec",
                format!(
                    "generated expression {source} does not compile: {}",
                    e.message
                ),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests;
