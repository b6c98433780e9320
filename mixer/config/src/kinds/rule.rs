//! `rule` documents: match, actions (resolved to handlers and instances) and header edits.

use std::sync::Arc;

use mixer_model::{Template, ValueType, Variety, Vocabulary};
use serde_json::Value;

use super::headers::header_ops;
use super::{Doc, compile_leaf, parse_enum};
use crate::document::{as_map, check_keys, list, opt_string, type_name};
use crate::error::{Diagnostics, did_you_mean, index, join};
use crate::model::{
    ActionConfig, HandlerConfig, HeaderOperationConfig, InstanceConfig, MatchErrorPolicy,
    RuleConfig,
};
use crate::registry::AdapterRegistry;
use crate::resolve::{Resolution, Table};

/// What rules are resolved against.
pub(crate) struct Scope<'a> {
    pub vocabulary: &'a Vocabulary,
    pub registry: &'a AdapterRegistry,
    pub default_namespace: &'a str,
    pub handlers: &'a [HandlerConfig],
    pub handler_table: &'a Table,
    pub instances: &'a [InstanceConfig],
    pub instance_table: &'a Table,
    /// Instances sent to out-of-process handlers, checked once their adapters say which
    /// templates they serve.
    pub remote_routes: std::cell::RefCell<Vec<RemoteRoute>>,
}

/// An instance a rule sends to a remote handler, where the rule says so: checked against the
/// templates the adapter turns out to serve.
#[derive(Clone, Debug)]
pub(crate) struct RemoteRoute {
    pub doc: crate::error::DocRef,
    /// `spec.actions[i].instances[j]`.
    pub path: String,
    pub handler: usize,
    pub instance: usize,
}

/// Validates a `kind: rule` document.
pub(crate) fn rule(
    doc: &Doc<'_>,
    scope: &Scope<'_>,
    diags: &mut Diagnostics,
) -> Option<RuleConfig> {
    let raw = doc.raw;
    let before = diags.errors.len();
    let spec = as_map(&raw.spec, "spec", &raw.doc, diags)?;
    check_keys(
        &spec,
        &[
            "match",
            "actions",
            "requestHeaderOperations",
            "responseHeaderOperations",
            "matchErrorPolicy",
            "sampling",
        ],
        "spec",
        &raw.doc,
        diags,
    );
    let sampling = match spec.get("sampling") {
        None | Some(Value::Null) => None,
        Some(v) => super::sampling::sampling(doc, v, scope.vocabulary, diags),
    };
    let dry_run = dry_run(doc, diags);
    let match_error_policy = parse_enum(
        doc,
        spec.get("matchErrorPolicy"),
        "spec.matchErrorPolicy",
        &[
            ("NO_MATCH", MatchErrorPolicy::NoMatch),
            ("DENY", MatchErrorPolicy::Deny),
        ],
        diags,
    );
    let match_expr = match spec.get("match") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(v) => compile_leaf(
            doc,
            v,
            "spec.match",
            Some(ValueType::Bool),
            scope.vocabulary,
            diags,
        ),
    };
    if let Some(expr) = &match_expr
        && match_error_policy.is_none()
    {
        for risk in expr.absent_failure_risks() {
            diags.warn(
                &raw.doc,
                "spec.match",
                format!(
                    "can fail when {risk} is absent; Istio treats that as no match (add a \"|\" default or set matchErrorPolicy)"
                ),
            );
        }
    }
    let written = list(spec.get("actions"), "spec.actions", &raw.doc, diags);
    let mut actions = Vec::new();
    let mut needed = Vec::new();
    let mut left_out = Vec::new();
    for (i, a) in written.iter().enumerate() {
        let path = index("spec.actions", i);
        match action(doc, scope, a, &path, diags) {
            Action::Kept(a) => actions.push(a),
            Action::Dropped(documents) => {
                left_out.push((path, documents.join(", ")));
                needed.extend(documents);
            }
            Action::Invalid => {}
        }
    }
    let request_header_operations = header_ops(
        doc,
        scope.vocabulary,
        &spec,
        "requestHeaderOperations",
        diags,
    );
    let response_header_operations = header_ops(
        doc,
        scope.vocabulary,
        &spec,
        "responseHeaderOperations",
        diags,
    );
    mixes_decision_log(
        doc,
        scope,
        &actions,
        &request_header_operations,
        &response_header_operations,
        diags,
    );
    if diags.errors.len() > before {
        return None;
    }
    // Istio 1.4 elides a rule whose every action was elided, unless it edits headers.
    if !written.is_empty()
        && actions.is_empty()
        && request_header_operations.is_empty()
        && response_header_operations.is_empty()
    {
        needed.dedup();
        diags.dependent(&raw.doc, needed);
        return None;
    }
    for (path, documents) in left_out {
        diags.warn(
            &raw.doc,
            path,
            format!("action left out: it needs dropped {documents}"),
        );
    }
    let varieties: Vec<Variety> = actions
        .iter()
        .flat_map(|a| &a.instances)
        .filter_map(|&i| scope.instances.get(i))
        .map(|i| i.template.variety())
        .collect();
    let enforcing = |v: &Variety| matches!(v, Variety::Check | Variety::Quota);
    if refuses_report_charges(doc, scope, &actions, sampling.is_some(), dry_run, diags) {
        return None;
    }
    // Istio 1.4 read `sampling` and never applied it; sampling a check or a quota would let
    // requests through unchecked, so only report actions are sampled.
    if sampling.is_some() && varieties.iter().any(enforcing) {
        diags.warn(
            &raw.doc,
            "spec.sampling",
            "sampling applies to report actions only: check and quota actions see every request",
        );
    }
    if dry_run && !varieties.iter().any(enforcing) {
        diags.warn(
            &raw.doc,
            format!("metadata.annotations[{DRY_RUN_ANNOTATION:?}]"),
            "dry-run applies to check and quota actions; this rule's report actions are sent as usual",
        );
    }
    Some(RuleConfig {
        name: raw.full_name(),
        namespace: Arc::from(raw.namespace.as_str()),
        match_expr,
        match_error_policy,
        actions,
        request_header_operations,
        response_header_operations,
        dry_run,
        sampling,
    })
}

/// Refuses (true, with an error each) a sampled or dry-run rule that holds a quota instance
/// charged from reports. Sampling those reports charges only the sampled ones' usage, so the
/// limit lets through more than it says; a dry-run rule would spend real quota that the
/// enforcing rules count. Serving either would open what the config closes, so neither is.
fn refuses_report_charges(
    doc: &Doc<'_>,
    scope: &Scope<'_>,
    actions: &[ActionConfig],
    sampled: bool,
    dry_run: bool,
    diags: &mut Diagnostics,
) -> bool {
    if !sampled && !dry_run {
        return false;
    }
    let charged: Vec<&str> = actions
        .iter()
        .flat_map(|a| &a.instances)
        .filter_map(|&i| scope.instances.get(i))
        .filter(|i| i.charged_by_reports())
        .map(|i| i.name.as_ref())
        .collect();
    for name in &charged {
        if sampled {
            diags.error(
                &doc.raw.doc,
                "spec.sampling",
                format!(
                    "quota instance {name} is charged from reports (its `charge`): sampling \
                     would charge only the sampled reports' usage and under-count it; put the \
                     charged instance on a rule without sampling"
                ),
            );
        }
        if dry_run {
            diags.error(
                &doc.raw.doc,
                format!("metadata.annotations[{DRY_RUN_ANNOTATION:?}]"),
                format!(
                    "quota instance {name} is charged from reports (its `charge`): a dry-run \
                     rule would spend real quota; take the charged instance off this rule or \
                     the annotation off it"
                ),
            );
        }
    }
    !charged.is_empty()
}

/// The annotation that marks a rule as not enforced (dry-run), `"true"` or `"false"`: the
/// one Istio puts on an `AuthorizationPolicy` for the same purpose, so a rule keeps Istio
/// 1.4's spec shape and an Istio-shaped schema accepts it.
pub const DRY_RUN_ANNOTATION: &str = "istio.io/dry-run";

/// Whether the rule is annotated dry-run; a value other than true or false is an error, as a
/// typo must not silently enforce (or not enforce) a rule.
fn dry_run(doc: &Doc<'_>, diags: &mut Diagnostics) -> bool {
    match doc
        .raw
        .annotations
        .get(DRY_RUN_ANNOTATION)
        .map(|v| v.trim())
    {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(v) => {
            diags.error(
                &doc.raw.doc,
                format!("metadata.annotations[{DRY_RUN_ANNOTATION:?}]"),
                format!("expected \"true\" or \"false\", found {v:?}"),
            );
            false
        }
    }
}

/// What became of one action.
enum Action {
    Kept(ActionConfig),
    /// Left out because its handler, or every one of its instances, was dropped (their full
    /// names).
    Dropped(Vec<String>),
    /// It has errors (reported).
    Invalid,
}

fn action(
    doc: &Doc<'_>,
    scope: &Scope<'_>,
    value: &Value,
    path: &str,
    diags: &mut Diagnostics,
) -> Action {
    let raw = doc.raw;
    let Some(map) = as_map(value, path, &raw.doc, diags) else {
        return Action::Invalid;
    };
    check_keys(
        &map,
        &["handler", "instances", "name"],
        path,
        &raw.doc,
        diags,
    );
    let name = opt_string(&map, "name", path, &raw.doc, diags);
    let handler_ref = opt_string(&map, "handler", path, &raw.doc, diags);
    let mut dropped = Vec::new();
    let handler = match handler_ref.as_deref() {
        None | Some("") => {
            if !matches!(map.get("handler"), Some(v) if !v.is_string() && !v.is_null()) {
                diags.error(&raw.doc, join(path, "handler"), "missing");
            }
            Err(None)
        }
        Some(r) => lookup(
            doc,
            scope,
            scope.handler_table,
            "handler",
            r,
            &join(path, "handler"),
            diags,
        ),
    };
    let instances_path = join(path, "instances");
    let items = list(map.get("instances"), &instances_path, &raw.doc, diags);
    if items.is_empty()
        && map
            .get("instances")
            .is_none_or(|v| v.is_array() || v.is_null())
    {
        diags.error(
            &raw.doc,
            &instances_path,
            "an action needs at least one instance",
        );
    }
    let mut instances = Vec::new();
    let mut ok = match &handler {
        Ok(_) => true,
        Err(Some(document)) => {
            dropped.push(document.clone());
            true
        }
        Err(None) => false,
    };
    let handler = handler.ok();
    for (j, item) in items.iter().enumerate() {
        let here = index(&instances_path, j);
        let Value::String(r) = item else {
            diags.error(
                &raw.doc,
                here,
                format!("expected an instance name, found {}", type_name(item)),
            );
            ok = false;
            continue;
        };
        let i = match lookup(
            doc,
            scope,
            scope.instance_table,
            "instance",
            r,
            &here,
            diags,
        ) {
            Ok(i) => i,
            // Istio 1.4 leaves the instance out of the action and keeps the rest.
            Err(Some(document)) => {
                if handler.is_some() {
                    diags.warn(
                        &raw.doc,
                        here,
                        format!("instance left out of the action: {document} was dropped"),
                    );
                }
                dropped.push(document);
                continue;
            }
            Err(None) => {
                ok = false;
                continue;
            }
        };
        if let Some(h) = handler.and_then(|h| scope.handlers.get(h))
            && let Some(supported) = supported_templates(h, scope)
            && let Some(inst) = scope.instances.get(i)
            && !supported.contains(&inst.template)
        {
            let names: Vec<&str> = supported.iter().map(|t| t.name()).collect();
            let names = if names.is_empty() {
                "no template".to_string()
            } else {
                names.join(", ")
            };
            diags.error(
                &raw.doc,
                here,
                format!(
                    "instance {} is of template {}, which handler {} (adapter {}) does not support (it supports {})",
                    inst.name,
                    written_template(inst),
                    h.name,
                    h.adapter,
                    names
                ),
            );
            ok = false;
            continue;
        }
        if let Some(h) = handler
            && scope.handlers.get(h).is_some_and(HandlerConfig::is_remote)
        {
            scope.remote_routes.borrow_mut().push(RemoteRoute {
                doc: raw.doc.clone(),
                path: here.clone(),
                handler: h,
                instance: i,
            });
        }
        instances.push(i);
    }
    if !ok {
        return Action::Invalid;
    }
    match handler {
        Some(handler) if !instances.is_empty() || items.is_empty() => Action::Kept(ActionConfig {
            handler,
            instances,
            name,
        }),
        _ => Action::Dropped(dropped),
    }
}

/// A rule that sends a `decisionlog` instance logs decisions once they are made: it can take
/// no part in making them, so it sends nothing else and edits no header.
fn mixes_decision_log(
    doc: &Doc<'_>,
    scope: &Scope<'_>,
    actions: &[ActionConfig],
    request_ops: &[HeaderOperationConfig],
    response_ops: &[HeaderOperationConfig],
    diags: &mut Diagnostics,
) {
    let logs = |i: &usize| {
        scope
            .instances
            .get(*i)
            .is_some_and(|ic| ic.decision_log.is_some())
    };
    let all: Vec<&usize> = actions.iter().flat_map(|a| &a.instances).collect();
    let logging = all.iter().filter(|i| logs(i)).count();
    if logging == 0 {
        return;
    }
    if logging < all.len() || !request_ops.is_empty() || !response_ops.is_empty() {
        diags.error(
            &doc.raw.doc,
            "spec.actions",
            "a rule that sends a decisionlog instance sends nothing else and edits no header: decisions are logged after they are made (give the other instances their own rule)",
        );
    }
}

/// The template an instance is written with: `decisionlog` for a decision log instance
/// (which travels as a `logentry`).
fn written_template(instance: &crate::model::InstanceConfig) -> &'static str {
    if instance.decision_log.is_some() {
        crate::kinds::decision_log::DECISION_LOG_TEMPLATE
    } else {
        instance.template.name()
    }
}

/// The templates a handler's adapter declares: a built-in adapter's own list, or an `adapter`
/// document's for a remote handler; `None` when nothing is declared (a remote adapter is
/// asked what it serves, through gRPC server reflection, once rules are resolved). An adapter whose handlers'
/// templates depend on their params (a Wasm plugin's module) says them for these params.
fn supported_templates<'s>(
    h: &'s HandlerConfig,
    scope: &Scope<'s>,
) -> Option<std::borrow::Cow<'s, [Template]>> {
    match &h.adapter_resource {
        Some(resource) => Some(std::borrow::Cow::Borrowed(&resource.templates)),
        None if h.is_remote() => None,
        None => scope.registry.get(&h.adapter).map(|a| match &h.compiled {
            Some(config) => std::borrow::Cow::Owned(a.templates_of(config)),
            None => std::borrow::Cow::Borrowed(a.info().templates),
        }),
    }
}

/// Resolves a reference, reporting unknown names: `Err(None)` then; `Err(Some(full name))`
/// for a target that is invalid or dropped (its own errors are reported with it).
fn lookup(
    doc: &Doc<'_>,
    scope: &Scope<'_>,
    table: &Table,
    what: &str,
    reference: &str,
    path: &str,
    diags: &mut Diagnostics,
) -> Result<usize, Option<String>> {
    match table.resolve(reference, &doc.raw.namespace, scope.default_namespace) {
        Resolution::Found(i) => Ok(i),
        Resolution::Invalid(document) => Err(Some(document)),
        Resolution::NotFound => {
            let elsewhere = table.same_name_elsewhere(reference);
            let hint = if let Some(found) = elsewhere.first() {
                format!(" (did you mean {found}?)")
            } else {
                let candidates = table.candidates(&doc.raw.namespace);
                did_you_mean(reference, candidates.iter().map(String::as_str))
            };
            let message = if !hint.is_empty() {
                format!("unknown {what} {reference:?}{hint}")
            } else if doc.raw.namespace == scope.default_namespace || reference.contains('.') {
                format!("unknown {what} {reference:?}: no {what} by that name")
            } else {
                format!(
                    "unknown {what} {reference:?}: no {what} by that name in namespace {} or {}",
                    doc.raw.namespace, scope.default_namespace
                )
            };
            diags.error(&doc.raw.doc, path, message);
            Err(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{errors, ok};
    use crate::model::MatchErrorPolicy;
    use mixer_model::HeaderOp;

    const BASE: &str = "kind: handler\nmetadata: {name: denyall}\nspec: {compiledAdapter: denier}\n---\nkind: handler\nmetadata: {name: nothing-h, namespace: team}\nspec: {compiledAdapter: noop}\n---\nkind: instance\nmetadata: {name: nothing}\nspec: {compiledTemplate: checknothing}\n---\nkind: instance\nmetadata: {name: span, namespace: team}\nspec: {compiledTemplate: tracespan, params: {spanName: request.path}}\n---\n";

    fn with_base(rule: &str) -> String {
        format!("{BASE}{rule}")
    }

    #[test]
    fn actions_resolve_to_indices() {
        let v = ok(&with_base(
            "kind: rule\nmetadata: {name: r, namespace: team}\nspec:\n  match: source.namespace == \"bad\"\n  matchErrorPolicy: DENY\n  actions:\n  - {handler: denyall, instances: [nothing.istio-system]}\n  - {handler: nothing-h.handler, instances: [span, nothing.instance.istio-system], name: a2}\n",
        ));
        let r = &v.config.rules[0];
        assert_eq!(&*r.name, "r.rule.team");
        assert_eq!(r.match_error_policy, Some(MatchErrorPolicy::Deny));
        assert_eq!(
            r.match_expr.as_ref().map(|e| e.source()),
            Some("source.namespace == \"bad\"")
        );
        assert_eq!(r.actions[0].handler, 0);
        assert_eq!(r.actions[0].instances, [0]);
        assert_eq!(r.actions[1].handler, 1);
        assert_eq!(r.actions[1].instances, [1, 0]);
        assert_eq!(r.actions[1].name.as_deref(), Some("a2"));
        let dump = v.config.dump();
        assert_eq!(
            dump["rules"][0]["actions"][1]["handler"],
            "nothing-h.handler.team"
        );
        assert_eq!(
            dump["rules"][0]["actions"][1]["instances"][0],
            "span.instance.team"
        );
    }

    #[test]
    fn empty_match_means_always() {
        let v = ok(&with_base(
            "kind: rule\nmetadata: {name: r}\nspec:\n  match: \"\"\n  actions: [{handler: denyall, instances: [nothing]}]\n",
        ));
        assert!(v.config.rules[0].match_expr.is_none());
        let v = ok(&with_base(
            "kind: rule\nmetadata: {name: r}\nspec:\n  actions: [{handler: denyall, instances: [nothing]}]\n",
        ));
        assert!(v.config.rules[0].match_expr.is_none());
    }

    #[test]
    fn unknown_references_and_unsupported_templates() {
        assert_eq!(
            errors(&with_base(
                "kind: rule\nmetadata: {name: r}\nspec:\n  actions:\n  - {handler: denyal, instances: [nothin, span]}\n"
            )),
            [
                "c.yaml: rule r: spec.actions[0].handler: unknown handler \"denyal\" (did you mean denyall?)",
                "c.yaml: rule r: spec.actions[0].instances[0]: unknown instance \"nothin\" (did you mean nothing?)",
                "c.yaml: rule r: spec.actions[0].instances[1]: unknown instance \"span\" (did you mean span.team?)",
            ]
        );
        assert_eq!(
            errors(&with_base(
                "kind: rule\nmetadata: {name: r}\nspec:\n  actions:\n  - {handler: denyall, instances: [span.team]}\n"
            )),
            [
                "c.yaml: rule r: spec.actions[0].instances[0]: instance span.instance.team is of template tracespan, which handler denyall.handler.istio-system (adapter denier) does not support (it supports checknothing, listentry, quota)"
            ]
        );
        assert_eq!(
            errors(&with_base(
                "kind: rule\nmetadata: {name: r}\nspec:\n  actions:\n  - {handler: denyall}\n"
            )),
            ["c.yaml: rule r: spec.actions[0].instances: an action needs at least one instance"]
        );
    }

    #[test]
    fn references_to_broken_documents_do_not_cascade() {
        let e = errors(
            "kind: handler\nmetadata: {name: h}\nspec: {compiledAdapter: denier, params: {status: {code: 99}}}\n---\nkind: rule\nmetadata: {name: r}\nspec:\n  actions: [{handler: h, instances: [i]}]\n---\nkind: instance\nmetadata: {name: i}\nspec: {compiledTemplate: nope}\n",
        );
        assert_eq!(e.len(), 2, "{e:#?}");
    }

    #[test]
    fn header_operations() {
        let v = ok(&with_base(
            "kind: rule\nmetadata: {name: r}\nspec:\n  requestHeaderOperations:\n  - {name: x-user, values: [source.principal]}\n  - {name: x-old, operation: REMOVE}\n  responseHeaderOperations:\n  - {name: x-seen, values: ['\"yes\"'], operation: APPEND}\n",
        ));
        let r = &v.config.rules[0];
        assert_eq!(r.request_header_operations.len(), 2);
        assert_eq!(r.request_header_operations[0].operation, HeaderOp::Replace);
        assert_eq!(r.request_header_operations[1].operation, HeaderOp::Remove);
        assert_eq!(r.response_header_operations[0].operation, HeaderOp::Append);
        assert_eq!(
            r.response_header_operations[0].values[0].source(),
            "\"yes\""
        );
        assert_eq!(
            errors(
                "kind: rule\nmetadata: {name: r}\nspec:\n  requestHeaderOperations:\n  - {name: 'bad header', values: [source.principal], operation: DELETE}\n  - {name: x, values: []}\n  - {name: x-y, values: [source.principal], operation: REMOVE}\n"
            ),
            [
                "c.yaml: rule r: spec.requestHeaderOperations[0].name: \"bad header\" is not a valid header name",
                "c.yaml: rule r: spec.requestHeaderOperations[0].operation: unknown value \"DELETE\" (expected one of REPLACE, APPEND, REMOVE)",
                "c.yaml: rule r: spec.requestHeaderOperations[1].values: needs at least one value expression",
                "c.yaml: rule r: spec.requestHeaderOperations[2].values: REMOVE takes no values",
            ]
        );
    }

    #[test]
    fn unsupported_and_unknown_fields() {
        assert_eq!(
            errors(
                "kind: rule\nmetadata: {name: r}\nspec:\n  sampling: {random: {}, rateLimits: {}}\n  mach: x\n  matchErrorPolicy: FAIL\n"
            ),
            [
                "c.yaml: rule r: spec.mach: unknown field (did you mean match?)",
                "c.yaml: rule r: spec.sampling.rateLimits: unknown field (did you mean rateLimit?)",
                "c.yaml: rule r: spec.matchErrorPolicy: unknown value \"FAIL\" (expected one of NO_MATCH, DENY)",
            ]
        );
    }

    #[test]
    fn match_must_be_boolean_and_known() {
        let e = errors("kind: rule\nmetadata: {name: r}\nspec: {match: request.path}\n");
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with("c.yaml: rule r: spec.match: "), "{e:?}");
        let e = errors(
            "kind: rule\nmetadata: {name: deny-bob}\nspec: {match: 'request.hedaers[\"x\"] == \"bob\"'}\n",
        );
        assert_eq!(
            e,
            [
                "c.yaml: rule deny-bob: spec.match: unknown attribute \"request.hedaers\" (did you mean request.headers?)"
            ]
        );
    }

    #[test]
    fn absent_attributes_warn_unless_a_policy_is_set() {
        let v = ok(
            "kind: rule\nmetadata: {name: r}\nspec: {match: 'request.headers[\"x-user\"] == \"bob\"'}\n",
        );
        let shown: Vec<String> = v.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 1, "{shown:?}");
        assert!(
            shown[0].starts_with("c.yaml: rule r: spec.match: can fail when ")
                && shown[0].contains("request.headers")
                && shown[0].ends_with("is absent; Istio treats that as no match (add a \"|\" default or set matchErrorPolicy)"),
            "{shown:?}"
        );
        let v = ok(
            "kind: rule\nmetadata: {name: r}\nspec: {match: '(request.headers[\"x-user\"] | \"\") == \"bob\"'}\n",
        );
        assert!(v.warnings.is_empty(), "{:?}", v.warnings);
        let v = ok(
            "kind: rule\nmetadata: {name: r}\nspec: {match: 'request.headers[\"x-user\"] == \"bob\"', matchErrorPolicy: NO_MATCH}\n",
        );
        assert!(v.warnings.is_empty());
    }

    const REPORT_BASE: &str = "kind: handler\nmetadata: {name: h}\nspec: {compiledAdapter: noop}\n---\nkind: instance\nmetadata: {name: span}\nspec: {compiledTemplate: tracespan, params: {spanName: request.path}}\n---\n";

    fn report_rule(sampling: &str) -> String {
        format!(
            "{REPORT_BASE}kind: rule\nmetadata: {{name: r}}\nspec:\n  actions: [{{handler: h, instances: [span]}}]\n  sampling: {sampling}\n"
        )
    }

    #[test]
    fn istio_sampling_on_a_report_rule() {
        // The contract's shape: percentSampled as a plain number of percent.
        let v = ok(&report_rule("{random: {percentSampled: 10}}"));
        assert!(v.warnings.is_empty(), "{:?}", v.warnings);
        let s = v.config.rules[0].sampling.as_ref().expect("sampling kept");
        let random = s.random.as_ref().expect("random");
        assert_eq!(random.parts_per_million, 100_000);
        assert!(!random.use_independent_randomness);
        assert!(s.rate_limit.is_none());
        // FractionalPercent, capped at 100%, and the attribute override.
        let v = ok(&report_rule(
            "{random: {percentSampled: {numerator: 125, denominator: TEN_THOUSAND}, attributeExpression: 'request.size | 0', useIndependentRandomness: true}, rateLimit: {samplingDuration: 1s, maxUnsampledEntries: 100, samplingRate: '10'}}",
        ));
        let s = v.config.rules[0].sampling.as_ref().expect("sampling kept");
        let random = s.random.as_ref().expect("random");
        assert_eq!(random.parts_per_million, 12_500);
        assert!(random.use_independent_randomness);
        assert_eq!(
            random.attribute_expression.as_ref().map(|e| e.source()),
            Some("request.size | 0")
        );
        assert_eq!(
            s.rate_limit,
            Some(crate::RateLimitSamplingConfig {
                sampling_duration: std::time::Duration::from_secs(1),
                max_unsampled_entries: 100,
                sampling_rate: 10,
            })
        );
        let v = ok(&report_rule("{random: {percentSampled: {numerator: 300}}}"));
        let s = v.config.rules[0].sampling.as_ref().expect("sampling kept");
        assert_eq!(
            s.random.as_ref().map(|r| r.parts_per_million),
            Some(1_000_000)
        );
        assert_eq!(
            v.config.dump()["rules"][0]["sampling"]["random"]["partsPerMillion"],
            1_000_000
        );
    }

    #[test]
    fn invalid_sampling_is_an_error_at_its_field() {
        assert_eq!(
            errors(&report_rule(
                "{random: {percentSampled: 101, useIndependentRandomness: 1}, rateLimit: {samplingDuration: 0s, maxUnsampledEntries: -1, samplingRate: 0}}"
            )),
            [
                "c.yaml: rule r: spec.sampling.random.percentSampled: 101 is not a percentage from 0 to 100",
                "c.yaml: rule r: spec.sampling.random.useIndependentRandomness: expected true or false, found a number",
                "c.yaml: rule r: spec.sampling.rateLimit.samplingDuration: \"0s\" is not a positive duration such as \"1s\"",
                "c.yaml: rule r: spec.sampling.rateLimit.maxUnsampledEntries: expected a whole number of at least 0, found -1",
                "c.yaml: rule r: spec.sampling.rateLimit.samplingRate: expected a whole number of at least 1, found 0",
            ]
        );
        assert_eq!(
            errors(&report_rule(
                "{random: {percentSampled: {numerator: 1, denominator: THOUSAND}, attributeExpression: request.path}, rateLimit: {}}"
            )),
            [
                "c.yaml: rule r: spec.sampling.random.percentSampled.denominator: unknown value \"THOUSAND\" (expected one of HUNDRED, TEN_THOUSAND)",
                "c.yaml: rule r: spec.sampling.random.attributeExpression: must be a number of percent (INT64 or DOUBLE), not String",
                "c.yaml: rule r: spec.sampling.rateLimit.samplingDuration: missing: the window to count entries in",
                "c.yaml: rule r: spec.sampling.rateLimit.samplingRate: missing: past maxUnsampledEntries, one entry in samplingRate is sent",
            ]
        );
    }

    #[test]
    fn sampling_on_a_check_rule_samples_only_its_report_actions() {
        let v = ok(&with_base(
            "kind: rule\nmetadata: {name: r}\nspec:\n  actions: [{handler: denyall, instances: [nothing]}]\n  sampling: {random: {percentSampled: 10}}\n",
        ));
        let shown: Vec<String> = v.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "c.yaml: rule r: spec.sampling: sampling applies to report actions only: check and quota actions see every request"
            ]
        );
    }

    /// A quota instance charged from reports on a rule that is sampled or dry-run is refused:
    /// either would count less than was used. The same rule with a quota instance that is
    /// not charged is served, with the warnings it had.
    #[test]
    fn a_charged_quota_instance_refuses_sampling_and_dry_run() {
        let quota = |charge: &str, rule: &str| {
            with_base(&format!(
                "kind: instance\nmetadata: {{name: tokens}}\nspec: {{compiledTemplate: quota, params: {{dimensions: {{user: request.path}}{charge}}}}}\n---\n{rule}"
            ))
        };
        let sampled = "kind: rule\nmetadata: {name: r}\nspec:\n  actions: [{handler: nothing-h.team, instances: [tokens]}]\n  sampling: {random: {percentSampled: 10}}\n";
        let dry_run = "kind: rule\nmetadata: {name: r, annotations: {istio.io/dry-run: 'true'}}\nspec:\n  actions: [{handler: nothing-h.team, instances: [tokens]}]\n";
        let charged = ", charge: response.size";
        assert_eq!(
            errors(&quota(charged, sampled)),
            [
                "c.yaml: rule r: spec.sampling: quota instance tokens.instance.istio-system is charged from reports (its `charge`): sampling would charge only the sampled reports' usage and under-count it; put the charged instance on a rule without sampling"
            ]
        );
        assert_eq!(
            errors(&quota(charged, dry_run)),
            [
                "c.yaml: rule r: metadata.annotations[\"istio.io/dry-run\"]: quota instance tokens.instance.istio-system is charged from reports (its `charge`): a dry-run rule would spend real quota; take the charged instance off this rule or the annotation off it"
            ]
        );
        assert_eq!(ok(&quota("", sampled)).config.rules.len(), 1);
        assert!(ok(&quota("", dry_run)).config.rules[0].dry_run);
    }

    #[test]
    fn dry_run_annotation() {
        let rule = |value: &str| {
            with_base(&format!(
                "kind: rule\nmetadata: {{name: r, annotations: {{istio.io/dry-run: {value}}}}}\nspec:\n  actions: [{{handler: denyall, instances: [nothing]}}]\n"
            ))
        };
        let v = ok(&rule("'true'"));
        assert!(v.config.rules[0].dry_run);
        assert_eq!(v.config.dump()["rules"][0]["dryRun"], true);
        assert!(!ok(&rule("'false'")).config.rules[0].dry_run);
        assert!(!ok(&with_base(
            "kind: rule\nmetadata: {name: r}\nspec:\n  actions: [{handler: denyall, instances: [nothing]}]\n"
        ))
        .config
        .rules[0]
            .dry_run);
        assert_eq!(
            errors(&rule("'audit'")),
            [
                "c.yaml: rule r: metadata.annotations[\"istio.io/dry-run\"]: expected \"true\" or \"false\", found \"audit\""
            ]
        );
    }
}
