//! The preprocess phase (Istio's attribute-producing adapters): before any check, quota or
//! report rule is evaluated, the rules that send attribute generator instances (kubernetes,
//! jwt, apikey) are evaluated on the request's bag, each matched instance's handler
//! generates its outputs within the handler's deadline, and the instance's
//! `attributeBindings` turn them into attributes. Those are laid over the request's bag
//! ([`Overlay`]): a bound attribute hides what the proxy sent, and a binding that cannot be
//! evaluated leaves its attribute absent, never the proxy's value.
//!
//! What the generators' rules and instances read from the request (their inputs) is
//! recorded: a check's verdict is keyed on them, never on the derived values, so the check
//! cache, which looks verdicts up on the request's own bag, stays correct.
//!
//! A snapshot with no generator rule pays one test of [`Snapshot::generates`].

use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::host::FailPolicy;
use mixer_adapter_api::{AdapterError, Denial, ErrorKind, Generated};
use mixer_config::{InstanceConfig, MatchErrorPolicy};
use mixer_model::{AttrId, Bag, Code, FieldKind, ReferencedAttributes, Status, Value, Variety};

use crate::deadline;
use crate::decision::Undecided;
use crate::evaluate::{Evaluation, evaluate_for};
use crate::snapshot::{BuiltHandler, Snapshot};

/// A generator's refusal of the request, which a check answers with.
#[derive(Clone, Debug)]
pub(crate) struct Refusal {
    /// The handler that refused (`denied_by`); `None` for a generator rule whose match failed
    /// under `matchErrorPolicy: deny`.
    pub by: Option<Arc<str>>,
    /// The status and response headers.
    pub denial: Denial,
}

/// What the preprocess phase produced for one request.
#[derive(Debug)]
pub(crate) struct Preprocessed {
    /// Bound values by attribute index (`None` inside: bound, but absent).
    bound: Vec<Option<Value>>,
    /// Which slots of `bound` are bound, and the attributes bound (sorted, no duplicates).
    is_bound: Vec<bool>,
    pub derived: Vec<AttrId>,
    /// What the generators' rules and instances read from the request.
    pub inputs: ReferencedAttributes,
    /// The shortest validity a generator gave its outputs.
    pub valid_duration: Option<Duration>,
    /// False when a generator failed open: its defaults stand for this request only.
    pub cacheable: bool,
    /// A generator's denial (the first, in rule order).
    pub refusal: Option<Refusal>,
    /// Why the request cannot be decided: a generator that failed closed, or an instance of a
    /// generator rule that could not be built. Checks and quotas fail with it; reports go on
    /// with the bindings' defaults.
    pub failure: Option<Undecided>,
}

impl Preprocessed {
    /// The request's bag with the bound attributes laid over it.
    pub(crate) fn over<'b>(&'b self, request: &'b dyn Bag) -> Overlay<'b> {
        Overlay { pre: self, request }
    }

    /// Makes a decision's reads the request's: the reads of derived attributes are dropped
    /// (their values follow from the inputs) and the generators' inputs added.
    pub(crate) fn to_request_reads(&self, reads: &mut ReferencedAttributes) {
        if !reads.is_recording() {
            return;
        }
        reads.retain(|r| !self.is_bound.get(r.attr.index()).copied().unwrap_or(false));
        reads.extend(&self.inputs);
        reads.normalize();
    }
}

/// A request's bag with the attributes the generators bound laid over it.
pub(crate) struct Overlay<'b> {
    pre: &'b Preprocessed,
    request: &'b dyn Bag,
}

impl Bag for Overlay<'_> {
    fn get(&self, id: AttrId) -> Option<&Value> {
        if self.pre.is_bound.get(id.index()).copied().unwrap_or(false) {
            return self.pre.bound.get(id.index()).and_then(Option::as_ref);
        }
        self.request.get(id)
    }
}

/// A generator's outputs by position in its template's [`outputs`](mixer_model::Template::outputs),
/// which is how [`mixer_config::outputs_vocabulary`] numbers `$out.<field>`.
struct Outputs(Vec<Option<Value>>);

impl Bag for Outputs {
    fn get(&self, id: AttrId) -> Option<&Value> {
        self.0.get(id.index()).and_then(Option::as_ref)
    }
}

/// A request's preprocess phase run ahead of its check, so that the check (on a cache miss)
/// and the quotas charged after it see the same generated attributes from one call of each
/// generator. Empty (nothing run) when the snapshot has no generator rule.
#[derive(Debug, Default)]
pub struct Prepared {
    pub(crate) pre: Option<Preprocessed>,
}

impl Prepared {
    /// Runs the attribute generators of `snapshot` on `request`, recording their inputs.
    pub async fn new(snapshot: &Snapshot, request: &dyn Bag) -> Prepared {
        Prepared {
            pre: preprocess(snapshot, request, true).await,
        }
    }
}

/// Runs the preprocess phase on `request`; `None` when the snapshot has no generator rule
/// (nothing allocated, nothing read). `record_reads: false` leaves the inputs unrecorded.
pub(crate) async fn preprocess(
    snapshot: &Snapshot,
    request: &dyn Bag,
    record_reads: bool,
) -> Option<Preprocessed> {
    if !snapshot.generates {
        return None;
    }
    Some(run(snapshot, request, record_reads).await)
}

async fn run(snapshot: &Snapshot, request: &dyn Bag, record_reads: bool) -> Preprocessed {
    let eval = evaluate_for(
        snapshot,
        request,
        Variety::AttributeGenerator,
        false,
        record_reads,
    );
    let slots = snapshot.vocabulary().len();
    let mut pre = Preprocessed {
        bound: vec![None; slots],
        is_bound: vec![false; slots],
        derived: Vec::new(),
        inputs: eval.referenced,
        valid_duration: None,
        cacheable: true,
        refusal: None,
        failure: eval
            .instance_errors
            .into_iter()
            .next()
            .map(Undecided::Instance),
    };
    if let Some(failure) = eval
        .match_failures
        .iter()
        .find(|f| f.policy == MatchErrorPolicy::Deny)
    {
        pre.refusal = Some(Refusal {
            by: None,
            denial: Denial {
                status: Status::new(
                    Code::PermissionDenied,
                    format!(
                        "rule {} could not be evaluated: {}",
                        failure.rule, failure.message
                    ),
                ),
                response_headers: Vec::new(),
            },
        });
    }
    for d in &eval.dispatches {
        let Some(ic) = snapshot.config.instances.get(d.instance_index) else {
            continue;
        };
        let generated = match snapshot.handlers.get(d.handler) {
            Some(built) => generate(snapshot, built, &d.instance).await,
            None => Err(Undecided::Handler {
                handler: format!("#{}", d.handler).into(),
                error: AdapterError::permanent(
                    ErrorKind::Internal,
                    "a rule routes to a handler this config snapshot does not hold",
                ),
            }),
        };
        let outputs = match generated {
            Ok(Some(g)) => {
                if let Some(valid) = g.valid_duration {
                    pre.valid_duration = Some(pre.valid_duration.map_or(valid, |v| v.min(valid)));
                }
                if let Some(denial) = g.denial
                    && pre.refusal.is_none()
                {
                    pre.refusal = Some(Refusal {
                        by: snapshot.handlers.get(d.handler).map(|b| b.name.clone()),
                        denial,
                    });
                }
                outputs_of(snapshot, ic, g.outputs)
            }
            // Failed open: the bindings' defaults, for this request only.
            Ok(None) => {
                pre.cacheable = false;
                Outputs(vec![None; ic.template.outputs().len()])
            }
            Err(undecided) => {
                pre.failure.get_or_insert(undecided);
                Outputs(vec![None; ic.template.outputs().len()])
            }
        };
        bind(&mut pre, ic, &outputs);
    }
    pre.derived.sort();
    pre.derived.dedup();
    pre
}

/// Asks `built` to generate `instance`'s outputs. `Ok(None)`: it failed and fails open.
async fn generate(
    snapshot: &Snapshot,
    built: &BuiltHandler,
    instance: &mixer_model::Instance,
) -> Result<Option<Generated>, Undecided> {
    let answer = match built.handler.as_attributes() {
        Some(handler) => {
            let call = deadline::within(built.deadline, handler.generate(instance));
            crate::traces::child(crate::traces::ADAPTER_CALL, Some(&built.name), call).await
        }
        None => Err(AdapterError::permanent(
            ErrorKind::Internal,
            "the handler does not generate attributes",
        )),
    };
    match answer {
        Ok(mut generated) => {
            let result = if generated.denial.is_some() {
                "denied"
            } else {
                "ok"
            };
            snapshot
                .metrics
                .handler_call(&built.name, "attributes", result);
            // A denial's message reaches the client: never with a secret of the params.
            if let (Some(denial), Some(secrets)) = (&mut generated.denial, &built.secrets) {
                denial.status.message = secrets.scrub(&denial.status.message);
            }
            Ok(Some(generated))
        }
        Err(mut error) => {
            snapshot
                .metrics
                .handler_call(&built.name, "attributes", error.kind.label());
            if let Some(secrets) = &built.secrets {
                error.message = secrets.scrub(&error.message);
            }
            // A generator failing is as rare as a check handler failing: logged like one,
            // at most a line per 10 s, the counter has them all.
            static FAILING: mixer_adapter_api::log_gate::LogGate =
                mixer_adapter_api::log_gate::LogGate::new(Duration::from_secs(10));
            if let Some(held_back) = FAILING.due() {
                tracing::warn!(handler = %built.name, %error, held_back, "attribute generator failed; counted in mixer_handler_calls_total");
            }
            match built.fail_policy_for(Variety::AttributeGenerator) {
                FailPolicy::Open => Ok(None),
                FailPolicy::Closed => Err(Undecided::Handler {
                    handler: built.name.clone(),
                    error,
                }),
            }
        }
    }
}

/// The outputs by position; a field the template does not have, or a value of another type
/// than the field's, is left out (its bindings take their defaults) and counted.
fn outputs_of(
    snapshot: &Snapshot,
    ic: &InstanceConfig,
    given: Vec<(&'static str, Value)>,
) -> Outputs {
    let fields = ic.template.outputs();
    let mut outputs = vec![None; fields.len()];
    for (name, value) in given {
        let at = fields.iter().position(|f| f.name == name);
        let fits = at.is_some_and(|at| match fields[at].kind {
            FieldKind::Value(Some(t)) | FieldKind::Map(Some(t)) => value.value_type() == t,
            FieldKind::Value(None) | FieldKind::Map(None) => true,
        });
        match at {
            Some(at) if fits => outputs[at] = Some(value),
            _ => snapshot
                .metrics
                .instance_errors
                .with_label_values(&[ic.name.as_ref()])
                .inc(),
        }
    }
    Outputs(outputs)
}

/// Evaluates `ic`'s bindings on `outputs` into `pre`; later bindings override earlier ones.
fn bind(pre: &mut Preprocessed, ic: &InstanceConfig, outputs: &Outputs) {
    // Reads of outputs are not the request's: they are not recorded.
    let mut ignored = ReferencedAttributes::ignoring();
    for binding in &ic.bindings {
        let at = binding.attr.index();
        let Some(slot) = pre.bound.get_mut(at) else {
            continue;
        };
        // An output with no value and no `|` default leaves the attribute absent: the proxy's
        // value must not stand in for what the generator was asked to establish.
        *slot = binding.expr.eval(outputs, &mut ignored).ok();
        pre.is_bound[at] = true;
        pre.derived.push(binding.attr);
    }
}

/// [`evaluate`](crate::evaluate::evaluate) after the preprocess phase: the rules see the attributes the attribute
/// generators bound (this module), and `referenced` holds the request's reads (the
/// generators' inputs, not the derived attributes). A generator that fails leaves its
/// bindings at their defaults here; [`crate::check`] and [`crate::quota`] apply its fail
/// policy. What `mixer test` evaluates its cases with.
pub async fn evaluate_preprocessed(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    variety: Variety,
) -> Evaluation {
    let record_reads = variety != Variety::Report;
    let Some(pre) = preprocess(snapshot, bag, record_reads).await else {
        return crate::evaluate::evaluate(snapshot, bag, variety);
    };
    let mut eval = crate::evaluate::evaluate(snapshot, &pre.over(bag), variety);
    pre.to_request_reads(&mut eval.referenced);
    eval
}
