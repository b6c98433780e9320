//! Quota dispatch: from a bag and a quota request to the quota handlers of matched rules.
//!
//! In two steps, so that a front end can look at every descriptor of a request before any is
//! counted: [`plan`] finds the instances a bag selects, and [`allocate`] asks their handlers,
//! each handler once per request with every allocation that goes to it (redisquota answers a
//! request in one round trip). [`ask`] does both for the quotas of one request.

use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::host::FailPolicy;
use mixer_adapter_api::{AdapterError, QuotaArgs, QuotaCall};
use mixer_config::RateLimitBehaviour;
use mixer_model::{
    Bag, Code, DryRunOutcome, HandlerFailure, Instance, QuotaLimit, QuotaResult,
    ReferencedAttributes, Status, Variety, WouldBe,
};
use smallvec::SmallVec;

use crate::deadline;
use crate::decision::{DEFAULT_VALID_DURATION, Undecided};
use crate::evaluate::{Dispatch, DryRunEval, evaluate_quota};
use crate::preprocess::preprocess;
use crate::snapshot::{BuiltHandler, Snapshot};

/// The quota instances one bag selects, before any handler is asked: what
/// [`plan`] finds and [`allocate`] spends.
#[derive(Clone, Debug)]
pub struct QuotaPlan {
    dispatches: Vec<Dispatch>,
    referenced: ReferencedAttributes,
    /// Why the allocation fails without asking any handler: an instance asked for that could
    /// not be built (as in Istio), or an attribute generator that failed closed.
    failed: Option<Undecided>,
    /// Matched dry-run quota rules: allocated like the others, never refusing.
    dry_runs: Vec<DryRunEval>,
}

impl QuotaPlan {
    /// This plan without its dry-run rules, for a lookup that decides nothing (RLQS asks
    /// the handlers for amount 0 to learn a limit): what those rules would have done is
    /// counted for decisions served, not for lookups.
    pub fn without_dry_runs(mut self) -> QuotaPlan {
        self.dry_runs.clear();
        self
    }

    /// The index in [`Snapshot::handlers`] of each handler the plan asks (RLQS keeps a
    /// limit's demands in the Redis its redisquota handler names).
    pub fn handler_indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.dispatches.iter().map(|d| d.handler)
    }

    /// The envoyproxy/ratelimit behaviour of each selected instance that has one.
    pub fn rate_limits<'s>(
        &'s self,
        snapshot: &'s Snapshot,
    ) -> impl Iterator<Item = &'s RateLimitBehaviour> + 's {
        self.dispatches
            .iter()
            .filter_map(|d| snapshot.config.rate_limit(d.instance_index))
    }
}

/// What a quota request came to.
#[derive(Clone, Debug, PartialEq)]
pub struct QuotaOutcome {
    /// The combined answer: the smallest grant and every refusal's status.
    pub result: QuotaResult,
    /// What the rule evaluation read.
    pub referenced: ReferencedAttributes,
    /// Names of the quota instances consulted (empty: no rule asked for this quota, and
    /// everything was granted). Shared with the instances', inline for one: a descriptor
    /// counted against one limit allocates nothing for it.
    pub instances: SmallVec<[Arc<str>; 1]>,
    /// Whether the request is refused: some handler answered a status other than OK, or
    /// granted less than asked without best effort (Istio's memquota refuses with status OK
    /// and 0 granted, and the proxy denies). The rate limit front end answers OVER_LIMIT.
    pub refused: bool,
    /// True when the only limits selected were envoyproxy/ratelimit `unlimited` ones (no
    /// handler was asked).
    pub unlimited: bool,
    /// True when an instance consulted is an envoyproxy/ratelimit `quota_mode` limit.
    pub quota_mode: bool,
    /// What each matched dry-run quota rule would have answered (its allocation was made,
    /// and counted against its own counters; the request is never refused for it).
    pub dry_run: Vec<DryRunOutcome>,
    /// The quota handlers that failed and whose fail policy (open) granted the request
    /// without them, for the decision log.
    pub failed_open: Vec<HandlerFailure>,
}

/// Whether `result`'s limit says more about the request than the one `combined` holds: a
/// refusal's limit over a grant's, then the one with less remaining.
fn more_constraining(result: &QuotaResult, combined: &QuotaResult, args: &QuotaArgs) -> bool {
    let Some(new) = &result.limit else {
        return false;
    };
    let Some(old) = &combined.limit else {
        return true;
    };
    let refused = refuses(result, args);
    let was_refused = refuses(combined, args);
    (refused, -new.remaining) > (was_refused, -old.remaining)
}

/// One quota of a request given to [`ask`]: the bag the quota rules
/// are evaluated on, the quota asked for (only the instances answering that name, when given)
/// and what is asked.
#[derive(Clone, Copy)]
pub struct QuotaAsk<'a> {
    /// The request's attributes.
    pub bag: &'a dyn Bag,
    /// The quota's name (Mixer v1 names it; Envoy's rate limit service does not).
    pub quota: Option<&'a str>,
    /// Amount, best effort, deduplication id, limit override.
    pub args: &'a QuotaArgs,
}

/// The `at`th call of the batch going to one handler.
struct Planned {
    /// Index into the groups (one per handler).
    group: usize,
    /// Index of the call in its group.
    at: usize,
    /// A quota charged by reports: the call asked for nothing.
    looks_only: bool,
    /// Index into `config.instances` of the instance, for its envoyproxy/ratelimit
    /// statistics.
    instance: usize,
}

/// Allocates every quota of one request: evaluates the quota rules against each ask's bag and
/// asks the handler of each matching quota instance (only those answering the ask's quota,
/// when it names one) for its amount, each handler called once (see [`allocate`]). An ask no
/// instance matches is granted whole, as in Istio. Answers are in the order of `asks`.
pub async fn ask(
    snapshot: &Snapshot,
    asks: &[QuotaAsk<'_>],
) -> Vec<Result<QuotaOutcome, Undecided>> {
    let mut plans: Vec<(QuotaPlan, &QuotaArgs)> = Vec::with_capacity(asks.len());
    for ask in asks {
        plans.push((
            plan_preprocessed(snapshot, ask.bag, ask.quota).await,
            ask.args,
        ));
    }
    allocate(snapshot, plans, &[]).await
}

/// [`ask`] for the quotas of one request whose attribute generators already ran
/// ([`Prepared::new`](crate::Prepared::new), for its check): every ask's bag is that
/// request's, and the quota rules see the same generated attributes as its check did.
pub async fn ask_prepared(
    snapshot: &Snapshot,
    asks: &[QuotaAsk<'_>],
    prepared: &crate::Prepared,
) -> Vec<Result<QuotaOutcome, Undecided>> {
    let Some(pre) = &prepared.pre else {
        return ask(snapshot, asks).await;
    };
    let plans: Vec<(QuotaPlan, &QuotaArgs)> = asks
        .iter()
        .map(|a| {
            (
                plan_on(snapshot, pre, a.bag, a.quota, Reads::Record),
                a.args,
            )
        })
        .collect();
    allocate(snapshot, plans, &[]).await
}

/// Whether a plan records what its rules read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reads {
    /// For a protocol that answers with them or a cache that keeps by them.
    Record,
    /// For one that has no use for them (Envoy's rate limit service).
    Skip,
}

/// [`plan`] on `bag` with `pre`'s attributes laid over it, with the request's reads.
fn plan_on(
    snapshot: &Snapshot,
    pre: &crate::preprocess::Preprocessed,
    bag: &dyn Bag,
    quota: Option<&str>,
    reads: Reads,
) -> QuotaPlan {
    let mut planned = plan_with(snapshot, &pre.over(bag), quota, reads);
    pre.to_request_reads(&mut planned.referenced);
    if let Some(failure) = &pre.failure {
        planned.dispatches.clear();
        planned.failed.get_or_insert(failure.clone());
    }
    planned
}

/// [`plan`] after the preprocess phase: the quota rules see the attributes the attribute
/// generators bound ([`crate::preprocess`]); the plan's reads are the request's. A generator
/// that fails closed fails the allocation; its denial does not (quota rules see the
/// bindings' defaults).
pub async fn plan_preprocessed(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    quota: Option<&str>,
) -> QuotaPlan {
    plan_preprocessed_with(snapshot, bag, quota, Reads::Record).await
}

/// [`plan_preprocessed`] for a protocol whose answer does not carry the request's reads and
/// that no cache keeps (Envoy's rate limit service): the plan records none, so that counting
/// a descriptor does not pay for them.
pub async fn plan_preprocessed_without_reads(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    quota: Option<&str>,
) -> QuotaPlan {
    plan_preprocessed_with(snapshot, bag, quota, Reads::Skip).await
}

async fn plan_preprocessed_with(
    snapshot: &Snapshot,
    bag: &dyn Bag,
    quota: Option<&str>,
    reads: Reads,
) -> QuotaPlan {
    if !snapshot.generates {
        return plan_with(snapshot, bag, quota, reads);
    }
    Box::pin(async {
        match preprocess(snapshot, bag, true).await {
            Some(pre) => plan_on(snapshot, &pre, bag, quota, reads),
            None => plan_with(snapshot, bag, quota, reads),
        }
    })
    .await
}

/// The first step of a quota request: the quota instances `bag` selects (those
/// answering `quota`, when given), without asking any handler.
pub fn plan(snapshot: &Snapshot, bag: &dyn Bag, quota: Option<&str>) -> QuotaPlan {
    plan_with(snapshot, bag, quota, Reads::Record)
}

fn plan_with(snapshot: &Snapshot, bag: &dyn Bag, quota: Option<&str>, reads: Reads) -> QuotaPlan {
    snapshot
        .metrics
        .check_activity
        .mark(std::time::Instant::now());
    // A quota plan keeps no rule names: they are a shared reference count to bump each.
    // Only the instances answering the quota asked for are built.
    let mut eval = evaluate_quota(snapshot, bag, quota, reads == Reads::Record);
    // A dry-run rule none of whose instances answers this quota is not about it.
    if quota.is_some() {
        eval.dry_runs
            .retain(|r| !r.dispatches.is_empty() || r.decided.is_some());
    }
    let not_built = eval.instance_errors.into_iter().next();
    QuotaPlan {
        dispatches: eval.dispatches,
        referenced: eval.referenced,
        failed: not_built.map(Undecided::Instance),
        dry_runs: eval.dry_runs,
    }
}

/// The second step of a quota request: asks the handlers of every plan's instances for its amount, each
/// handler once, with all of the request's allocations that go to it
/// ([`QuotaHandler::allocate_many`](mixer_adapter_api::QuotaHandler::allocate_many)), and
/// the handlers concurrently. envoyproxy/ratelimit limits that are `unlimited`, or whose
/// `rate_limit.name` is in `replaced` (a limit another limit of the same request replaces),
/// are not counted. Answers are in the order of `plans`.
///
/// A refusal's status message is prefixed with the handler's name and `:`, and further
/// refusals of the same plan are added after `, `, as Istio 1.4's dispatcher wrote them
/// (`mixer/pkg/runtime/dispatcher/session.go`, `waitForDispatched`).
pub async fn allocate(
    snapshot: &Snapshot,
    plans: Vec<(QuotaPlan, &QuotaArgs)>,
    replaced: &[String],
) -> Vec<Result<QuotaOutcome, Undecided>> {
    // Per plan: where its calls went, where its dry-run calls went (with the index of their
    // rule in the plan's `dry_runs`) and its outcome so far. One vector rather than three:
    // this runs for every rate limit descriptor, and each vector is an allocation.
    let mut placed: Vec<PlacedPlan> = Vec::with_capacity(plans.len());
    // A quota charged by reports is only looked at by checks: they charge nothing and are
    // refused while fewer than its `min_remaining` units are left. Built only when some
    // dispatch asks for such a quota, which most requests never do.
    let looks: Vec<QuotaArgs> = if plans
        .iter()
        .any(|(plan, _)| plan_looks_only(snapshot, plan))
    {
        plans
            .iter()
            .map(|(_, args)| QuotaArgs {
                amount: 0,
                best_effort: false,
                ..(*args).clone()
            })
            .collect()
    } else {
        Vec::new()
    };
    // Which handler each plan's instances go to, in dispatch order; calls grouped by
    // handler. Declared after what its calls borrow, which it must not outlive.
    let mut groups: Groups<'_> = SmallVec::new();
    for (i, (plan, args)) in plans.iter().enumerate() {
        // Without looks no call is placed as one, so `args` stands in unused.
        let look = looks.get(i).unwrap_or(args);
        let mut route: Route = SmallVec::with_capacity(plan.dispatches.len());
        let mut outcome = QuotaOutcome {
            result: QuotaResult {
                status: Status::OK,
                valid_duration: DEFAULT_VALID_DURATION,
                granted_amount: args.amount,
                limit: None,
            },
            referenced: plan.referenced.clone(),
            instances: SmallVec::new(),
            refused: false,
            unlimited: false,
            quota_mode: false,
            dry_run: Vec::new(),
            failed_open: Vec::new(),
        };
        let mut saw_unlimited = false;
        for dispatch in &plan.dispatches {
            if let Some(behaviour) = snapshot.config.rate_limit(dispatch.instance_index) {
                if behaviour
                    .name
                    .as_ref()
                    .is_some_and(|n| replaced.contains(n))
                {
                    continue;
                }
                if behaviour.unlimited {
                    saw_unlimited = true;
                    continue;
                }
                outcome.quota_mode |= behaviour.quota_mode;
            }
            let Some(built) = snapshot.handlers.get(dispatch.handler) else {
                continue;
            };
            if built.handler.as_quota().is_none() {
                continue;
            }
            outcome.instances.push(Arc::clone(&dispatch.instance.name));
            route.push(place(snapshot, &mut groups, dispatch, args, look));
        }
        outcome.unlimited = saw_unlimited && outcome.instances.is_empty();
        let mut dry_route = Vec::new();
        for (run, dry) in plan.dry_runs.iter().enumerate() {
            for dispatch in &dry.dispatches {
                let Some(built) = snapshot.handlers.get(dispatch.handler) else {
                    continue;
                };
                if built.handler.as_quota().is_none() {
                    continue;
                }
                dry_route.push((run, place(snapshot, &mut groups, dispatch, args, look)));
            }
        }
        placed.push((route, dry_route, outcome));
    }
    // Most requests go to one handler: awaited alone, without joining.
    let answers: SmallVec<[Answers; 1]> = match groups.as_slice() {
        [] => SmallVec::new(),
        [(handler, calls)] => smallvec::smallvec![ask_handler(snapshot, *handler, calls).await],
        all => futures_util::future::join_all(
            all.iter()
                .map(|(handler, calls)| ask_handler(snapshot, *handler, calls)),
        )
        .await
        .into(),
    };
    plans
        .iter()
        .zip(placed)
        .map(|((plan, args), (route, dry_route, mut outcome))| {
            if let Some(failure) = &plan.failed {
                return Err(failure.clone());
            }
            for Planned {
                group,
                at,
                looks_only,
                instance,
            } in route
            {
                let built = &snapshot.handlers[groups[group].0];
                let Some(answer) = answers[group].get(at) else {
                    continue;
                };
                if let Some(stats) = snapshot.limit_stats(instance) {
                    let (built_instance, _) = groups[group].1[at];
                    stats.record(
                        answer,
                        args.amount,
                        built_instance,
                        snapshot.options.near_limit_ratio,
                    );
                }
                if looks_only {
                    combine(
                        snapshot,
                        &mut outcome,
                        built,
                        &passed_look(answer, args),
                        args,
                    )?;
                    continue;
                }
                combine(snapshot, &mut outcome, built, answer, args)?;
            }
            outcome.refused = refuses(&outcome.result, args);
            if !plan.dry_runs.is_empty() {
                outcome.dry_run =
                    dry_run_outcomes(snapshot, plan, &dry_route, &groups, &answers, args);
                snapshot.metrics.count_dry_runs(&outcome.dry_run);
            }
            Ok(outcome)
        })
        .collect()
}

/// Where one plan's calls were placed (see [`place`]): its enforced calls, its dry-run calls
/// with the index of their rule, and its outcome before the answers are combined into it.
type PlacedPlan = (Route, Vec<(usize, Planned)>, QuotaOutcome);

/// A request's calls grouped by handler, in the order the handlers were first met. Nearly
/// every request asks one handler for one allocation: then neither level allocates (this
/// runs for every rate limit decision that counts).
type Groups<'a> = SmallVec<[(usize, SmallVec<[QuotaCall<'a>; 1]>); 1]>;

/// Where one plan's enforced calls went, one for a descriptor one limit matched.
type Route = SmallVec<[Planned; 1]>;

/// One handler's answers, in the order of its calls.
type Answers = Vec<Result<QuotaResult, AdapterError>>;

/// Whether any of `plan`'s dispatches, enforced or dry-run, goes to a quota charged by
/// reports, which checks only look at (see [`place`]).
fn plan_looks_only(snapshot: &Snapshot, plan: &QuotaPlan) -> bool {
    let charged_by_reports = |dispatch: &Dispatch| {
        snapshot
            .config
            .instances
            .get(dispatch.instance_index)
            .is_some_and(|ic| ic.charged_by_reports())
    };
    plan.dispatches.iter().any(charged_by_reports)
        || plan
            .dry_runs
            .iter()
            .any(|dry| dry.dispatches.iter().any(charged_by_reports))
}

/// Places `dispatch`'s call in the group of its handler (a new group for a handler not seen
/// yet), asking for `look` instead of `args` when its quota is charged by reports, and says
/// where it went. Enforced and dry-run dispatches are placed alike, so that each handler is
/// called once for both.
fn place<'a>(
    snapshot: &Snapshot,
    groups: &mut Groups<'a>,
    dispatch: &'a Dispatch,
    args: &'a QuotaArgs,
    look: &'a QuotaArgs,
) -> Planned {
    let group = match groups.iter().position(|(h, _)| *h == dispatch.handler) {
        Some(g) => g,
        None => {
            groups.push((dispatch.handler, SmallVec::new()));
            groups.len() - 1
        }
    };
    let calls = &mut groups[group].1;
    let looks_only = snapshot
        .config
        .instances
        .get(dispatch.instance_index)
        .is_some_and(|ic| ic.charged_by_reports());
    calls.push((&dispatch.instance, if looks_only { look } else { args }));
    Planned {
        group,
        at: calls.len() - 1,
        looks_only,
        instance: dispatch.instance_index,
    }
}

/// Asks the handler at `handler` for every call of a request that goes to it, within its
/// deadline, as a child span of the request's trace.
async fn ask_handler(
    snapshot: &Snapshot,
    handler: usize,
    calls: &[QuotaCall<'_>],
) -> Vec<Result<QuotaResult, AdapterError>> {
    let built = &snapshot.handlers[handler];
    // A handler that answers without waiting (memquota) is asked on this stack: no boxed
    // future, no deadline to keep (it cannot run late). A traced request takes the awaited
    // path below, so that its span is around the call as for every other handler.
    if let Some(quota) = built.handler.as_quota()
        && !crate::traces::child_wanted()
        && let Some(answers) = quota.allocate_now(calls)
    {
        return answers;
    }
    let call = async move {
        match built.handler.as_quota() {
            // Past the deadline every allocation of the call has failed.
            Some(quota) => match built.deadline {
                Some(after) => {
                    within_deadline(after, quota.allocate_many(calls), || {
                        calls
                            .iter()
                            .map(|_| Err(deadline::timed_out(after)))
                            .collect()
                    })
                    .await
                }
                None => quota.allocate_many(calls).await,
            },
            None => Vec::new(),
        }
    };
    crate::traces::child(crate::traces::ADAPTER_CALL, Some(&built.name), call).await
}

/// `call`'s answer, or `timed_out()` when it has not answered `after` from its first wait.
///
/// A call that answers when first polled (memquota: memory never waits) gets no timer: a
/// tokio timeout takes the timer driver's lock when dropped, armed or not, and reads the
/// clock when made, on every rate limit decision. One that waits is bounded as before; the
/// deadline starts at its first wait, which is when it could start to run late.
pub(crate) async fn within_deadline<T>(
    after: Duration,
    call: impl std::future::Future<Output = T>,
    timed_out: impl FnOnce() -> T,
) -> T {
    let mut call = std::pin::pin!(call);
    let first = std::future::poll_fn(|cx| std::task::Poll::Ready(call.as_mut().poll(cx))).await;
    match first {
        std::task::Poll::Ready(answer) => answer,
        std::task::Poll::Pending => tokio::time::timeout(after, call)
            .await
            .unwrap_or_else(|_| timed_out()),
    }
}

/// The would-be answers of `plan`'s dry-run rules: each allowed unless one of its allocations
/// was refused (deny) or failed (error), the first such answer deciding it.
fn dry_run_outcomes(
    snapshot: &Snapshot,
    plan: &QuotaPlan,
    route: &[(usize, Planned)],
    groups: &[(usize, SmallVec<[QuotaCall<'_>; 1]>)],
    answers: &[Answers],
    args: &QuotaArgs,
) -> Vec<DryRunOutcome> {
    let mut outcomes: Vec<DryRunOutcome> = plan
        .dry_runs
        .iter()
        .map(|run| {
            let (would_be, status) = run.decided.clone().unwrap_or((WouldBe::Allow, Status::OK));
            DryRunOutcome {
                rule: run.rule.clone(),
                would_be,
                status,
            }
        })
        .collect();
    for (
        run,
        Planned {
            group,
            at,
            looks_only,
            ..
        },
    ) in route
    {
        let (Some(outcome), Some(answer)) = (
            outcomes.get_mut(*run),
            answers.get(*group).and_then(|a| a.get(*at)),
        ) else {
            continue;
        };
        let looked;
        let answer = if *looks_only {
            looked = passed_look(answer, args);
            &looked
        } else {
            answer
        };
        let built = &snapshot.handlers[groups[*group].0];
        let (would_be, status) = match answer {
            Ok(result) => {
                let refused = refuses(result, args);
                count_call(snapshot, built, refused);
                if !refused {
                    continue;
                }
                let message = match result.status.message.as_str() {
                    "" => format!("{}:quota exhausted", built.name),
                    m => format!("{}:{}", built.name, built.scrub(m)),
                };
                let code = match result.status.code {
                    Code::Ok => Code::ResourceExhausted,
                    c => c,
                };
                (WouldBe::Deny, Status::new(code, message))
            }
            Err(error) => {
                snapshot
                    .metrics
                    .handler_call(&built.name, "quota", error.kind.label());
                let message = format!(
                    "handler {} could not decide: {}",
                    built.name,
                    built.scrub(&error.message)
                );
                (WouldBe::Error, Status::new(Code::Unavailable, message))
            }
        };
        if outcome.would_be == WouldBe::Allow {
            outcome.would_be = would_be;
            outcome.status = status;
        }
    }
    outcomes
}

/// Adds one handler's answer to an ask's outcome: the smallest grant and validity, the
/// most constraining limit, every refusal's status (prefixed with the handler's name); an
/// error applies the handler's fail policy.
fn combine(
    snapshot: &Snapshot,
    outcome: &mut QuotaOutcome,
    built: &BuiltHandler,
    answer: &Result<QuotaResult, AdapterError>,
    args: &QuotaArgs,
) -> Result<(), Undecided> {
    match answer {
        Ok(result) => {
            let refused = refuses(result, args);
            count_call(snapshot, built, refused);
            let combined = &mut outcome.result;
            // Before the grant is combined: whether the request was refused so far.
            if more_constraining(result, combined, args) {
                combined.limit = result.limit.clone();
            }
            combined.granted_amount = combined.granted_amount.min(result.granted_amount);
            combined.valid_duration = combined.valid_duration.min(result.valid_duration);
            if !result.status.is_ok() {
                // A refusal reaches the client: never with a secret of the handler's params.
                let message = built.scrub(&result.status.message);
                let said = format!("{}:{message}", built.name);
                if combined.status.is_ok() {
                    combined.status = Status::new(result.status.code, said);
                } else {
                    combined.status.message = format!("{}, {said}", combined.status.message);
                }
            }
            Ok(())
        }
        Err(error) => {
            snapshot
                .metrics
                .handler_call(&built.name, "quota", error.kind.label());
            match built.fail_policy_for(Variety::Quota) {
                // Failing open grants the request, for no longer than this call.
                FailPolicy::Open => {
                    outcome.result.valid_duration = Duration::ZERO;
                    let error = AdapterError {
                        message: built.scrub(&error.message),
                        ..error.clone()
                    };
                    outcome.failed_open.push(HandlerFailure {
                        handler: built.name.clone(),
                        error: error.to_string(),
                    });
                    Ok(())
                }
                FailPolicy::Closed => Err(Undecided::Handler {
                    handler: built.name.clone(),
                    error: AdapterError {
                        message: built.scrub(&error.message),
                        ..error.clone()
                    },
                }),
            }
        }
    }
}

/// Counts a quota call that answered, on the handler's counters looked up when its snapshot
/// was built (by label only for a handler built without them).
fn count_call(snapshot: &Snapshot, built: &BuiltHandler, refused: bool) {
    match &built.quota_calls {
        Some(calls) if refused => calls.denied.inc(),
        Some(calls) => calls.ok.inc(),
        None => {
            let label = if refused { "denied" } else { "ok" };
            snapshot.metrics.handler_call(&built.name, "quota", label);
        }
    }
}

/// The answer to a look (a check on a quota charged by reports, asking for nothing) as an
/// answer to what the request asked: a look that passes grants it all.
fn passed_look(
    answer: &Result<QuotaResult, AdapterError>,
    args: &QuotaArgs,
) -> Result<QuotaResult, AdapterError> {
    answer.clone().map(|mut result| {
        if result.status.is_ok() {
            result.granted_amount = args.amount;
        }
        result
    })
}

/// Whether an answer refuses what was asked: a status other than OK, or (as Istio's memquota
/// refuses, with status OK) less than the amount when not asked with best effort.
fn refuses(result: &QuotaResult, args: &QuotaArgs) -> bool {
    !result.status.is_ok() || (result.granted_amount < args.amount && !args.best_effort)
}

/// What reading one counter without charging it came to ([`peek`], [`peek_plan`]).
#[derive(Clone, Debug)]
pub enum Peek {
    /// The limit, what is left and when the counter is full again.
    Read(QuotaLimit),
    /// The handler cannot read a counter without charging it (not memquota or redisquota).
    Unsupported,
    /// The handler failed (its store is down, the call timed out...).
    Failed(AdapterError),
}

/// A counter a quota plan selects, as [`peek_plan`] read it.
#[derive(Clone, Debug)]
pub struct PeekedCounter {
    /// The handler's full name.
    pub handler: Arc<str>,
    /// The quota instance, built from the request: its name and dimensions name the counter.
    pub instance: Instance,
    /// What the handler said.
    pub peek: Peek,
}

/// Reads the counter `instance` names in `handler` without charging it (the admin `/quota`
/// endpoint), within the handler's call deadline.
pub async fn peek(handler: &BuiltHandler, instance: &Instance) -> Peek {
    let Some(quota) = handler.handler.as_quota().filter(|q| q.can_peek()) else {
        return Peek::Unsupported;
    };
    let read = match handler.deadline {
        Some(after) => tokio::time::timeout(after, quota.peek(instance))
            .await
            .unwrap_or_else(|_| Err(deadline::timed_out(after))),
        None => quota.peek(instance).await,
    };
    match read {
        Ok(limit) => Peek::Read(limit),
        Err(e) => Peek::Failed(AdapterError {
            message: handler.scrub(&e.message),
            ..e
        }),
    }
}

/// Reads, without charging them, the counters `plan` selects (what [`allocate`] would
/// charge; an envoyproxy/ratelimit `unlimited` limit has none). Undecided when the plan
/// failed (an instance that cannot be built from the request).
pub async fn peek_plan(
    snapshot: &Snapshot,
    plan: &QuotaPlan,
) -> Result<Vec<PeekedCounter>, Undecided> {
    if let Some(failure) = &plan.failed {
        return Err(failure.clone());
    }
    let mut out = Vec::new();
    for dispatch in &plan.dispatches {
        if snapshot
            .config
            .rate_limit(dispatch.instance_index)
            .is_some_and(|b| b.unlimited)
        {
            continue;
        }
        let Some(built) = snapshot.handlers.get(dispatch.handler) else {
            continue;
        };
        if built.handler.as_quota().is_none() {
            continue;
        }
        out.push(PeekedCounter {
            handler: built.name.clone(),
            instance: dispatch.instance.clone(),
            peek: peek(built, &dispatch.instance).await,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::within_deadline;

    const DEADLINE: Duration = Duration::from_millis(50);

    // The paused clock: a timer that fired would move it.
    #[tokio::test(start_paused = true)]
    async fn a_call_answering_at_once_is_answered_without_waiting() {
        let started = tokio::time::Instant::now();
        let answer = within_deadline(DEADLINE, async { 7 }, || -1).await;
        assert_eq!(answer, 7);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_waits_and_answers_in_time_is_answered() {
        let call = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            7
        };
        let started = tokio::time::Instant::now();
        assert_eq!(within_deadline(DEADLINE, call, || -1).await, 7);
        assert_eq!(started.elapsed(), Duration::from_millis(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_waits_past_the_deadline_is_cut_at_the_deadline() {
        let started = tokio::time::Instant::now();
        let answer = within_deadline(DEADLINE, std::future::pending::<i32>(), || -1).await;
        assert_eq!(answer, -1);
        assert_eq!(started.elapsed(), DEADLINE);
    }

    // A call that yields once (woken at once, as a handler handing off to another task
    // might) is still bounded by the deadline, and answered when it answers in time.
    #[tokio::test(start_paused = true)]
    async fn a_call_that_yields_before_answering_is_answered() {
        let call = async {
            tokio::task::yield_now().await;
            7
        };
        assert_eq!(within_deadline(DEADLINE, call, || -1).await, 7);
    }
}
