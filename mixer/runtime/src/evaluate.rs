//! Rule evaluation, the first step of every variety: from an attribute bag to the rules that
//! match, the instances they produce and the header operations they carry, recording every
//! attribute read on the way. Synchronous and allocation-light; no handler is called here.

use std::sync::Arc;
use std::time::Duration;

use mixer_config::{FieldExprValue, HeaderOperationConfig, InstanceConfig, MatchErrorPolicy};
use mixer_model::{
    Bag, Code, FieldValue, HeaderOperation, Instance, Presence, ReferencedAttributes, Status,
    Value, Variety, WouldBe,
};

use crate::decision::InstanceError;
use crate::rules::RuleSet;
use crate::shared_exprs::Memo;
use crate::snapshot::Snapshot;

/// One instance going to one handler.
#[derive(Clone, Debug)]
pub struct Dispatch {
    /// Index of the handler in [`Snapshot::handlers`].
    pub handler: usize,
    /// The built instance.
    pub instance: Instance,
    /// Index of its config in [`Config::instances`](mixer_config::Config::instances).
    pub instance_index: usize,
}

/// A rule whose match could not be evaluated.
#[derive(Clone, Debug, PartialEq)]
pub struct MatchFailure {
    /// The rule.
    pub rule: Arc<str>,
    /// Why.
    pub message: String,
    /// The policy applied.
    pub policy: MatchErrorPolicy,
}

/// What the rules say about one bag, before any handler is called.
#[derive(Clone, Debug, Default)]
pub struct Evaluation {
    /// Rules whose match was true, in evaluation order.
    pub matched_rules: Vec<Arc<str>>,
    /// Instances to send, in rule and action order.
    pub dispatches: Vec<Dispatch>,
    /// Everything read to get here.
    pub referenced: ReferencedAttributes,
    /// Header operations of matched rules, evaluated.
    pub request_header_ops: Vec<HeaderOperation>,
    /// Response header operations of matched rules, evaluated.
    pub response_header_ops: Vec<HeaderOperation>,
    /// Matches that failed to evaluate.
    pub match_failures: Vec<MatchFailure>,
    /// Instances of matched rules that could not be built (not in `dispatches`).
    pub instance_errors: Vec<InstanceError>,
    /// Matched dry-run rules of a check or quota evaluation, with what they send; nothing of
    /// them is in the fields above (their reads excepted, see [`DryRunEval`]).
    pub dry_runs: Vec<DryRunEval>,
}

/// A matched dry-run rule: evaluated like any other, its instances to ask its handlers about,
/// none of it enforced. What it reads is recorded with the rest of the evaluation's reads, so
/// a cached verdict carries the would-be verdicts of exactly the requests it serves (the
/// cache keys on more attributes, never answers differently).
#[derive(Clone, Debug)]
pub struct DryRunEval {
    /// The rule's full name.
    pub rule: Arc<str>,
    /// Its check or quota instances.
    pub dispatches: Vec<Dispatch>,
    /// What it decided without asking a handler: a match that failed under
    /// `matchErrorPolicy: DENY` (deny) or an instance that could not be built (error).
    pub decided: Option<(WouldBe, Status)>,
}

/// What one evaluation reuses across rule sets: the index's candidate list and, for reports,
/// the values of shared expressions; and, for a quota named by the request, that name.
struct Scratch<'q> {
    candidates: Vec<u32>,
    memo: Option<Memo>,
    /// Only the quota instances answering this quota name are built (Mixer v1 names the
    /// quota it asks for): a rule with 50 quota instances would otherwise build all 50 per
    /// request to keep one. Istio 1.4's dispatcher skipped them before building too.
    quota: Option<&'q str>,
}

/// Evaluates the rules for `variety` against `bag`: which match, which instances they
/// produce, what was read.
pub fn evaluate(snapshot: &Snapshot, bag: &dyn Bag, variety: Variety) -> Evaluation {
    evaluate_for(snapshot, bag, variety, true, variety != Variety::Report)
}

/// [`evaluate`]; `name_rules: false` leaves `matched_rules` empty (reports do
/// not answer with them, and every name kept is a shared reference count to bump), and
/// `record_reads: false` leaves `referenced` empty (nothing caches or answers with a
/// report's reads, nor with those of a check that no cache keeps and whose protocol does
/// not carry them).
pub(crate) fn evaluate_for(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    variety: Variety,
    name_rules: bool,
    record_reads: bool,
) -> Evaluation {
    evaluate_with(snapshot, bag, variety, name_rules, record_reads, None)
}

/// [`evaluate_for`] for the quota rules, building only the instances that answer `quota`
/// ([`crate::quota_name::quota_name_matches`]) when the request names one; the rules' matches
/// are evaluated as for any quota request. Rule names are not kept.
pub(crate) fn evaluate_quota(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    quota: Option<&str>,
    record_reads: bool,
) -> Evaluation {
    evaluate_with(snapshot, bag, Variety::Quota, false, record_reads, quota)
}

fn evaluate_with(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    variety: Variety,
    name_rules: bool,
    record_reads: bool,
    quota: Option<&str>,
) -> Evaluation {
    let mut eval = Evaluation::default();
    if !record_reads {
        eval.referenced = ReferencedAttributes::ignoring();
    }
    let mut scratch = Scratch {
        candidates: Vec::new(),
        // Reports build many instances from the same record; checks few, and they record
        // what each expression read, which a shared value would hide.
        memo: (variety == Variety::Report).then(|| snapshot.shared_exprs.memo()),
        quota,
    };
    evaluate_set(
        snapshot,
        snapshot.default_rules.get(variety),
        bag,
        variety,
        name_rules,
        &mut eval,
        &mut scratch,
    );
    if !snapshot.namespaced.is_empty()
        && let Some(ns) = identity_namespace(snapshot, bag, &mut eval.referenced)
        && let Some(set) = snapshot.namespaced.get(ns.as_ref())
    {
        evaluate_set(
            snapshot,
            set.get(variety),
            bag,
            variety,
            name_rules,
            &mut eval,
            &mut scratch,
        );
    }
    eval.referenced.normalize();
    eval
}

/// Istio's scoping: inbound reports and checks belong to the destination's namespace,
/// outbound ones to the source's.
fn identity_namespace(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    refs: &mut ReferencedAttributes,
) -> Option<Arc<str>> {
    let read = |id: Option<mixer_model::AttrId>, refs: &mut ReferencedAttributes| {
        let id = id?;
        let value = bag.get(id);
        refs.record(
            id,
            if value.is_some() {
                Presence::Exact
            } else {
                Presence::Absent
            },
        );
        value.cloned()
    };
    let outbound = matches!(
        read(snapshot.identity.reporter_kind, refs),
        Some(Value::String(kind)) if kind.as_ref() == "outbound"
    );
    let attr = if outbound {
        snapshot.identity.source_namespace
    } else {
        snapshot.identity.destination_namespace
    };
    match read(attr, refs) {
        Some(Value::String(ns)) => Some(ns),
        _ => None,
    }
}

fn evaluate_set(
    snapshot: &Snapshot,
    set: &RuleSet,
    bag: &dyn Bag,
    variety: Variety,
    name_rules: bool,
    eval: &mut Evaluation,
    scratch: &mut Scratch<'_>,
) {
    set.index
        .candidates(bag, &mut eval.referenced, &mut scratch.candidates);
    // A report's dispatches grew 0, 4, 8 as instances were built: one allocation instead.
    // A named quota is usually one instance: no room for all of them.
    if scratch.quota.is_none() {
        eval.dispatches.reserve(set.instances);
    }
    for &pos in scratch.candidates.iter() {
        let Some(&index) = set.rules.get(pos as usize) else {
            continue;
        };
        let Some(rule) = snapshot.config.rules.get(index) else {
            continue;
        };
        // Dry-run changes what checks and quotas answer; reports are sent as usual.
        let dry_run = rule.dry_run && matches!(variety, Variety::Check | Variety::Quota);
        let matched = match &rule.match_expr {
            None => true,
            Some(expr) => match expr.eval_bool(bag, &mut eval.referenced) {
                Ok(b) => b,
                Err(e) => {
                    let policy = rule
                        .match_error_policy
                        .unwrap_or(snapshot.options.match_error_policy);
                    let policy_label = match policy {
                        MatchErrorPolicy::NoMatch => "no_match",
                        MatchErrorPolicy::Deny => "deny",
                    };
                    let failures = snapshot
                        .metrics
                        .match_errors
                        .with_label_values(&[rule.name.as_ref(), policy_label]);
                    // A rule whose match fails does so for every request like it (an
                    // attribute the proxy never sends): its first failure is worth a line,
                    // the rest would be a line per request. The counter has them all.
                    if failures.get() == 0 {
                        tracing::info!(rule = %rule.name, error = %e, policy = policy_label, "rule match failed to evaluate; further failures of this rule are counted in mixer_rule_match_errors_total and logged at debug level");
                    } else {
                        tracing::debug!(rule = %rule.name, error = %e, policy = policy_label, "rule match failed to evaluate");
                    }
                    failures.inc();
                    if dry_run {
                        // Not enforced: a match that would deny is this rule's would-be denial.
                        if policy == MatchErrorPolicy::Deny {
                            eval.dry_runs.push(DryRunEval {
                                rule: rule.name.clone(),
                                dispatches: Vec::new(),
                                decided: Some((
                                    WouldBe::Deny,
                                    Status::new(
                                        Code::PermissionDenied,
                                        format!("rule {} could not be evaluated: {e}", rule.name),
                                    ),
                                )),
                            });
                        }
                    } else {
                        eval.match_failures.push(MatchFailure {
                            rule: rule.name.clone(),
                            message: e.to_string(),
                            policy,
                        });
                    }
                    false
                }
            },
        };
        if !matched {
            continue;
        }
        if let Some(counter) = snapshot.rule_matches.get(index) {
            counter.inc();
        }
        if dry_run {
            dry_run_instances(snapshot, rule, bag, variety, scratch.quota, eval);
            continue;
        }
        if name_rules {
            eval.matched_rules.push(rule.name.clone());
        }
        if variety == Variety::Report
            && let Some(Some(sampler)) = snapshot.samplers.get(index)
            && !sampler.keep(bag, &mut eval.referenced)
        {
            continue;
        }
        for action in &rule.actions {
            for &i in &action.instances {
                let Some(ic) = snapshot.config.instances.get(i) else {
                    continue;
                };
                if !ic.serves(variety) || !answers(scratch.quota, ic) {
                    continue;
                }
                match build_instance(
                    snapshot,
                    ic,
                    variety,
                    i,
                    bag,
                    &mut eval.referenced,
                    scratch.memo.as_mut(),
                ) {
                    Ok(instance) => eval.dispatches.push(Dispatch {
                        handler: action.handler,
                        instance,
                        instance_index: i,
                    }),
                    Err(e) => eval.instance_errors.push(e),
                }
            }
        }
        if variety == Variety::Check {
            header_ops(
                &rule.request_header_operations,
                bag,
                &mut eval.referenced,
                &mut eval.request_header_ops,
            );
            header_ops(
                &rule.response_header_operations,
                bag,
                &mut eval.referenced,
                &mut eval.response_header_ops,
            );
        }
    }
}

/// Builds a matched dry-run rule's instances of `variety` into its own [`DryRunEval`]; an
/// instance that cannot be built is its would-be error, not the request's. Its header
/// operations are not applied: they would change the answer.
fn dry_run_instances(
    snapshot: &Snapshot,
    rule: &mixer_config::RuleConfig,
    bag: &dyn Bag,
    variety: Variety,
    quota: Option<&str>,
    eval: &mut Evaluation,
) {
    let mut run = DryRunEval {
        rule: rule.name.clone(),
        dispatches: Vec::new(),
        decided: None,
    };
    for action in &rule.actions {
        for &i in &action.instances {
            let Some(ic) = snapshot.config.instances.get(i) else {
                continue;
            };
            if ic.template.variety() != variety || !answers(quota, ic) {
                continue;
            }
            match build_instance(snapshot, ic, variety, i, bag, &mut eval.referenced, None) {
                Ok(instance) => run.dispatches.push(Dispatch {
                    handler: action.handler,
                    instance,
                    instance_index: i,
                }),
                Err(e) => {
                    run.decided.get_or_insert((
                        WouldBe::Error,
                        Status::new(Code::Internal, e.to_string()),
                    ));
                }
            }
        }
    }
    eval.dry_runs.push(run);
}

/// Whether instance `ic` is one a request for `quota` asks (any, when it names none).
fn answers(quota: Option<&str>, ic: &InstanceConfig) -> bool {
    quota.is_none_or(|q| crate::quota_name::quota_name_matches(q, &ic.name, ic.template))
}

/// Builds instance `index` (configured as `ic`). With a `memo` (reports), an expression
/// text shared by several instances is evaluated once per record ([`crate::shared_exprs`]).
/// The first field that fails fails the instance, as Istio's template builders do; the
/// failure is counted by instance.
fn build_instance(
    snapshot: &Snapshot,
    ic: &InstanceConfig,
    variety: Variety,
    index: usize,
    bag: &dyn Bag,
    refs: &mut ReferencedAttributes,
    mut memo: Option<&mut Memo>,
) -> Result<Instance, InstanceError> {
    let mut slots = snapshot.shared_exprs.of_instance(index).iter();
    let mut value = |expr: &mixer_policy::Expression, refs: &mut ReferencedAttributes| {
        let slot = slots.next();
        let entry = memo
            .as_deref_mut()
            .zip(slot)
            .and_then(|(memo, &s)| memo.get_mut(s as usize));
        match entry {
            Some(entry) => entry.get_or_insert_with(|| expr.eval(bag, refs)).clone(),
            None => expr.eval(bag, refs),
        }
    };
    let failed = |field: String, e: mixer_policy::EvalError| {
        snapshot
            .metrics
            .instance_errors
            .with_label_values(&[ic.name.as_ref()])
            .inc();
        let error = InstanceError {
            instance: ic.name.clone(),
            field,
            message: e.to_string(),
        };
        // An attribute a proxy never sends fails every request like this one: a line
        // per 10 s, the counter has them all.
        static FAILING: mixer_adapter_api::log_gate::LogGate =
            mixer_adapter_api::log_gate::LogGate::new(Duration::from_secs(10));
        if let Some(held_back) = FAILING.due() {
            tracing::warn!(%error, held_back, "instance not built; counted in mixer_instance_errors_total");
        }
        error
    };
    let mut fields = Vec::with_capacity(ic.fields.len());
    // A check looks at a charged quota without its usage: the response a `charge` reads
    // does not exist yet, and must not fail the check's instance. (Checks keep no memo, so
    // skipping a field's shared-expression slot is harmless.)
    let looking = variety != Variety::Report && ic.charged_by_reports();
    for field in &ic.fields {
        if looking && matches!(field.name, "charge" | "deduplication_id") {
            continue;
        }
        match &field.value {
            FieldExprValue::Value(expr) => match value(expr, refs) {
                Ok(v) => fields.push((field.name, FieldValue::Value(v))),
                Err(e) => return Err(failed(field.name.to_string(), e)),
            },
            FieldExprValue::Map(entries) => {
                let mut map = Vec::with_capacity(entries.len());
                for (key, expr) in entries {
                    match value(expr, refs) {
                        Ok(v) => map.push((key.clone(), v)),
                        Err(e) => return Err(failed(format!("{}[{key}]", field.name), e)),
                    }
                }
                fields.push((field.name, FieldValue::Map(map)));
            }
        }
    }
    Ok(Instance {
        name: ic.name.clone(),
        template: ic.template,
        fields,
    })
}

fn header_ops(
    ops: &[HeaderOperationConfig],
    bag: &dyn Bag,
    refs: &mut ReferencedAttributes,
    out: &mut Vec<HeaderOperation>,
) {
    for op in ops {
        if op.values.is_empty() {
            out.push(HeaderOperation {
                name: op.name.clone(),
                value: String::new(),
                op: op.operation,
            });
        }
        for expr in &op.values {
            // A value that cannot be evaluated is left out; the rest of the verdict stands.
            if let Ok(v) = expr.eval(bag, refs) {
                out.push(HeaderOperation {
                    name: op.name.clone(),
                    value: v.to_string(),
                    op: op.operation,
                });
            }
        }
    }
}
