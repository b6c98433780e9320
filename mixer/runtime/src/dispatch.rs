//! The dispatcher: from an attribute bag to matched rules, instances, handler calls and a
//! verdict.
//!
//! Evaluation is synchronous and allocation-light; only handler calls are awaited. The
//! dispatcher sees handlers only through the adapter API's traits, so built-in, remote and
//! Wasm handlers are all called the same way.

use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::{AdapterError, ErrorKind, FailPolicy};
use mixer_config::{FieldExprValue, HeaderOperationConfig, InstanceConfig, MatchErrorPolicy};
use mixer_model::{
    Bag, Code, FieldValue, HeaderOperation, Instance, Presence, ReferencedAttributes, Status,
    Value, Variety, Verdict,
};

use crate::deadline;
use crate::shared_exprs::Memo;
use crate::snapshot::{RuleSet, Snapshot};

/// Validity of a verdict no handler limited (Istio's default: one minute, 10000 uses).
pub const DEFAULT_VALID_DURATION: Duration = Duration::from_secs(60);
/// Use count of a verdict no handler limited.
pub const DEFAULT_VALID_USE_COUNT: i32 = 10_000;

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
}

/// An instance a matched rule names that could not be built: one of its fields reads an
/// absent attribute (with no `|` default) or fails to evaluate. Istio 1.4 fails the Check
/// RPC itself on such an instance (INTERNAL) and fails a Report (UNKNOWN) without sending it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("instance {instance}: field {field}: {message}")]
pub struct InstanceError {
    /// The instance's full name.
    pub instance: Arc<str>,
    /// The field (`value`, `dimensions[source]`, ...).
    pub field: String,
    /// Why its expression failed, naming the attribute.
    pub message: String,
}

/// What one evaluation reuses across rule sets: the index's candidate list and, for reports,
/// the values of shared expressions.
struct Scratch {
    candidates: Vec<u32>,
    memo: Option<Memo>,
}

/// The mixer could not decide a check. Front ends answer this with an error, never a
/// denial, so the proxy's own failure setting applies.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// A handler failed and its policy is to fail closed (gRPC UNAVAILABLE, HTTP 503).
    #[error("handler {handler} could not decide: {error}")]
    Handler {
        /// The handler that failed.
        handler: Arc<str>,
        /// Its error.
        error: AdapterError,
    },
    /// An instance of a matched rule could not be built from the request (gRPC INTERNAL,
    /// HTTP 500, as Istio 1.4 answers).
    #[error("performing check operation failed: {0}")]
    Instance(InstanceError),
}

/// What a report did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportOutcome {
    /// Instances put on their handlers' queues.
    pub queued: usize,
    /// Instances dropped because a queue was full (also counted in metrics).
    pub dropped: usize,
    /// Instances that could not be built, and so were not sent (also counted in metrics).
    pub instance_errors: Vec<InstanceError>,
}

impl Snapshot {
    /// Evaluates the rules for `variety` against `bag`: which match, which instances they
    /// produce, what was read.
    pub fn evaluate(&self, bag: &dyn Bag, variety: Variety) -> Evaluation {
        self.evaluate_with(bag, variety, true, variety != Variety::Report)
    }

    /// [`Snapshot::evaluate`]; `name_rules: false` leaves `matched_rules` empty (reports do
    /// not answer with them, and every name kept is a shared reference count to bump), and
    /// `record_reads: false` leaves `referenced` empty (nothing caches or answers with a
    /// report's reads, nor with those of a check that no cache keeps and whose protocol does
    /// not carry them).
    fn evaluate_with(
        &self,
        bag: &dyn Bag,
        variety: Variety,
        name_rules: bool,
        record_reads: bool,
    ) -> Evaluation {
        let mut eval = Evaluation::default();
        if !record_reads {
            eval.referenced = ReferencedAttributes::ignoring();
        }
        let mut scratch = Scratch {
            candidates: Vec::new(),
            // Reports build many instances from the same record; checks few, and they record
            // what each expression read, which a shared value would hide.
            memo: (variety == Variety::Report).then(|| self.shared_exprs.memo()),
        };
        self.evaluate_set(
            self.default_rules.get(variety),
            bag,
            variety,
            name_rules,
            &mut eval,
            &mut scratch,
        );
        if !self.namespaced.is_empty()
            && let Some(ns) = self.identity_namespace(bag, &mut eval.referenced)
            && let Some(set) = self.namespaced.get(ns.as_ref())
        {
            self.evaluate_set(
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
        &self,
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
            read(self.identity.reporter_kind, refs),
            Some(Value::String(kind)) if kind.as_ref() == "outbound"
        );
        let attr = if outbound {
            self.identity.source_namespace
        } else {
            self.identity.destination_namespace
        };
        match read(attr, refs) {
            Some(Value::String(ns)) => Some(ns),
            _ => None,
        }
    }

    fn evaluate_set(
        &self,
        set: &RuleSet,
        bag: &dyn Bag,
        variety: Variety,
        name_rules: bool,
        eval: &mut Evaluation,
        scratch: &mut Scratch,
    ) {
        set.index
            .candidates(bag, &mut eval.referenced, &mut scratch.candidates);
        // A report's dispatches grew 0, 4, 8 as instances were built: one allocation instead.
        eval.dispatches.reserve(set.instances);
        for &pos in scratch.candidates.iter() {
            let Some(&index) = set.rules.get(pos as usize) else {
                continue;
            };
            let Some(rule) = self.config.rules.get(index) else {
                continue;
            };
            let matched = match &rule.match_expr {
                None => true,
                Some(expr) => match expr.eval_bool(bag, &mut eval.referenced) {
                    Ok(b) => b,
                    Err(e) => {
                        let policy = rule
                            .match_error_policy
                            .unwrap_or(self.options.match_error_policy);
                        let policy_label = match policy {
                            MatchErrorPolicy::NoMatch => "no_match",
                            MatchErrorPolicy::Deny => "deny",
                        };
                        let failures = self
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
                        eval.match_failures.push(MatchFailure {
                            rule: rule.name.clone(),
                            message: e.to_string(),
                            policy,
                        });
                        false
                    }
                },
            };
            if !matched {
                continue;
            }
            if let Some(counter) = self.rule_matches.get(index) {
                counter.inc();
            }
            if name_rules {
                eval.matched_rules.push(rule.name.clone());
            }
            for action in &rule.actions {
                for &i in &action.instances {
                    let Some(ic) = self.config.instances.get(i) else {
                        continue;
                    };
                    if ic.template.variety() != variety {
                        continue;
                    }
                    match self.build_instance(
                        ic,
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

    /// Builds instance `index` (configured as `ic`). With a `memo` (reports), an expression
    /// text shared by several instances is evaluated once per record ([`crate::shared_exprs`]).
    /// The first field that fails fails the instance, as Istio's template builders do; the
    /// failure is counted by instance.
    fn build_instance(
        &self,
        ic: &InstanceConfig,
        index: usize,
        bag: &dyn Bag,
        refs: &mut ReferencedAttributes,
        mut memo: Option<&mut Memo>,
    ) -> Result<Instance, InstanceError> {
        let mut slots = self.shared_exprs.of_instance(index).iter();
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
            self.metrics
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
            static FAILING: mixer_adapter_api::LogGate =
                mixer_adapter_api::LogGate::new(Duration::from_secs(10));
            if let Some(held_back) = FAILING.due() {
                tracing::warn!(%error, held_back, "instance not built; counted in mixer_instance_errors_total");
            }
            error
        };
        let mut fields = Vec::with_capacity(ic.fields.len());
        for field in &ic.fields {
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

    /// Decides a check: evaluates the rules, calls the check handlers of matched rules and
    /// combines their answers (the first denial wins; validity is the minimum).
    ///
    /// This always evaluates; front ends call [`Snapshot::check_cached`].
    pub async fn check(&self, bag: &dyn Bag) -> Result<Verdict, CheckError> {
        self.check_uncached(bag, true)
            .await
            .map(|(verdict, _)| verdict)
    }

    /// [`Snapshot::check`], also saying whether every handler consulted allows caching;
    /// `record_reads: false` leaves the verdict's `referenced` empty.
    pub(crate) async fn check_uncached(
        &self,
        bag: &dyn Bag,
        record_reads: bool,
    ) -> Result<(Verdict, bool), CheckError> {
        let eval = self.evaluate_with(bag, Variety::Check, true, record_reads);
        let mut cacheable = true;
        let mut verdict = Verdict {
            status: Status::OK,
            denied_by: None,
            valid_duration: DEFAULT_VALID_DURATION,
            valid_use_count: DEFAULT_VALID_USE_COUNT,
            referenced: eval.referenced,
            matched_rules: eval.matched_rules,
            request_header_ops: eval.request_header_ops,
            response_header_ops: eval.response_header_ops,
        };
        if let Some(error) = eval.instance_errors.into_iter().next() {
            self.metrics.check_results.error.inc();
            return Err(CheckError::Instance(error));
        }
        if let Some(failure) = eval
            .match_failures
            .iter()
            .find(|f| f.policy == MatchErrorPolicy::Deny)
        {
            verdict.status = Status::new(
                Code::PermissionDenied,
                format!(
                    "rule {} could not be evaluated: {}",
                    failure.rule, failure.message
                ),
            );
            self.metrics.check_results.denied.inc();
            return Ok((verdict, cacheable));
        }
        // As Istio 1.4's dispatcher combines: the first handler's answer sets the validity and
        // later ones can only shorten it; the defaults above stand only when no handler was
        // asked.
        let mut answered = false;
        for dispatch in &eval.dispatches {
            let Some(built) = self.handlers.get(dispatch.handler) else {
                continue;
            };
            cacheable &= built.cacheable;
            // A handler that cannot answer checks is refused when the snapshot is built; if
            // one ever gets here it fails by its fail policy rather than being skipped, which
            // would allow the request without asking it.
            let answer = match built.handler.as_check() {
                Some(handler) => {
                    deadline::within(built.deadline, handler.check(&dispatch.instance)).await
                }
                None => Err(AdapterError::permanent(
                    ErrorKind::Internal,
                    "the handler does not answer checks",
                )),
            };
            match answer {
                Ok(result) => {
                    match &built.check_calls {
                        Some(calls) if result.status.is_ok() => calls.ok.inc(),
                        Some(calls) => calls.denied.inc(),
                        None => {}
                    }
                    if answered {
                        verdict.valid_duration = verdict.valid_duration.min(result.valid_duration);
                        verdict.valid_use_count =
                            verdict.valid_use_count.min(result.valid_use_count);
                    } else {
                        verdict.valid_duration = result.valid_duration;
                        verdict.valid_use_count = result.valid_use_count;
                        answered = true;
                    }
                    if !result.status.is_ok() {
                        verdict.status = result.status;
                        verdict.denied_by = Some(built.name.clone());
                        break;
                    }
                }
                Err(error) => {
                    self.metrics
                        .handler_call(&built.name, "check", error.kind.label());
                    match built.fail_policy_for(Variety::Check) {
                        // Failing open allows this request but the answer must not be reused.
                        FailPolicy::Open => {
                            verdict.valid_duration = Duration::ZERO;
                            verdict.valid_use_count = 0;
                            answered = true;
                        }
                        FailPolicy::Closed => {
                            self.metrics.check_results.error.inc();
                            return Err(CheckError::Handler {
                                handler: built.name.clone(),
                                error,
                            });
                        }
                    }
                }
            }
        }
        if verdict.is_allowed() {
            self.metrics.check_results.allowed.inc();
        } else {
            self.metrics.check_results.denied.inc();
        }
        Ok((verdict, cacheable))
    }

    /// Puts the report instances of matched rules on their handlers' queues; each queue's
    /// task delivers them in batches.
    pub async fn report(&self, bag: &dyn Bag) -> ReportOutcome {
        let eval = self.evaluate_with(bag, Variety::Report, false, false);
        let mut outcome = ReportOutcome {
            instance_errors: eval.instance_errors,
            ..ReportOutcome::default()
        };
        for d in eval.dispatches {
            let Some(queue) = self.handlers.get(d.handler).and_then(|h| h.queue.as_ref()) else {
                continue;
            };
            if queue.push(d.instance) {
                outcome.queued += 1;
            } else {
                outcome.dropped += 1;
            }
        }
        outcome
    }
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
