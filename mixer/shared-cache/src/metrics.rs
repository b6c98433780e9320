//! The shared tier's metrics, beside the in-process tier's `mixer_check_cache_*`.

use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts, Registry};

/// Counters of the shared tier.
#[derive(Clone, Debug)]
pub struct SharedCacheMetrics {
    /// `mixer_check_cache_shared_hits_total`: in-process misses answered from Redis.
    pub hits: IntCounter,
    /// `mixer_check_cache_shared_misses_total`: in-process misses Redis had no entry for.
    pub misses: IntCounter,
    /// `mixer_check_cache_shared_errors_total{reason="timeout|redis|circuit_open|decode"}`:
    /// lookups and stores that gave nothing (the check was evaluated as without the tier).
    pub errors: IntCounterVec,
    /// `mixer_check_cache_shared_stores_total`: verdicts written to Redis.
    pub stores: IntCounter,
    /// `mixer_check_cache_shared_round_trip_seconds`: one lookup or store, all its Redis
    /// commands included.
    pub round_trip: Histogram,
    /// `mixer_check_cache_shared_uses_leased_total`: uses of use-limited verdicts taken
    /// from Redis for this replica.
    pub uses_leased: IntCounter,
    /// `mixer_check_cache_shared_uses_returned_total`: leased uses not served and given back.
    pub uses_returned: IntCounter,
    /// `mixer_check_cache_shared_shape_reads_total`: reads of the shape set (at most one per
    /// `--shared-cache-shapes-refresh`, not one per miss).
    pub shape_reads: IntCounter,
}

const BUCKETS: [f64; 12] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.1, 1.0,
];

impl SharedCacheMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn new(registry: &Registry) -> Result<SharedCacheMetrics, prometheus::Error> {
        let counter = |name: &str, help: &str| -> Result<IntCounter, prometheus::Error> {
            let c = IntCounter::new(name, help)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let errors = IntCounterVec::new(
            Opts::new(
                "mixer_check_cache_shared_errors_total",
                "Shared check cache calls that failed; the check was decided without it",
            ),
            &["reason"],
        )?;
        registry.register(Box::new(errors.clone()))?;
        for reason in ["timeout", "redis", "circuit_open", "decode"] {
            errors.with_label_values(&[reason]);
        }
        let round_trip = Histogram::with_opts(
            HistogramOpts::new(
                "mixer_check_cache_shared_round_trip_seconds",
                "Time of one shared check cache lookup or store in Redis",
            )
            .buckets(BUCKETS.to_vec()),
        )?;
        registry.register(Box::new(round_trip.clone()))?;
        Ok(SharedCacheMetrics {
            hits: counter(
                "mixer_check_cache_shared_hits_total",
                "In-process check cache misses answered by the shared cache",
            )?,
            misses: counter(
                "mixer_check_cache_shared_misses_total",
                "In-process check cache misses the shared cache had no verdict for",
            )?,
            errors,
            stores: counter(
                "mixer_check_cache_shared_stores_total",
                "Verdicts written to the shared check cache",
            )?,
            round_trip,
            uses_leased: counter(
                "mixer_check_cache_shared_uses_leased_total",
                "Uses of use-limited verdicts leased from the shared check cache",
            )?,
            uses_returned: counter(
                "mixer_check_cache_shared_uses_returned_total",
                "Leased uses not served and given back to the shared check cache",
            )?,
            shape_reads: counter(
                "mixer_check_cache_shared_shape_reads_total",
                "Reads of the shared check cache's set of shapes, refreshed in the background of misses",
            )?,
        })
    }
}
