//! Config snapshots: a validated config with its handlers built and its rules indexed.
//!
//! A snapshot is immutable. A request takes the active one at its start and finishes on it,
//! whatever reloads happen meanwhile.

use std::collections::HashMap;
use std::sync::Arc;

use mixer_adapter_api::host::FailPolicy;
use mixer_adapter_api::{AdapterError, BuildContext, Handler};
use mixer_config::{AdapterRegistry, Config, MatchErrorPolicy};
use mixer_model::{AttrId, Variety};

use crate::build_error::BuildError;
use crate::metrics::{CheckCalls, RuntimeMetrics};
use crate::reads::ReadAttrs;
use crate::report_queue::{QueueOptions, ReportQueue};
use crate::rules::{ByVariety, IdentityAttrs};
use crate::shared_exprs::SharedExprs;
use crate::verdicts::{CacheOptions, VerdictCache};

/// Settings that apply to every snapshot.
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// What a rule whose match fails to evaluate does when it does not say
    /// (Istio 1.4: no match).
    pub match_error_policy: MatchErrorPolicy,
    /// The check cache.
    pub cache: CacheOptions,
    /// Report queues and batching.
    pub reports: QueueOptions,
    /// Low-priority threads that turn report records into instances
    /// ([`crate::ReportExecutor`]); 0 does that work on the calling task.
    pub report_threads: usize,
    /// What one request may ask of the front ends.
    pub limits: crate::RequestLimits,
    /// How long a built-in handler's check or quota call may take before it fails with a
    /// timeout and its fail policy decides ([`crate::deadline`]).
    pub handler_timeout: std::time::Duration,
    /// The check cache shared by the replicas (`--shared-cache`), under the in-process one.
    pub shared_tier: Option<crate::SharedTierRef>,
    /// envoyproxy/ratelimit's `NEAR_LIMIT_RATIO`, for its `near_limit` statistic
    /// ([`crate::ratelimit_stats`]).
    pub near_limit_ratio: f32,
}

impl Default for RuntimeOptions {
    fn default() -> RuntimeOptions {
        RuntimeOptions {
            match_error_policy: MatchErrorPolicy::NoMatch,
            cache: CacheOptions::default(),
            reports: QueueOptions::default(),
            report_threads: 0,
            limits: crate::RequestLimits::default(),
            handler_timeout: crate::DEFAULT_HANDLER_TIMEOUT,
            shared_tier: None,
            near_limit_ratio: crate::ratelimit_stats::DEFAULT_NEAR_LIMIT_RATIO,
        }
    }
}

/// A handler built for a snapshot.
#[derive(Clone)]
pub struct BuiltHandler {
    /// Fully qualified name.
    pub name: Arc<str>,
    /// Adapter name.
    pub adapter: String,
    /// The handler.
    pub handler: Arc<dyn Handler>,
    /// The declared policy, if any; otherwise the default for the variety applies.
    pub fail_policy: Option<FailPolicy>,
    /// Whether its check results may be cached.
    pub cacheable: bool,
    /// The queue its report instances go through, for a report handler.
    pub(crate) queue: Option<Arc<ReportQueue>>,
    /// Its check call counters, for a check handler.
    pub(crate) check_calls: Option<CheckCalls>,
    /// Its quota call counters, for a quota handler.
    pub(crate) quota_calls: Option<CheckCalls>,
    /// The dispatcher's bound on its check and quota calls ([`crate::deadline`]); `None` for
    /// a handler that bounds its own ([`mixer_adapter_api::host::AnyAdapter::own_call_timeout`]).
    pub(crate) deadline: Option<std::time::Duration>,
    /// Shared by every snapshot that holds this handler; closes it when the last one drops.
    pub(crate) lease: Arc<Lease>,
    /// What removes the secrets of its params from the texts it answers (a denial built
    /// from params, an error), which go to clients; `None` when its params hold none.
    pub(crate) secrets: Option<Arc<mixer_adapter_api::secrets::Redactor>>,
}

/// Closes a handler once no snapshot holds it: when the last snapshot that uses it drops
/// (requests still running on a replaced snapshot hold it until they finish), its report
/// queue is delivered and the handler closed. A snapshot that reuses the handler shares the
/// lease, so a reload that keeps a handler never closes it; a snapshot that fails to build
/// closes the handlers it had built.
pub(crate) struct Lease {
    handler: Arc<dyn Handler>,
    queue: Option<Arc<ReportQueue>>,
    /// Set when shutdown closed the handler itself.
    closed: std::sync::atomic::AtomicBool,
}

impl Lease {
    pub(crate) fn new(handler: &Arc<dyn Handler>, queue: Option<&Arc<ReportQueue>>) -> Arc<Lease> {
        Arc::new(Lease {
            handler: handler.clone(),
            queue: queue.cloned(),
            closed: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Shutdown closes the handler itself; dropping the lease then does nothing more.
    pub(crate) fn mark_closed(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        // Outside a runtime (`mixer validate` building a snapshot) there is nothing to close
        // on; handlers built there hold no connections yet.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let handler = self.handler.clone();
        let queue = self.queue.take();
        rt.spawn(async move {
            if let Some(queue) = &queue {
                queue.close(std::time::Duration::from_secs(10)).await;
            }
            drop(queue);
            handler.close().await;
        });
    }
}

/// The handler's redactor, when its params hold a secret.
fn secrets_of(
    hc: &mixer_config::HandlerConfig,
) -> Option<Arc<mixer_adapter_api::secrets::Redactor>> {
    (!hc.redactor.secrets().is_empty()).then(|| Arc::new(hc.redactor.clone()))
}

impl BuiltHandler {
    /// `text` (an answer or an error of this handler, on its way to a client) without the
    /// secrets of its params.
    pub(crate) fn scrub(&self, text: &str) -> String {
        match &self.secrets {
            Some(secrets) => secrets.scrub(text),
            None => text.to_string(),
        }
    }

    /// The failure policy for a call of `variety`.
    pub fn fail_policy_for(&self, variety: Variety) -> FailPolicy {
        self.fail_policy
            .unwrap_or_else(|| FailPolicy::default_for(variety))
    }
}

/// An immutable, ready-to-serve config.
pub struct Snapshot {
    /// Increases by one with every snapshot activated.
    pub id: u64,
    /// The validated config it was built from.
    pub config: Arc<Config>,
    /// Handlers, aligned with `config.handlers`.
    pub handlers: Vec<BuiltHandler>,
    pub(crate) default_rules: ByVariety,
    pub(crate) namespaced: HashMap<Arc<str>, ByVariety>,
    pub(crate) identity: IdentityAttrs,
    pub(crate) options: RuntimeOptions,
    pub(crate) metrics: RuntimeMetrics,
    /// `mixer_rule_matches_total` of each rule, aligned with `config.rules`, resolved once
    /// rather than by label on every match.
    pub(crate) rule_matches: Vec<prometheus::IntCounter>,
    /// The `sampling` of each rule that has one, aligned with `config.rules`.
    pub(crate) samplers: Vec<Option<crate::sampling::Sampler>>,
    /// Instance field expressions by distinct text, for report evaluations.
    pub(crate) shared_exprs: SharedExprs,
    /// The attributes evaluation can read ([`Snapshot::reads_attribute`]).
    pub(crate) reads: ReadAttrs,
    pub(crate) cache: Option<VerdictCache>,
    /// What replicas must have in common to share cached verdicts (set by the [`crate::Runtime`]
    /// that activates the snapshot; `None` shares nothing): see `Runtime::generation`.
    pub(crate) generation: Option<Arc<str>>,
    /// Whether any rule sends an attribute generator's instance: without one, the preprocess
    /// phase is this one test ([`crate::preprocess`]).
    pub(crate) generates: bool,
    /// envoyproxy/ratelimit's statistics of each limit, aligned with `config.rate_limits`.
    pub(crate) rate_limit_stats: Vec<Option<Arc<crate::ratelimit_stats::LimitStats>>>,
    /// The decision-log rules; `None` when there are none, so that not logging costs one test.
    pub(crate) decision_log: Option<crate::decision_log::DecisionLog>,
    /// The config hash `/readyz` reports (set by the [`crate::Runtime`] that activates the
    /// snapshot), which decision records name their config by.
    pub(crate) config_hash: Option<Arc<str>>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("id", &self.id)
            .field("handlers", &self.handlers.len())
            .field("rules", &self.config.rules.len())
            .finish()
    }
}

/// A newly built snapshot. Handlers of the previous one it no longer uses are closed when
/// the previous snapshot drops (see [`Lease`]).
pub struct Built {
    /// The new snapshot.
    pub snapshot: Snapshot,
}

impl Snapshot {
    /// Builds a snapshot. Handlers whose config is unchanged from `previous` are reused, not
    /// rebuilt; start-up is a build with no previous snapshot.
    pub fn build(
        id: u64,
        config: Config,
        registry: &AdapterRegistry,
        previous: Option<&Snapshot>,
        options: &RuntimeOptions,
        metrics: &RuntimeMetrics,
    ) -> Result<Built, Vec<BuildError>> {
        let mut errors = Vec::new();
        let mut handlers = Vec::with_capacity(config.handlers.len());
        for hc in &config.handlers {
            let old = previous.and_then(|p| {
                p.config
                    .handlers
                    .iter()
                    .position(|o| o.name == hc.name && o.same_build(hc))
            });
            if let (Some(i), Some(prev)) = (old, previous) {
                handlers.push(prev.handlers[i].clone());
                continue;
            }
            // An adapter's error may quote its params: never with their secrets.
            let fail = |message: String| BuildError {
                file: hc.file.clone(),
                handler: hc.name.to_string(),
                message: hc.scrub(&message),
            };
            let Some(adapter) = registry.adapter_for(hc) else {
                errors.push(fail(if hc.connection.is_some() {
                    format!(
                        "adapter {:?} has a connection but this mixer has no out-of-process adapter support",
                        hc.adapter
                    )
                } else {
                    format!(
                        "adapter {:?} is not available in this mixer (give a connection for an out-of-process adapter)",
                        hc.adapter
                    )
                }));
                continue;
            };
            let ctx = BuildContext {
                handler_name: hc.name.clone(),
            };
            // Compiled when config loaded; a config assembled in code is compiled here.
            let compiled = match &hc.compiled {
                Some(compiled) => Ok(compiled.clone()),
                None => adapter
                    .compile(&hc.params)
                    .map_err(AdapterError::invalid_config),
            };
            let built = compiled.and_then(|compiled| {
                let handler = adapter.build_compiled(&compiled, &ctx)?;
                // One rule for every handler: one that bounds its own calls (an
                // out-of-process handler, at its connection's timeout) gets no second
                // deadline from the dispatcher; the others get the mixer's.
                let deadline = match adapter.own_call_timeout(&compiled) {
                    Some(_) => None,
                    None => Some(options.handler_timeout),
                };
                Ok((handler, adapter.templates_of(&compiled), deadline))
            });
            match built {
                Ok((handler, templates, _))
                    if let Some(message) =
                        missing_variety(adapter.info().name, &templates, &*handler) =>
                {
                    errors.push(fail(message));
                }
                Ok((handler, _, deadline)) => handlers.push({
                    // A quota handler gets one too: report rules may charge it usage, and a
                    // charge that fails is retried from the queue as a report would be.
                    let queue = (handler.as_report().is_some() || handler.as_quota().is_some())
                        .then(|| {
                            ReportQueue::new(
                                hc.name.clone(),
                                handler.clone(),
                                options.reports,
                                metrics,
                            )
                        });
                    BuiltHandler {
                        name: hc.name.clone(),
                        adapter: hc.adapter.clone(),
                        check_calls: handler.as_check().map(|_| metrics.check_calls(&hc.name)),
                        quota_calls: handler.as_quota().map(|_| metrics.quota_calls(&hc.name)),
                        lease: Lease::new(&handler, queue.as_ref()),
                        queue,
                        handler,
                        fail_policy: hc.fail_policy,
                        cacheable: adapter.info().cacheable,
                        deadline,
                        secrets: secrets_of(hc),
                    }
                }),
                Err(e) => errors.push(fail(e.message)),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }

        let default_ns = config.default_namespace.clone();
        let mut by_namespace: HashMap<Arc<str>, Vec<usize>> = HashMap::new();
        let mut default_rules = Vec::new();
        for (i, rule) in config.rules.iter().enumerate() {
            if rule.namespace == default_ns {
                default_rules.push(i);
            } else {
                by_namespace
                    .entry(rule.namespace.clone())
                    .or_default()
                    .push(i);
            }
        }
        let vocabulary = &config.vocabulary;
        let identity = IdentityAttrs {
            reporter_kind: vocabulary.lookup("context.reporter.kind"),
            source_namespace: vocabulary.lookup("source.namespace"),
            destination_namespace: vocabulary.lookup("destination.namespace"),
        };
        let default_rules = ByVariety::build(&config, &default_rules, options.match_error_policy);
        let namespaced: HashMap<Arc<str>, ByVariety> = by_namespace
            .into_iter()
            .map(|(ns, rules)| {
                let set = ByVariety::build(&config, &rules, options.match_error_policy);
                (ns, set)
            })
            .collect();
        let rule_matches = config
            .rules
            .iter()
            .map(|r| metrics.rule_matches.with_label_values(&[r.name.as_ref()]))
            .collect();
        let request_id = config.vocabulary.lookup("request.id");
        let samplers = config
            .rules
            .iter()
            .map(|r| {
                let sampling = r.sampling.as_ref()?;
                let out = metrics
                    .report_sampled_out
                    .with_label_values(&[r.name.as_ref()]);
                Some(crate::sampling::Sampler::new(sampling, request_id, out))
            })
            .collect();
        let generates = default_rules.get(Variety::AttributeGenerator).rules.len()
            + namespaced
                .values()
                .map(|s: &ByVariety| s.get(Variety::AttributeGenerator).rules.len())
                .sum::<usize>()
            > 0;
        let rate_limit_stats = metrics.rate_limit_stats.resolve(&config.rate_limits);
        Ok(Built {
            snapshot: Snapshot {
                generates,
                rate_limit_stats,
                decision_log: crate::decision_log::DecisionLog::build(
                    &config,
                    handlers.iter().filter_map(|h| h.secrets.clone()).collect(),
                    &metrics.decision_log_sampled_out,
                ),
                config_hash: None,
                rule_matches,
                samplers,
                shared_exprs: SharedExprs::new(&config),
                reads: ReadAttrs::new(&config, &identity),
                id,
                config: Arc::new(config),
                handlers,
                default_rules,
                namespaced,
                identity,
                options: options.clone(),
                metrics: metrics.clone(),
                cache: VerdictCache::new(options.cache, metrics, options.shared_tier.clone()),
                generation: None,
            },
        })
    }

    /// An empty snapshot (no rules: every check is allowed).
    pub fn empty(metrics: &RuntimeMetrics) -> Snapshot {
        let config = Config::empty();
        let default_rules = ByVariety::default();
        Snapshot {
            id: 0,
            identity: IdentityAttrs {
                reporter_kind: None,
                source_namespace: None,
                destination_namespace: None,
            },
            config: Arc::new(config),
            handlers: Vec::new(),
            default_rules,
            namespaced: HashMap::new(),
            options: RuntimeOptions::default(),
            metrics: metrics.clone(),
            rule_matches: Vec::new(),
            samplers: Vec::new(),
            shared_exprs: SharedExprs::default(),
            reads: ReadAttrs::default(),
            cache: None,
            generation: None,
            rate_limit_stats: Vec::new(),
            generates: false,
            decision_log: None,
            config_hash: None,
        }
    }

    /// The vocabulary bags for this snapshot must be built with.
    pub fn vocabulary(&self) -> &Arc<mixer_model::Vocabulary> {
        &self.config.vocabulary
    }

    /// Whether any rule, in any namespace, sends instances of `variety` (so a front end can
    /// skip asking, say, for quota when no rule charges any).
    pub fn has_rules(&self, variety: Variety) -> bool {
        !self.default_rules.get(variety).rules.is_empty()
            || self
                .namespaced
                .values()
                .any(|set| !set.get(variety).rules.is_empty())
    }

    /// How many rules are filed in the literal index (the rest are evaluated every time).
    pub fn indexed_rules(&self) -> usize {
        self.default_rules.indexed()
            + self
                .namespaced
                .values()
                .map(ByVariety::indexed)
                .sum::<usize>()
    }
}

impl Snapshot {
    /// Whether any rule logs decisions: a front end takes a decision's start time only then,
    /// and checks record what they read for it.
    pub fn logs_decisions(&self) -> bool {
        self.decision_log.is_some()
    }

    /// Logs `decision` of the request whose attributes are `bag`, through every decision-log
    /// rule whose match is true and whose sampling keeps it, on its handler's report queue
    /// (a full queue drops it, counted). Returns how many records were queued. Without a
    /// decision-log rule, this returns at once.
    pub fn log_decision(
        &self,
        bag: &dyn mixer_model::Bag,
        decision: &crate::Decision<'_>,
    ) -> usize {
        let Some(log) = &self.decision_log else {
            return 0;
        };
        // Each record moves to its queue: no copy of it is made.
        let mut queued = 0;
        log.records(
            &self.config,
            self.config_hash.as_ref(),
            bag,
            decision,
            |handler, instance| {
                let queue = self.handlers.get(handler).and_then(|h| h.queue.as_ref());
                if queue.is_some_and(|q| q.push(instance)) {
                    queued += 1;
                }
            },
        );
        queued
    }

    /// The records `decision` gives, without queueing them (for `mixer test`).
    pub fn decision_records(
        &self,
        bag: &dyn mixer_model::Bag,
        decision: &crate::Decision<'_>,
    ) -> Vec<mixer_model::Instance> {
        let mut records = Vec::new();
        if let Some(log) = &self.decision_log {
            log.records(
                &self.config,
                self.config_hash.as_ref(),
                bag,
                decision,
                |_, instance| records.push(instance),
            );
        }
        records
    }

    /// Whether evaluating this snapshot's rules can read attribute `id` (of
    /// [`Snapshot::vocabulary`]). A report bag needs only these: [`crate::report`] reads
    /// nothing else, so a front end may leave the rest out once it has checked them.
    pub fn reads_attribute(&self, id: AttrId) -> bool {
        self.reads.reads(id)
    }

    /// Appends envoyproxy/ratelimit's statistics of this snapshot's limits to a Prometheus
    /// text exposition ([`crate::ratelimit_stats`]).
    pub fn render_rate_limit_stats(&self, out: &mut String) {
        crate::ratelimit_stats::render(&self.rate_limit_stats, out);
    }

    /// The statistics of the limit of the quota instance at `instance` (an index into
    /// `config.instances`), when envoyproxy/ratelimit's format wrote it.
    pub(crate) fn limit_stats(
        &self,
        instance: usize,
    ) -> Option<&crate::ratelimit_stats::LimitStats> {
        let at = self
            .config
            .rate_limits
            .binary_search_by_key(&instance, |r| r.instance)
            .ok()?;
        self.rate_limit_stats.get(at)?.as_deref()
    }

    /// Verdicts held in this snapshot's check cache (after pending evictions ran).
    pub fn cached_verdicts(&self) -> u64 {
        self.cache.as_ref().map_or(0, VerdictCache::len)
    }

    /// Drops every cached verdict of this snapshot.
    pub fn clear_cache(&self) {
        if let Some(cache) = &self.cache {
            cache.invalidate_all();
        }
    }

    /// Delivers what the report queues of this snapshot's handlers hold and stops them,
    /// waiting at most `deadline` per handler. For shutdown.
    pub async fn close_report_queues(&self, deadline: std::time::Duration) {
        // All at once, so that `deadline` bounds the whole shutdown, not each handler's.
        let mut closing = tokio::task::JoinSet::new();
        for q in self.handlers.iter().filter_map(|h| h.queue.clone()) {
            closing.spawn(async move { q.close(deadline).await });
        }
        while closing.join_next().await.is_some() {}
    }
}

/// Why a built handler cannot serve what its adapter declares: a template of a variety whose
/// handler trait the handler does not implement. Serving such a config would skip the handler
/// on every request, so a check routed to it would be allowed without being asked.
/// `templates`: what the adapter declares for this handler's params.
fn missing_variety(
    adapter: &str,
    templates: &[mixer_model::Template],
    handler: &dyn Handler,
) -> Option<String> {
    templates.iter().find_map(|template| {
        let (serves, what) = match template.variety() {
            Variety::Check => (handler.as_check().is_some(), "checks"),
            Variety::Quota => (handler.as_quota().is_some(), "quotas"),
            Variety::Report => (handler.as_report().is_some(), "reports"),
            Variety::AttributeGenerator => (handler.as_attributes().is_some(), "attributes"),
        };
        (!serves).then(|| {
            format!(
                "adapter {adapter:?} declares template {} but its handler does not answer {what}",
                template.name()
            )
        })
    })
}
