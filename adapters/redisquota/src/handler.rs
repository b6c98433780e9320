//! redisquota's handler: selects quota, limit and key, runs the algorithm's script in Redis
//! (one round trip), builds the result.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use mixer_adapter_api::{
    AdapterError, ErrorKind, Exposition, Handler, Occasional, QuotaArgs, QuotaHandler,
};
use mixer_adapter_quota_common::{Algorithm, Decision, Metrics, finish, render_one};
use mixer_model::{Instance, QuotaResult};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Script};

use crate::config::RedisQuotaConfig;
use crate::scripts;

/// Metric names start with this.
pub const METRIC_PREFIX: &str = "mixer_redisquota";
/// Longest an allocation waits for Redis (connecting included) before failing UNAVAILABLE.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Every Redis key this adapter writes starts with this.
pub const KEY_PREFIX: &str = "mixer:quota:";

/// Allocates quota from counters in Redis, shared by every mixer replica using that Redis.
pub struct RedisQuotaHandler {
    config: RedisQuotaConfig,
    client: Client,
    /// Made on first use (inside the runtime); each reconnects by itself.
    pool: Vec<OnceLock<ConnectionManager>>,
    next: AtomicUsize,
    scripts: [Script; 3],
    metrics: Metrics,
    errors: AtomicU64,
    /// Redis down fails every call: the warning goes out once per interval.
    warning: Occasional,
    name: Arc<str>,
}

impl std::fmt::Debug for RedisQuotaHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisQuotaHandler")
            .field("name", &self.name)
            .field("url", &self.config.url)
            .finish_non_exhaustive()
    }
}

fn script_index(a: Algorithm) -> usize {
    match a {
        Algorithm::FixedWindow => 0,
        Algorithm::RollingWindow => 1,
        Algorithm::TokenBucket => 2,
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl RedisQuotaHandler {
    /// A handler for validated params. Does not connect: the first allocation does.
    pub fn new(
        config: RedisQuotaConfig,
        name: Arc<str>,
    ) -> Result<RedisQuotaHandler, AdapterError> {
        let client = Client::open(config.url.as_str()).map_err(|e| {
            AdapterError::permanent(ErrorKind::Internal, format!("redis address: {e}"))
        })?;
        let metrics = Metrics::new(
            &name,
            config
                .quotas
                .quotas
                .iter()
                .map(|q| q.name.to_string())
                .collect(),
        );
        Ok(RedisQuotaHandler {
            pool: (0..config.pool_size.max(1))
                .map(|_| OnceLock::new())
                .collect(),
            next: AtomicUsize::new(0),
            scripts: Algorithm::ALL.map(|a| Script::new(&scripts::source(a))),
            client,
            config,
            metrics,
            errors: AtomicU64::new(0),
            warning: Occasional::new(Duration::from_secs(10)),
            name,
        })
    }

    /// The per-quota counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Redis calls that failed.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    fn connection(&self) -> Result<ConnectionManager, AdapterError> {
        let slot = &self.pool[self.next.fetch_add(1, Ordering::Relaxed) % self.pool.len()];
        if let Some(c) = slot.get() {
            return Ok(c.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(500)))
            .set_response_timeout(Some(Duration::from_secs(1)))
            .set_number_of_retries(2)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let manager = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|e| self.error(format!("redis connection: {e}")))?;
        Ok(slot.get_or_init(|| manager).clone())
    }

    fn error(&self, message: String) -> AdapterError {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Some(held_back) = self.warning.due() {
            tracing::warn!(handler = %self.name, held_back, "{message}");
        }
        AdapterError::transient(ErrorKind::Unavailable, message)
    }

    async fn run(
        &self,
        key: &str,
        limit: &mixer_adapter_quota_common::Limit,
        args: &QuotaArgs,
    ) -> Result<Decision, AdapterError> {
        let tag = limit.algorithm.tag();
        let state_key = format!("{KEY_PREFIX}{tag}:{key}");
        let dedup = !args.deduplication_id.is_empty();
        let dedup_key = if dedup {
            format!("{KEY_PREFIX}dedup:{tag}:{key}:{}", args.deduplication_id)
        } else {
            format!("{KEY_PREFIX}dedup:{tag}:{key}:")
        };
        let dedup_ms = if dedup {
            u64::try_from(self.config.min_deduplication_duration.as_millis())
                .unwrap_or(u64::MAX)
                .max(1)
        } else {
            0
        };
        let mut conn = self.connection()?;
        let mut call = self.scripts[script_index(limit.algorithm)].key(&state_key);
        call.key(&dedup_key)
            .arg(limit.max_amount)
            .arg(micros(limit.valid_duration))
            .arg(micros(limit.bucket_duration).max(1))
            .arg(args.amount)
            .arg(if args.best_effort { 1 } else { 0 })
            .arg(dedup_ms);
        let answer: Vec<i64> =
            match tokio::time::timeout(CALL_TIMEOUT, call.invoke_async(&mut conn)).await {
                Ok(Ok(v)) => v,
                Ok(Err(e)) => return Err(self.error(format!("redis: {e}"))),
                Err(_) => {
                    return Err(self.error(format!(
                        "redis did not answer within {}s",
                        CALL_TIMEOUT.as_secs()
                    )));
                }
            };
        let [granted, valid_us, deduplicated, remaining, reset_us] = answer[..] else {
            self.errors.fetch_add(1, Ordering::Relaxed);
            return Err(AdapterError::transient(
                ErrorKind::InvalidResponse,
                format!("redis script answered {answer:?}, expected 5 integers"),
            ));
        };
        let micros = |us: i64| Duration::from_micros(u64::try_from(us).unwrap_or(0));
        Ok(Decision {
            granted,
            valid_duration: micros(valid_us),
            deduplicated: deduplicated == 1,
            remaining,
            reset_after: micros(reset_us),
        })
    }
}

impl Handler for RedisQuotaHandler {
    fn as_quota(&self) -> Option<&dyn QuotaHandler> {
        Some(self)
    }

    fn as_exposition(&self) -> Option<&dyn Exposition> {
        Some(self)
    }
}

#[async_trait]
impl QuotaHandler for RedisQuotaHandler {
    async fn allocate(
        &self,
        instance: &Instance,
        args: &QuotaArgs,
    ) -> Result<QuotaResult, AdapterError> {
        let sel = self
            .config
            .quotas
            .select_with(instance, args.limit_override)?;
        let decision = if args.amount <= 0 {
            Decision::nothing(sel.limit.max_amount)
        } else {
            self.run(&sel.key, &sel.limit, args).await?
        };
        let result = finish("redisquota", &sel, args, decision, &self.metrics);
        if sel.limit.shadow && !result.status.message.is_empty() {
            tracing::debug!(handler = %self.name, key = %sel.key, "{}", result.status.message);
        }
        Ok(result)
    }
}

impl Exposition for RedisQuotaHandler {
    fn render(&self, out: &mut String) {
        self.metrics.render(METRIC_PREFIX, out);
        render_one(
            out,
            "mixer_redisquota_errors_total",
            "counter",
            "Allocations that failed because Redis could not be reached or answered an error.",
            &self.metrics.handler_label(),
            self.errors(),
        );
    }
}
