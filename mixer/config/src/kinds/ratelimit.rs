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
//! Wildcards may stand anywhere in a value (`bar*b`, `foo*bar*baz`): a trailing one becomes
//! `startsWith`, others an anchored regular expression compiled with the config. With
//! `share_threshold: true` every value a wildcard matches counts on one counter (the dimension
//! is the pattern). Descriptors without `rate_limit` produce no rule (the descriptor is allowed).
//! `rate_limit: {unlimited: true}` produces a rule whose instance no handler is asked about (the
//! front end answers OK, as envoyproxy/ratelimit does) and no quota. `rate_limit.name`,
//! `replaces`, `unlimited` and `quota_mode` go to [`Config::rate_limits`](crate::Config) for the
//! rate limit front end; `shadow_mode` becomes the quota's `shadowMode`; `detailed_metric` and
//! `value_to_metric` only name envoyproxy/ratelimit's own statistics and `metadata` is only
//! sent back when its `RESPONSE_DYNAMIC_METADATA` is set: accepted, without effect. Units:
//! `second`, `minute`, `hour`, `day`, `week` (any case); `month` and `year` have no fixed
//! length and are refused.
//!
//! A bare envoyproxy/ratelimit file (top level `domain:` and `descriptors:`, as that service
//! reads from its runtime directory) is read as such a document, unchanged: named after its
//! domain, in the default namespace, with field paths from the file's top, and counted by the
//! backend [`ConfigOptions::ratelimit_backend`](crate::ConfigOptions) names (by default the
//! only memquota or redisquota handler of the config, or an in-memory memquota). Two files of
//! one domain are refused, as envoyproxy/ratelimit refuses them.
//!
//! Rules only see requests of their namespace's scope: the rate limit front end's requests
//! carry no namespace, so a `ratelimitconfig` outside the default namespace gets a warning.

mod descriptors;
mod naming;

use std::collections::HashSet;
use std::sync::Arc;

use mixer_adapter_api::host::{CompiledConfig, FailPolicy};
use mixer_adapter_api::secrets::Redactor;
use mixer_model::{Template, ValueType, Vocabulary};
use serde_json::{Map, Value};

use super::{Doc, parse_enum};
use crate::document::{as_map, check_keys, opt_string, type_name};
use crate::error::{Diagnostics, did_you_mean, join};
use crate::expr::{Expression, Syntax};
use crate::model::{
    ActionConfig, FieldExpr, FieldExprValue, HandlerConfig, InstanceConfig, MatchErrorPolicy,
    RateLimitBehaviour, RuleConfig,
};
use crate::registry::AdapterRegistry;
use descriptors::walk;
use naming::{match_source, quote, unique_name};

/// The backend adapter when `backend` is not given.
pub(crate) const DEFAULT_BACKEND: &str = "memquota";

/// Backends whose params take memquota's `quotas` list.
pub(crate) const QUOTA_PARAM_ADAPTERS: [&str; 2] = ["memquota", "redisquota"];

const SPEC_KEYS: &[&str] = &["domain", "descriptors", "backend", "failPolicy"];
/// The top level of a bare envoyproxy/ratelimit file.
const FILE_KEYS: &[&str] = &["domain", "descriptors"];

/// What one `ratelimitconfig` document becomes.
pub(crate) struct Translated {
    pub handler: HandlerConfig,
    pub instances: Vec<InstanceConfig>,
    /// Rules; their one action's handler and instance indices are local (handler 0, and
    /// indices into `instances`): the caller shifts them.
    pub rules: Vec<RuleConfig>,
    /// What envoyproxy/ratelimit does beyond counting, by local instance index.
    pub behaviours: Vec<RateLimitBehaviour>,
}

/// The quota backend of a bare envoyproxy/ratelimit file, taken from a handler of the config.
pub(crate) struct Backend {
    /// The handler's full name, for messages.
    pub handler: String,
    pub adapter: String,
    /// Its params without their `quotas`.
    pub params: Value,
    pub fail_policy: Option<FailPolicy>,
}

/// Validates and translates a `kind: ratelimitconfig` document, or a bare envoyproxy/ratelimit
/// file (then with `backend` chosen by the caller, `None` for the default memquota, and field
/// paths from the file's top).
pub(crate) fn ratelimit(
    doc: &Doc<'_>,
    registry: &AdapterRegistry,
    vocabulary: &Vocabulary,
    default_namespace: &str,
    file_backend: Option<&Backend>,
    diags: &mut Diagnostics,
) -> Option<Translated> {
    let raw = doc.raw;
    let root = if raw.envoy_ratelimit { "" } else { "spec" };
    let before = diags.errors.len();
    let spec = as_map(&raw.spec, "spec", &raw.doc, diags)?;
    let keys = if raw.envoy_ratelimit {
        FILE_KEYS
    } else {
        SPEC_KEYS
    };
    check_keys(&spec, keys, root, &raw.doc, diags);
    let domain_path = join(root, "domain");
    let domain = opt_string(&spec, "domain", root, &raw.doc, diags);
    let domain = match domain {
        Some(d) if !d.is_empty() => Some(d),
        _ => {
            if !matches!(spec.get("domain"), Some(v) if !v.is_string() && !v.is_null()) {
                diags.error(&raw.doc, &domain_path, "missing");
            }
            None
        }
    };
    let fail_policy = if raw.envoy_ratelimit {
        file_backend.and_then(|b| b.fail_policy)
    } else {
        parse_enum(
            doc,
            spec.get("failPolicy"),
            "spec.failPolicy",
            &[("OPEN", FailPolicy::Open), ("CLOSED", FailPolicy::Closed)],
            diags,
        )
    };
    let mut leaves = Vec::new();
    let descriptors_path = join(root, "descriptors");
    match spec.get("descriptors") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => walk(doc, list, &descriptors_path, &[], &mut leaves, diags),
        Some(other) => diags.error(
            &raw.doc,
            &descriptors_path,
            format!("expected a list, found {}", type_name(other)),
        ),
    }
    let (adapter, adapter_path, params) = match (raw.envoy_ratelimit, file_backend) {
        (true, Some(b)) => (b.adapter.clone(), String::new(), b.params.clone()),
        (true, None) => (DEFAULT_BACKEND.to_string(), String::new(), Value::Null),
        (false, _) => backend(doc, &spec, diags)?,
    };
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
    let mut behaviours = Vec::new();
    for leaf in &leaves {
        let short = unique_name(&raw.name, &leaf.levels, &mut names);
        let full = crate::document::full_name(&short, "instance", &raw.namespace);
        let rule_name = crate::document::full_name(&short, "rule", &raw.namespace);
        let mut dimensions = Vec::new();
        for level in &leaf.levels {
            // A shared wildcard counts every value it matches together.
            let source = match &level.shared {
                Some(pattern) => quote(pattern),
                None => format!("ratelimit.descriptor[{}]", quote(&level.key)),
            };
            let expr = compile(doc, &source, ValueType::String, vocabulary, diags)?;
            dimensions.push((Arc::from(level.key.as_str()), expr));
        }
        let source = match_source(&domain, &leaf.levels);
        let match_expr = compile(doc, &source, ValueType::Bool, vocabulary, diags)?;
        // An unlimited limit is never counted, so its backend needs no quota for it.
        if let Some((requests_per_unit, window)) = leaf.limit.counted {
            quotas.push(serde_json::json!({
                "name": full.as_ref(),
                "maxAmount": requests_per_unit,
                "validDuration": window,
                "shadowMode": leaf.limit.shadow,
            }));
        }
        behaviours.push(RateLimitBehaviour {
            instance: instances.len(),
            name: leaf.limit.name.clone(),
            replaces: leaf.limit.replaces.clone(),
            unlimited: leaf.limit.counted.is_none(),
            quota_mode: leaf.limit.quota_mode,
        });
        rules.push(RuleConfig {
            name: rule_name,
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
            dry_run: false,
            sampling: None,
        });
        instances.push(InstanceConfig {
            name: full,
            namespace: namespace.clone(),
            template: Template::Quota,
            fields: vec![FieldExpr {
                name: "dimensions",
                value: FieldExprValue::Map(dimensions),
            }],
            bindings: Vec::new(),
            decision_log: None,
        });
    }

    let params_path = match (raw.envoy_ratelimit, file_backend) {
        (false, _) => "spec.backend.params".to_string(),
        (true, _) => String::new(),
    };
    let declared = registry
        .get(&adapter)
        .map_or(&[][..], |a| a.secret_params());
    // A file backend's params are those of a handler, resolved already.
    let params = if raw.envoy_ratelimit {
        params
    } else {
        crate::secrets::resolve(&raw.doc, &params, &params_path, declared, diags)?.params
    };
    let params = with_quotas(&adapter, params, quotas);
    let redactor = Redactor::new(&params, declared);
    let before = diags.errors.len();
    let compiled = check_backend(
        doc,
        registry,
        &adapter,
        &adapter_path,
        &params_path,
        file_backend,
        &params,
        diags,
    );
    crate::secrets::scrub_errors(&redactor, diags, before);
    let compiled = compiled?;
    let hashed_params = redactor.params();
    Some(Translated {
        handler: HandlerConfig {
            name: raw.full_name(),
            namespace,
            adapter,
            params,
            redactor,
            connection: None,
            fail_policy,
            adapter_resource: None,
            compiled: Some(compiled),
            // Quota backends read no files beyond the config's.
            inputs: Vec::new(),
            hashed_params,
            file: raw.doc.file.clone(),
        },
        instances,
        rules,
        behaviours,
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

/// The backend must be registered, take quota instances and accept the params; returns
/// them compiled.
#[allow(clippy::too_many_arguments)]
fn check_backend(
    doc: &Doc<'_>,
    registry: &AdapterRegistry,
    name: &str,
    field: &str,
    params_path: &str,
    file_backend: Option<&Backend>,
    params: &Value,
    diags: &mut Diagnostics,
) -> Option<CompiledConfig> {
    let raw = doc.raw;
    let Some(adapter) = registry.get(name) else {
        let hint = did_you_mean(name, registry.names());
        let known: Vec<&str> = registry.names().collect();
        let what = if field == "spec" || field.is_empty() {
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
        return None;
    };
    if !adapter.info().templates.contains(&Template::Quota) {
        diags.error(
            &raw.doc,
            field,
            format!("adapter {name:?} does not take quota instances"),
        );
        return None;
    }
    match adapter.compile(params) {
        Ok(compiled) => Some(compiled),
        Err(errors) => {
            for e in errors {
                let message = match file_backend {
                    Some(b) => format!(
                        "the params of backend handler {} with this file's limits: {}: {}",
                        b.handler, e.path, e.message
                    ),
                    None => e.message,
                };
                diags.error(&raw.doc, join(params_path, &e.path), message);
            }
            None
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
                if doc.raw.envoy_ratelimit { "" } else { "spec" },
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
