//! envoyproxy/ratelimit's statistics, for the limits written in its format (`ratelimitconfig`
//! documents and its files taken as they are), so that its users' dashboards and alerts keep
//! working when the mixer answers Envoy in its place.
//!
//! Per limit, as envoyproxy/ratelimit counts them (`src/limiter/base_limiter.go`), in units
//! (`hits_addend`), not requests:
//!
//! | statistic | counts |
//! |---|---|
//! | `total_hits` | every unit asked of the limit |
//! | `over_limit` | units over the limit (those of a request that crossed it: only the part past it) |
//! | `near_limit` | units between `NEAR_LIMIT_RATIO` (0.8 by default, `--near-limit-ratio`) of the limit and the limit |
//! | `within_limit` | units of requests granted |
//! | `shadow_mode` | `over_limit` units of a `shadow_mode` limit (granted all the same) |
//!
//! `over_limit_with_local_cache` is not produced: the mixer keeps no local over-limit cache, so
//! it would stay 0, and envoyproxy/ratelimit (its stats library flushes no counter that is 0)
//! never exports it then either.
//!
//! Names: envoyproxy/ratelimit names them `ratelimit.service.rate_limit.<key>.<statistic>` in
//! statsd, the key being the domain and one `key` or `key_value` per level of the limit's path
//! (`src/stats/manager_impl.go`, after `utils.SanitizeStatName`: `:` and `|` and the dots of
//! IPv4 addresses become `_`). `/metrics` has them as its own Prometheus sink
//! (`src/stats/prom/default_mapper.yaml`, the mapping of `examples/prom-statsd-exporter/conf.yaml`
//! extended to deeper paths) exposes them: `ratelimit_service_rate_limit_<statistic>` with the
//! labels `domain` and `key1` for a path of one level, and `domain`, `key1`, `key2` (its first
//! two levels) for deeper ones, so that the paths of one prefix add up on one series.
//!
//! Cardinality is bounded by the config: one key per limit, whatever the request's values (a
//! value the config does not name is counted under the key-only entry that matched it, as
//! envoyproxy/ratelimit does). `detailed_metric` names the statistics after the request's
//! values, as envoyproxy/ratelimit does, for at most [`DETAILED_KEYS_PER_LIMIT`] distinct values
//! per limit; further ones are counted under the limit's own key.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use mixer_adapter_api::AdapterError;
use mixer_config::RateLimitBehaviour;
use mixer_model::{Instance, InstanceView, QuotaResult, Value};

/// envoyproxy/ratelimit's default `NEAR_LIMIT_RATIO` (`src/settings/settings.go`).
pub const DEFAULT_NEAR_LIMIT_RATIO: f32 = 0.8;

/// Most `detailed_metric` keys one limit gets; further request values count under the
/// limit's own key, so that a client cannot grow `/metrics` without bound.
pub const DETAILED_KEYS_PER_LIMIT: usize = 100;

/// The statistics, in the order they are exposed.
const STATISTICS: [&str; 5] = [
    "total_hits",
    "over_limit",
    "near_limit",
    "within_limit",
    "shadow_mode",
];

/// What one answer adds to a limit's statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hits {
    /// `total_hits`.
    pub total_hits: u64,
    /// `over_limit`.
    pub over_limit: u64,
    /// `near_limit`.
    pub near_limit: u64,
    /// `within_limit`.
    pub within_limit: u64,
    /// `shadow_mode`.
    pub shadow_mode: u64,
}

impl Hits {
    fn as_array(self) -> [u64; 5] {
        [
            self.total_hits,
            self.over_limit,
            self.near_limit,
            self.within_limit,
            self.shadow_mode,
        ]
    }
}

/// The statistics of `hits` units counted against `limit`, the counter holding `before`
/// units until then, as envoyproxy/ratelimit's `GetResponseDescriptorStatus` counts them:
/// over the limit when `before + hits` passes it (then only the units past it are
/// `over_limit`, and those between the near-limit threshold and the limit `near_limit`),
/// otherwise `within_limit`, and `near_limit` for the units past the threshold. The threshold
/// is `floor(limit * ratio)` computed in single precision, as there.
pub fn classify(limit: u64, before: u64, hits: u64, shadow: bool, ratio: f32) -> Hits {
    let after = before.saturating_add(hits);
    let near_threshold = (limit as f32 * ratio).floor() as u64;
    let mut out = Hits {
        total_hits: hits,
        ..Hits::default()
    };
    if after > limit {
        if before >= limit {
            out.over_limit = hits;
        } else {
            out.over_limit = after - limit;
            out.near_limit = limit - near_threshold.max(before);
        }
        if shadow {
            out.shadow_mode = out.over_limit;
        }
    } else {
        if after > near_threshold {
            out.near_limit = if before >= near_threshold {
                hits
            } else {
                after - near_threshold
            };
        }
        out.within_limit = hits;
    }
    out
}

#[derive(Debug, Default)]
struct Counters([AtomicU64; 5]);

impl Counters {
    fn add(&self, hits: Hits) {
        for (counter, n) in self.0.iter().zip(hits.as_array()) {
            if n > 0 {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        }
    }

    fn get(&self) -> [u64; 5] {
        std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }
}

/// The statistics of one limit (one statistics key of the config).
#[derive(Debug)]
pub struct LimitStats {
    key: String,
    domain: String,
    levels: Vec<String>,
    shadow: bool,
    counters: Counters,
    /// `detailed_metric`: the counters of each request key seen, up to the bound.
    detailed: Option<Mutex<HashMap<String, Arc<Counters>>>>,
}

impl LimitStats {
    fn new(b: &RateLimitBehaviour) -> LimitStats {
        LimitStats {
            key: b.stat_key.clone(),
            domain: domain_of(b),
            levels: b.stat_levels.clone(),
            shadow: b.shadow_mode,
            counters: Counters::default(),
            detailed: b.detailed_metric.then(|| Mutex::new(HashMap::new())),
        }
    }

    /// Counts one handler's answer to `amount` units asked of this limit for `instance`.
    pub(crate) fn record(
        &self,
        answer: &Result<QuotaResult, AdapterError>,
        amount: i64,
        instance: &Instance,
        ratio: f32,
    ) {
        let Ok(hits) = u64::try_from(amount) else {
            return;
        };
        if hits == 0 {
            return;
        }
        let counted = match answer {
            Ok(result) => counted(result, amount, hits, self.shadow, ratio),
            // envoyproxy/ratelimit counts the hits before it asks its store.
            Err(_) => Hits {
                total_hits: hits,
                ..Hits::default()
            },
        };
        match &self.detailed {
            Some(detailed) => self.detailed_counters(detailed, instance, counted),
            None => self.counters.add(counted),
        }
    }

    fn detailed_counters(
        &self,
        detailed: &Mutex<HashMap<String, Arc<Counters>>>,
        instance: &Instance,
        hits: Hits,
    ) {
        let Some(key) = self.detailed_key(instance) else {
            self.counters.add(hits);
            return;
        };
        let Ok(mut map) = detailed.lock() else {
            self.counters.add(hits);
            return;
        };
        if let Some(c) = map.get(&key) {
            c.add(hits);
        } else if map.len() < DETAILED_KEYS_PER_LIMIT {
            let c = Arc::new(Counters::default());
            c.add(hits);
            map.insert(key, c);
        } else {
            self.counters.add(hits);
        }
    }

    /// The request's key as `detailed_metric` names it: the domain, then `key_value` per
    /// entry (config_impl.go, `GetLimit`), from the quota instance's dimensions (the
    /// request's values, or a `share_threshold` wildcard's pattern).
    fn detailed_key(&self, instance: &Instance) -> Option<String> {
        let InstanceView::Quota(quota) = instance.view() else {
            return None;
        };
        let mut key = self.domain.clone();
        for level in &self.levels {
            let value = match quota.dimensions.get(level) {
                Some(Value::String(s)) => s.to_string(),
                _ => return None,
            };
            let _ = write!(key, ".{level}_{value}");
        }
        Some(key)
    }

    /// Every key this limit has counted under, with its counts.
    fn series(&self) -> Vec<(String, [u64; 5])> {
        let mut out = vec![(self.key.clone(), self.counters.get())];
        if let Some(detailed) = &self.detailed
            && let Ok(map) = detailed.lock()
        {
            out.extend(map.iter().map(|(k, c)| (k.clone(), c.get())));
        }
        out
    }
}

/// The domain of a limit: its statistics key up to its first level (`.<first key>`; the
/// domain and the values may hold dots, the keys are what the config names).
fn domain_of(b: &RateLimitBehaviour) -> String {
    let key = b.stat_key.as_str();
    match b.stat_levels.first() {
        Some(first) => key
            .find(&format!(".{first}"))
            .map_or(key, |at| &key[..at])
            .to_string(),
        None => key.to_string(),
    }
}

/// What a quota handler's answer adds: the counter before and after as the answer tells it
/// (granted: the units now used less those just granted; refused, or over in shadow mode:
/// the units used, which the refused ones did not change).
fn counted(result: &QuotaResult, amount: i64, hits: u64, shadow: bool, ratio: f32) -> Hits {
    let Some(limit) = &result.limit else {
        return Hits {
            total_hits: hits,
            ..Hits::default()
        };
    };
    let max = u64::try_from(limit.max_amount).unwrap_or(0);
    let remaining = u64::try_from(limit.remaining).unwrap_or(0).min(max);
    let refused = !result.status.is_ok() || result.granted_amount < amount;
    // quota-common's `finish` grants a shadow-mode limit's refusal, saying so in the status.
    let shadow_over = shadow && result.status.message.starts_with("shadow mode:");
    let before = if refused || shadow_over {
        max - remaining
    } else {
        (max - remaining).saturating_sub(hits)
    };
    classify(max, before, hits, shadow, ratio)
}

/// The statistics of the limits of every snapshot, by key, so that a reload keeps the counts
/// of the limits it keeps. Held weakly: a limit no snapshot has any more is forgotten.
#[derive(Debug, Default)]
pub struct RateLimitStatsRegistry {
    by_key: Mutex<HashMap<(String, bool, bool), Weak<LimitStats>>>,
}

impl RateLimitStatsRegistry {
    /// The statistics of each limit of `behaviours` (None for an `unlimited` one, never
    /// counted), aligned with them.
    pub(crate) fn resolve(
        &self,
        behaviours: &[RateLimitBehaviour],
    ) -> Vec<Option<Arc<LimitStats>>> {
        let Ok(mut map) = self.by_key.lock() else {
            return behaviours
                .iter()
                .map(|b| (!b.unlimited).then(|| Arc::new(LimitStats::new(b))))
                .collect();
        };
        map.retain(|_, w| w.strong_count() > 0);
        behaviours
            .iter()
            .map(|b| {
                if b.unlimited {
                    return None;
                }
                let id = (b.stat_key.clone(), b.shadow_mode, b.detailed_metric);
                if let Some(s) = map.get(&id).and_then(Weak::upgrade) {
                    return Some(s);
                }
                let s = Arc::new(LimitStats::new(b));
                map.insert(id, Arc::downgrade(&s));
                Some(s)
            })
            .collect()
    }
}

/// Appends the statistics of `limits` (a snapshot's) to a Prometheus text exposition. Series
/// whose labels come out alike (paths that share their first two levels, a key counted by two
/// files) are added up, as the statsd exporter adds up what it maps to one series.
pub fn render(limits: &[Option<Arc<LimitStats>>], out: &mut String) {
    let mut families: [BTreeMap<Vec<String>, u64>; 5] = Default::default();
    let mut seen = std::collections::HashSet::new();
    for stats in limits.iter().flatten() {
        // Two limits of one key share their statistics: counted once.
        if !seen.insert(Arc::as_ptr(stats)) {
            continue;
        }
        for (key, counts) in stats.series() {
            let labels = labels(&key);
            for (i, family) in families.iter_mut().enumerate() {
                if STATISTICS[i] == "shadow_mode" && !stats.shadow {
                    continue;
                }
                *family.entry(labels.clone()).or_default() += counts[i];
            }
        }
    }
    for (statistic, family) in STATISTICS.iter().zip(&families) {
        if family.is_empty() {
            continue;
        }
        let name = format!("ratelimit_service_rate_limit_{statistic}");
        let _ = writeln!(
            out,
            "# HELP {name} envoyproxy/ratelimit's {statistic} statistic of each rate limit, in hits"
        );
        let _ = writeln!(out, "# TYPE {name} counter");
        for (labels, value) in family {
            let _ = write!(out, "{name}{{");
            for (i, (label, v)) in ["domain", "key1", "key2"].iter().zip(labels).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{label}=\"{}\"", escape(v));
            }
            let _ = writeln!(out, "}} {value}");
        }
    }
}

/// The label values envoyproxy/ratelimit's Prometheus mapping gives a statistics key:
/// `[domain, key1]` for a key of two parts, `[domain, key1, key2]` (the first three parts)
/// for longer ones, the parts being the sanitized key split at its dots.
pub fn labels(key: &str) -> Vec<String> {
    let sanitized = sanitize(key);
    let parts: Vec<&str> = sanitized.split('.').collect();
    let n = if parts.len() <= 2 { parts.len() } else { 3 };
    parts[..n].iter().map(|p| p.to_string()).collect()
}

/// envoyproxy/ratelimit's `SanitizeStatName`: `:` and `|` become `_`, and so do the dots of
/// what looks like an IPv4 address (`\d{1,3}` four times, matched left to right).
fn sanitize(key: &str) -> String {
    let replaced: String = key
        .chars()
        .map(|c| if c == ':' || c == '|' { '_' } else { c })
        .collect();
    let bytes = replaced.as_bytes();
    let mut out = String::with_capacity(replaced.len());
    let mut i = 0;
    while i < bytes.len() {
        if let Some(len) = ipv4_at(bytes, i) {
            out.push_str(&replaced[i..i + len].replace('.', "_"));
            i += len;
        } else {
            // Whole characters: the key may hold any UTF-8.
            let c = replaced[i..].chars().next().unwrap_or('_');
            out.push(c);
            i += c.len_utf8().max(1);
        }
    }
    out
}

/// The length of an IPv4-like run (`\d{1,3}(\.\d{1,3}){3}`, digits greedy as in RE2's
/// leftmost-first match) starting at `at`.
fn ipv4_at(bytes: &[u8], at: usize) -> Option<usize> {
    // RE2 backtracks within the digit runs; trying every split of each run finds what it
    // finds (the longest first).
    fn part(bytes: &[u8], at: usize, left: usize) -> Option<usize> {
        let digits = bytes[at..]
            .iter()
            .take(3)
            .take_while(|b| b.is_ascii_digit())
            .count();
        for take in (1..=digits).rev() {
            if left == 0 {
                return Some(take);
            }
            let dot = at + take;
            if bytes.get(dot) == Some(&b'.')
                && let Some(rest) = part(bytes, dot + 1, left - 1)
            {
                return Some(take + 1 + rest);
            }
        }
        None
    }
    part(bytes, at, 3)
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `TestNearLimit` in envoyproxy/ratelimit's test/redis/fixed_cache_impl_test.go: each
    /// case is (limit, hits_addend, counter after the increment as the mocked Redis answers
    /// it) and the statistics it asserts after that one call (total, over, near, within).
    /// The first three cases share one limit (15 an hour): the asserted totals there are
    /// cumulative, the deltas are written here.
    #[test]
    fn counts_as_envoyproxy_ratelimits_near_limit_test() {
        let cases: [(u64, u64, u64, [u64; 4]); 9] = [
            (15, 1, 11, [1, 0, 0, 1]),
            (15, 1, 13, [1, 0, 1, 1]),
            (15, 1, 16, [1, 1, 0, 0]),
            (20, 3, 5, [3, 0, 0, 3]),
            (8, 2, 7, [2, 0, 1, 2]),
            (20, 3, 19, [3, 0, 3, 3]),
            (20, 3, 22, [3, 2, 1, 0]),
            (20, 7, 22, [7, 2, 4, 0]),
            (10, 3, 30, [3, 3, 0, 0]),
        ];
        for (limit, hits, after, [total, over, near, within]) in cases {
            let got = classify(limit, after - hits, hits, false, DEFAULT_NEAR_LIMIT_RATIO);
            assert_eq!(
                got,
                Hits {
                    total_hits: total,
                    over_limit: over,
                    near_limit: near,
                    within_limit: within,
                    shadow_mode: 0
                },
                "limit {limit}, {hits} hits, counter at {after}"
            );
        }
    }

    /// test/limiter/base_limiter_test.go, `TestGetResponseStatusOverLimit` (limit 5, counter
    /// 2 -> 7 for one hit as its `LimitInfo` says: 2 over, 1 near) and
    /// `TestGetResponseStatusOverLimitShadowMode` (the same in shadow mode: shadow_mode 2).
    #[test]
    fn over_the_limit_and_shadow_mode_as_the_base_limiter_tests() {
        // Those tests give before = 2 and after = 7 with hits_addend 1 (a mocked jump); the
        // counts depend on before and after only, so hits = after - before here.
        let got = classify(5, 2, 5, false, 0.8);
        assert_eq!((got.over_limit, got.near_limit), (2, 1));
        let got = classify(5, 2, 5, true, 0.8);
        assert_eq!((got.over_limit, got.near_limit, got.shadow_mode), (2, 1, 2));
    }

    #[test]
    fn labels_follow_the_prometheus_mapping() {
        assert_eq!(
            labels("mongo_cps.database_users"),
            ["mongo_cps", "database_users"]
        );
        assert_eq!(labels("rl.foo.bar_bkthomps"), ["rl", "foo", "bar_bkthomps"]);
        // Deeper paths keep their first two levels.
        assert_eq!(labels("d.a.b.c_1"), ["d", "a", "b"]);
        // SanitizeStatName (test/utils/utilities_test.go has these shapes).
        assert_eq!(
            labels("domain.remote_address_50.0.0.5"),
            ["domain", "remote_address_50_0_0_5"]
        );
        assert_eq!(labels("d.k_a:b|c"), ["d", "k_a_b_c"]);
    }

    #[test]
    fn rendering_adds_up_series_with_the_same_labels() {
        let behaviour = |key: &str, levels: &[&str], shadow: bool| RateLimitBehaviour {
            stat_key: key.to_string(),
            stat_levels: levels.iter().map(|l| l.to_string()).collect(),
            shadow_mode: shadow,
            ..RateLimitBehaviour::default()
        };
        let registry = RateLimitStatsRegistry::default();
        let limits = registry.resolve(&[
            behaviour("rl.foo.bar.x", &["foo", "bar", "x"], false),
            behaviour("rl.foo.bar.y", &["foo", "bar", "y"], false),
            behaviour("rl.unspec", &["unspec"], true),
        ]);
        let add = |i: usize, hits| {
            if let Some(s) = &limits[i] {
                s.counters.add(hits);
            }
        };
        add(0, classify(2, 0, 1, false, 0.8));
        add(1, classify(2, 1, 1, false, 0.8));
        add(2, classify(1, 1, 1, true, 0.8));
        let mut text = String::new();
        render(&limits, &mut text);
        for line in [
            "ratelimit_service_rate_limit_total_hits{domain=\"rl\",key1=\"foo\",key2=\"bar\"} 2",
            "ratelimit_service_rate_limit_within_limit{domain=\"rl\",key1=\"foo\",key2=\"bar\"} 2",
            "ratelimit_service_rate_limit_near_limit{domain=\"rl\",key1=\"foo\",key2=\"bar\"} 1",
            "ratelimit_service_rate_limit_over_limit{domain=\"rl\",key1=\"unspec\"} 1",
            "ratelimit_service_rate_limit_shadow_mode{domain=\"rl\",key1=\"unspec\"} 1",
            "# TYPE ratelimit_service_rate_limit_total_hits counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        // No shadow_mode series for a limit that is not in shadow mode.
        assert!(!text.contains("shadow_mode{domain=\"rl\",key1=\"foo\""));
        // A reload that keeps a key keeps its counts.
        let again = registry.resolve(&[behaviour("rl.unspec", &["unspec"], true)]);
        let same = match (&again[0], &limits[2]) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        assert!(same);
    }
}
