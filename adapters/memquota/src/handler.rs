//! memquota's handler: selects quota, limit and key, asks the [`Store`], builds the result.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, Exposition, Handler, QuotaArgs, QuotaCall, QuotaHandler};
use mixer_adapter_quota_common::{
    Decision, Metrics, Refusal, finish, finish_with_minimum, min_remaining, render_one,
};
use mixer_model::{Instance, QuotaLimit, QuotaResult};

use crate::config::MemQuotaConfig;
use crate::store::{Store, Take};

thread_local! {
    /// The counter key of this thread's allocation, kept between allocations: the store
    /// copies a key only for a counter it starts tracking, so a buffer per allocation was an
    /// allocation for nothing on every counted request.
    static KEY_BUFFER: std::cell::Cell<String> = const { std::cell::Cell::new(String::new()) };
}

/// Metric names start with this.
pub const METRIC_PREFIX: &str = "mixer_memquota";

/// Allocates quota from counters in this process's memory.
#[derive(Debug)]
pub struct MemQuotaHandler {
    config: MemQuotaConfig,
    store: Store,
    metrics: Metrics,
    name: Arc<str>,
}

impl MemQuotaHandler {
    /// A handler for validated params.
    pub fn new(config: MemQuotaConfig, name: Arc<str>) -> MemQuotaHandler {
        let store = Store::new(config.max_keys, config.min_deduplication_duration);
        let metrics = Metrics::new(
            &name,
            config
                .quotas
                .quotas
                .iter()
                .map(|q| q.name.to_string())
                .collect(),
        );
        MemQuotaHandler {
            config,
            store,
            metrics,
            name,
        }
    }

    /// Counters tracked now (never more than `maxKeys`).
    pub fn tracked_keys(&self) -> usize {
        self.store.len()
    }

    /// Deduplication ids remembered now (never more than `maxKeys`).
    pub fn remembered_ids(&self) -> usize {
        self.store.dedup_len()
    }

    /// Drops every counter that is back to its fresh state and every expired deduplication
    /// id. Allocations do this a little at a time; this does all of it.
    pub fn sweep(&self) {
        self.store.sweep();
    }

    /// The per-quota counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

impl Handler for MemQuotaHandler {
    fn as_quota(&self) -> Option<&dyn QuotaHandler> {
        Some(self)
    }

    fn as_exposition(&self) -> Option<&dyn Exposition> {
        Some(self)
    }
}

impl MemQuotaHandler {
    /// One check's allocation. Memory never waits, so a request's allocations are made one
    /// after the other on the caller's task, without a future per allocation.
    fn check(&self, instance: &Instance, args: &QuotaArgs) -> Result<QuotaResult, AdapterError> {
        let sel =
            self.config
                .quotas
                .select_with_in(instance, args.limit_override, KEY_BUFFER.take())?;
        let min = min_remaining(instance);
        let decision = if args.amount <= 0 && min == 0 {
            // Istio released quota for negative amounts; rate limits have nothing to release.
            Decision::nothing(sel.limit.max_amount)
        } else {
            self.store.allocate(
                &sel.key,
                &sel.limit,
                args.amount.max(0),
                Take::Check {
                    best_effort: args.best_effort,
                    min_remaining: min,
                },
                &args.deduplication_id,
            )
        };
        let result = finish_with_minimum(
            Refusal::GrantNothing,
            &sel,
            args,
            min,
            decision,
            &self.metrics,
        );
        if sel.limit.shadow && !result.status.message.is_empty() {
            tracing::debug!(handler = %self.name, key = %sel.key, "{}", result.status.message);
        }
        tracing::trace!(handler = %self.name, key = %sel.key, granted = result.granted_amount, "memquota allocation");
        KEY_BUFFER.set(sel.key);
        Ok(result)
    }

    /// Every call of a request, in order.
    fn check_all(&self, calls: &[QuotaCall<'_>]) -> Vec<Result<QuotaResult, AdapterError>> {
        calls
            .iter()
            .map(|(instance, args)| self.check(instance, args))
            .collect()
    }
}

#[async_trait]
impl QuotaHandler for MemQuotaHandler {
    async fn allocate(
        &self,
        instance: &Instance,
        args: &QuotaArgs,
    ) -> Result<QuotaResult, AdapterError> {
        self.check(instance, args)
    }

    async fn allocate_many(
        &self,
        calls: &[QuotaCall<'_>],
    ) -> Vec<Result<QuotaResult, AdapterError>> {
        self.check_all(calls)
    }

    /// Memory never waits: every call is answered here, without a future.
    fn allocate_now(
        &self,
        calls: &[QuotaCall<'_>],
    ) -> Option<Vec<Result<QuotaResult, AdapterError>>> {
        Some(self.check_all(calls))
    }

    /// Counts each charge whole on its counter; memory never fails, so only an instance
    /// whose quota is not configured answers an error.
    async fn charge_many(&self, calls: &[QuotaCall<'_>]) -> Vec<Result<QuotaResult, AdapterError>> {
        calls
            .iter()
            .map(|(instance, args)| {
                let sel = self
                    .config
                    .quotas
                    .select_with(instance, args.limit_override)?;
                let decision = if args.amount <= 0 {
                    Decision::nothing(sel.limit.max_amount)
                } else {
                    self.store.allocate(
                        &sel.key,
                        &sel.limit,
                        args.amount,
                        Take::Charge,
                        &args.deduplication_id,
                    )
                };
                tracing::trace!(handler = %self.name, key = %sel.key, charged = decision.granted, deduplicated = decision.deduplicated, "memquota charge");
                Ok(finish(
                    Refusal::GrantNothing,
                    &sel,
                    args,
                    decision,
                    &self.metrics,
                ))
            })
            .collect()
    }

    fn can_peek(&self) -> bool {
        true
    }

    async fn peek(&self, instance: &Instance) -> Result<QuotaLimit, AdapterError> {
        let sel = self.config.quotas.select(instance)?;
        let (remaining, reset_after) = self.store.peek(&sel.key, &sel.limit);
        Ok(QuotaLimit {
            name: sel.quota.name.clone(),
            max_amount: sel.limit.max_amount,
            window: sel.limit.valid_duration,
            remaining: remaining.clamp(0, sel.limit.max_amount.max(0)),
            reset_after,
            retry_after: std::time::Duration::ZERO,
        })
    }
}

impl Exposition for MemQuotaHandler {
    fn render(&self, out: &mut String) {
        self.metrics.render(METRIC_PREFIX, out);
        let handler = self.metrics.handler_label();
        render_one(
            out,
            "mixer_memquota_keys",
            "gauge",
            "Counters tracked now.",
            &handler,
            self.store.len() as u64,
        );
        let ev = &self.store.evictions;
        let _ = std::fmt::Write::write_fmt(
            out,
            format_args!(
                "# HELP mixer_memquota_evictions_total Counters dropped: idle (back to fresh, nothing lost), cap (maxKeys reached, counts lost), dedup_cap (deduplication ids dropped early).\n\
                 # TYPE mixer_memquota_evictions_total counter\n\
                 mixer_memquota_evictions_total{{{handler},reason=\"idle\"}} {}\n\
                 mixer_memquota_evictions_total{{{handler},reason=\"cap\"}} {}\n\
                 mixer_memquota_evictions_total{{{handler},reason=\"dedup_cap\"}} {}\n",
                ev.idle.load(Ordering::Relaxed),
                ev.cap.load(Ordering::Relaxed),
                ev.dedup_cap.load(Ordering::Relaxed),
            ),
        );
    }
}
