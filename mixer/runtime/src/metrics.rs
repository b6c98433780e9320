//! The mixer's own metrics, all prefixed `mixer_`.

use std::sync::Arc;

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use crate::report_executor::CheckActivity;

/// Counters the runtime keeps; registered once in a [`Registry`] the admin endpoint serves.
#[derive(Clone, Debug)]
pub struct RuntimeMetrics {
    /// `mixer_config_reloads_total{result="success|failure"}`.
    pub reloads: IntCounterVec,
    /// `mixer_config_reload_failures_total`.
    pub reload_failures: IntCounter,
    /// `mixer_config_info{hash,files_hash}`: 1, labelled with the config hash of the active
    /// config (what it resolved to: replicas deciding alike have the same) and the hash of
    /// its files (see `ConfigContent`), so dashboards and alerts can compare replicas.
    pub config_info: IntGaugeVec,
    /// `mixer_config_stale`: 1 while the last reload was rejected and an older content
    /// serves.
    pub config_stale: IntGauge,
    /// `mixer_config_checks_total{trigger="event|interval"}`: looks at the config files by
    /// the watcher, whether or not they changed.
    pub config_checks: IntCounterVec,
    /// `mixer_config_snapshot_id`: id of the active snapshot.
    pub snapshot_id: IntGauge,
    /// `mixer_config_handlers`: handlers in the active snapshot.
    pub handlers: IntGauge,
    /// `mixer_config_rules`: rules in the active snapshot.
    pub rules: IntGauge,
    /// `mixer_config_dropped_documents{name,reason}`: 1 for each document the active snapshot
    /// was built without (`--invalid-config skip`); `reason` is `invalid` or `dependency`.
    pub dropped_documents: IntGaugeVec,
    /// `mixer_rule_matches_total{rule}`.
    pub rule_matches: IntCounterVec,
    /// `mixer_rule_match_errors_total{rule,policy}`: matches that could not be evaluated.
    pub match_errors: IntCounterVec,
    /// `mixer_rule_dry_run_total{rule,verdict}`: what matched dry-run rules would have
    /// decided (`allow`, `deny`, `error`), per decision served, from the cache or not.
    pub rule_dry_run: IntCounterVec,
    /// `mixer_report_sampled_out_total{rule}`: report records a rule's `sampling` kept from
    /// its actions.
    pub report_sampled_out: IntCounterVec,
    /// `mixer_decision_log_sampled_out_total{rule}`: decisions a decision-log rule's match
    /// held for and its `percentSampled` kept from the log.
    pub decision_log_sampled_out: IntCounterVec,
    /// `mixer_instance_errors_total{instance}`: instances that could not be built (a field
    /// read an absent attribute or failed), so were not sent.
    pub instance_errors: IntCounterVec,
    /// `mixer_handler_calls_total{handler,variety,result}`.
    pub handler_calls: IntCounterVec,
    /// `mixer_checks_total{result="allowed|denied|error"}`.
    pub checks: IntCounterVec,
    /// `checks` by result, looked up once.
    pub check_results: CheckResults,
    /// `mixer_check_cache_hits_total`.
    pub cache_hits: IntCounter,
    /// `mixer_check_cache_misses_total`.
    pub cache_misses: IntCounter,
    /// `mixer_check_cache_evictions_total`: verdicts dropped to stay within the size bound.
    pub cache_evictions: IntCounter,
    /// `mixer_check_cache_entries`: verdicts held by the active snapshot's cache.
    pub cache_entries: IntGauge,
    /// `mixer_report_delivered_total{handler}`: report records a handler accepted.
    pub report_delivered: IntCounterVec,
    /// `mixer_report_dropped_total{handler,reason}`: report records lost, and why.
    pub report_dropped: IntCounterVec,
    /// `mixer_report_queued{handler}`: records waiting in a handler's queue.
    pub report_queued: IntGaugeVec,
    /// `mixer_check_duration_seconds`: time to decide a check inside the mixer (cache,
    /// rules and handler calls), from 10 µs up.
    pub check_duration: Histogram,
    /// When checks were last served (not exported): reports yield to checks while there are
    /// any, see [`crate::ReportExecutor`].
    pub check_activity: Arc<CheckActivity>,
    /// envoyproxy/ratelimit's statistics of every snapshot's limits, by key (exported from
    /// the active snapshot by [`crate::Snapshot::render_rate_limit_stats`]).
    pub rate_limit_stats: Arc<crate::ratelimit_stats::RateLimitStatsRegistry>,
}

/// Bucket bounds of `mixer_check_duration_seconds`: fine below a millisecond, where checks
/// are meant to be decided, coarse above for handlers that call out.
const CHECK_DURATION_BUCKETS: [f64; 14] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1,
    0.25, 1.0,
];

impl RuntimeMetrics {
    /// Counts would-be verdicts in `mixer_rule_dry_run_total`, once per decision served
    /// (checks and quotas alike, so it lives with the metrics both share).
    pub(crate) fn count_dry_runs(&self, outcomes: &[mixer_model::DryRunOutcome]) {
        for o in outcomes {
            self.rule_dry_run
                .with_label_values(&[o.rule.as_ref(), o.would_be.label()])
                .inc();
        }
    }

    /// Creates the metrics and registers them in `registry`.
    pub fn new(registry: &Registry) -> Result<RuntimeMetrics, prometheus::Error> {
        let counter_vec =
            |name: &str, help: &str, labels: &[&str]| -> Result<IntCounterVec, prometheus::Error> {
                let c = IntCounterVec::new(Opts::new(name, help), labels)?;
                registry.register(Box::new(c.clone()))?;
                Ok(c)
            };
        let gauge = |name: &str, help: &str| -> Result<IntGauge, prometheus::Error> {
            let g = IntGauge::new(name, help)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let counter = |name: &str, help: &str| -> Result<IntCounter, prometheus::Error> {
            let c = IntCounter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let reload_failures = IntCounter::new(
            "mixer_config_reload_failures_total",
            "Config loads rejected (the previous snapshot stayed active)",
        )?;
        registry.register(Box::new(reload_failures.clone()))?;
        let check_duration = Histogram::with_opts(
            HistogramOpts::new(
                "mixer_check_duration_seconds",
                "Time the mixer took to decide a check: cache, rules and handler calls (not the protocol's decoding and encoding)",
            )
            .buckets(CHECK_DURATION_BUCKETS.to_vec()),
        )?;
        registry.register(Box::new(check_duration.clone()))?;
        let checks = counter_vec(
            "mixer_checks_total",
            "Check decisions by result",
            &["result"],
        )?;
        let check_results = CheckResults {
            allowed: checks.with_label_values(&["allowed"]),
            denied: checks.with_label_values(&["denied"]),
            error: checks.with_label_values(&["error"]),
        };
        Ok(RuntimeMetrics {
            check_duration,
            check_activity: Arc::new(CheckActivity::new()),
            rate_limit_stats: Arc::default(),
            reloads: counter_vec(
                "mixer_config_reloads_total",
                "Config loads by result",
                &["result"],
            )?,
            reload_failures,
            config_info: {
                let g = IntGaugeVec::new(
                    Opts::new(
                        "mixer_config_info",
                        "1, labelled with the config hash of the active config (files, environment, modules, lists, secrets) and the hash of its files",
                    ),
                    &["hash", "files_hash"],
                )?;
                registry.register(Box::new(g.clone()))?;
                g
            },
            config_stale: gauge(
                "mixer_config_stale",
                "1 while the config on disk was rejected and an older content serves",
            )?,
            config_checks: counter_vec(
                "mixer_config_checks_total",
                "Looks at the config files by the watcher, by what prompted them",
                &["trigger"],
            )?,
            snapshot_id: gauge(
                "mixer_config_snapshot_id",
                "Id of the active config snapshot",
            )?,
            handlers: gauge(
                "mixer_config_handlers",
                "Handlers in the active config snapshot",
            )?,
            rules: gauge("mixer_config_rules", "Rules in the active config snapshot")?,
            rule_matches: counter_vec(
                "mixer_rule_matches_total",
                "Rules whose match was true",
                &["rule"],
            )?,
            match_errors: counter_vec(
                "mixer_rule_match_errors_total",
                "Rule matches that failed to evaluate, by the policy applied",
                &["rule", "policy"],
            )?,
            rule_dry_run: counter_vec(
                "mixer_rule_dry_run_total",
                "Would-be verdicts of matched dry-run (not enforced) rules, per decision served",
                &["rule", "verdict"],
            )?,
            report_sampled_out: counter_vec(
                "mixer_report_sampled_out_total",
                "Report records a rule's sampling kept from its actions",
                &["rule"],
            )?,
            decision_log_sampled_out: counter_vec(
                "mixer_decision_log_sampled_out_total",
                "Decisions a decision-log rule's percentSampled kept from the log",
                &["rule"],
            )?,
            instance_errors: counter_vec(
                "mixer_instance_errors_total",
                "Instances not built because a field's expression failed (the check fails INTERNAL; the report's other instances are sent and it fails UNKNOWN)",
                &["instance"],
            )?,
            handler_calls: counter_vec(
                "mixer_handler_calls_total",
                "Handler calls by result",
                &["handler", "variety", "result"],
            )?,
            checks,
            check_results,
            cache_hits: counter(
                "mixer_check_cache_hits_total",
                "Checks answered from the check cache",
            )?,
            cache_misses: counter(
                "mixer_check_cache_misses_total",
                "Checks the check cache could not answer",
            )?,
            cache_evictions: counter(
                "mixer_check_cache_evictions_total",
                "Cached verdicts dropped to stay within the cache size",
            )?,
            cache_entries: gauge(
                "mixer_check_cache_entries",
                "Verdicts in the active check cache",
            )?,
            report_delivered: counter_vec(
                "mixer_report_delivered_total",
                "Report records delivered to their handler",
                &["handler"],
            )?,
            report_dropped: counter_vec(
                "mixer_report_dropped_total",
                "Report records dropped, by handler and reason",
                &["handler", "reason"],
            )?,
            dropped_documents: {
                let g = IntGaugeVec::new(
                    Opts::new(
                        "mixer_config_dropped_documents",
                        "Documents the active config snapshot was built without: invalid, or needing one that is",
                    ),
                    &["name", "reason"],
                )?;
                registry.register(Box::new(g.clone()))?;
                g
            },
            report_queued: {
                let g = IntGaugeVec::new(
                    Opts::new(
                        "mixer_report_queued",
                        "Report records waiting in a handler's queue",
                    ),
                    &["handler"],
                )?;
                registry.register(Box::new(g.clone()))?;
                g
            },
        })
    }

    /// A check handler's call counters for its common outcomes, to look up once when its
    /// snapshot is built rather than by label for every call.
    pub fn check_calls(&self, handler: &str) -> CheckCalls {
        CheckCalls {
            ok: self
                .handler_calls
                .with_label_values(&[handler, "check", "ok"]),
            denied: self
                .handler_calls
                .with_label_values(&[handler, "check", "denied"]),
        }
    }

    /// [`RuntimeMetrics::check_calls`] for a quota handler: its allocations that granted
    /// (`ok`) and refused (`denied`).
    pub fn quota_calls(&self, handler: &str) -> CheckCalls {
        CheckCalls {
            ok: self
                .handler_calls
                .with_label_values(&[handler, "quota", "ok"]),
            denied: self
                .handler_calls
                .with_label_values(&[handler, "quota", "denied"]),
        }
    }

    /// Counts one handler call; labels are borrowed, so the hot path does not allocate them.
    pub fn handler_call(&self, handler: &str, variety: &str, result: &str) {
        self.handler_calls
            .with_label_values(&[handler, variety, result])
            .inc();
    }

    /// Metrics registered in a private registry, for tests and tools.
    pub fn unregistered() -> RuntimeMetrics {
        // A fresh registry cannot hold duplicates, so registration cannot fail here.
        match RuntimeMetrics::new(&Registry::new()) {
            Ok(m) => m,
            Err(e) => unreachable_metrics(e),
        }
    }
}

/// `mixer_handler_calls_total` of one check handler, for calls that answered (`ok` or
/// `denied`); errors are counted by label, being rare and of many kinds.
#[derive(Clone, Debug)]
pub struct CheckCalls {
    /// Calls that allowed.
    pub ok: IntCounter,
    /// Calls that denied.
    pub denied: IntCounter,
}

/// `mixer_checks_total` by result, looked up once.
#[derive(Clone, Debug)]
pub struct CheckResults {
    /// Checks allowed.
    pub allowed: IntCounter,
    /// Checks denied.
    pub denied: IntCounter,
    /// Checks the mixer could not decide.
    pub error: IntCounter,
}

#[cold]
fn unreachable_metrics(e: prometheus::Error) -> ! {
    panic!("metric definitions are invalid: {e}")
}
