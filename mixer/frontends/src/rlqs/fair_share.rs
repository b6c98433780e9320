//! Fair shares of one global limit across the proxies that report its bucket.
//!
//! Each proxy's demand is what its last report says it was asked for (allowed + denied, per
//! second of the reported interval). [`water_fill`] splits the limit max-min fairly over those
//! demands: the proxies asking least get what they ask, the rest split what is left equally,
//! and capacity nobody asks for is spread evenly over everyone as headroom. Every proxy is
//! first lifted to a floor (a tenth of an equal split), so an idle proxy can still admit a new
//! request before its next report.
//!
//! [`Demands`] holds the demand and the last assignment of every proxy per limit, in this
//! process's memory; an entry lasts as long as the assignment it led to (its time to live),
//! so a proxy that stops reporting releases its share when its assignment would have
//! expired anyway.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The share of an equal split every proxy is lifted to before the split: room for a
/// proxy with no recorded demand to admit its next requests.
pub const FLOOR_FRACTION: f64 = 0.1;

/// Demands above this many requests per second are taken as this: a proxy cannot make a
/// share larger than the limit anyway, and the arithmetic stays finite.
pub const MAX_DEMAND_PER_SECOND: f64 = 1e12;

/// Splits `limit` (requests per second) over `demands` (requests per second, one per proxy):
/// max-min fairness (water-filling) over each demand lifted to the floor
/// (`limit * FLOOR_FRACTION / n`), then whatever no one asked for spread equally. The shares
/// add up to `limit` (within rounding) and each is at least `min(demand, limit / n)`.
pub fn water_fill(limit: f64, demands: &[f64]) -> Vec<f64> {
    let n = demands.len();
    if n == 0 || limit.is_nan() || limit <= 0.0 {
        return vec![0.0; n];
    }
    let floor = limit * FLOOR_FRACTION / n as f64;
    let wants: Vec<f64> = demands
        .iter()
        .map(|d| sane(*d).max(floor))
        .collect::<Vec<_>>();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|a, b| wants[*a].total_cmp(&wants[*b]));
    let mut shares = vec![0.0; n];
    let mut left = limit;
    for (k, i) in order.into_iter().enumerate() {
        let level = left / (n - k) as f64;
        shares[i] = wants[i].min(level);
        left -= shares[i];
    }
    // Headroom: a proxy's demand is last interval's, and it may grow before the next report.
    let extra = left.max(0.0) / n as f64;
    for s in &mut shares {
        *s += extra;
    }
    shares
}

/// A demand as reported, made finite and non-negative.
pub fn sane(demand: f64) -> f64 {
    if demand.is_nan() {
        0.0
    } else {
        demand.clamp(0.0, MAX_DEMAND_PER_SECOND)
    }
}

/// One proxy's entry under one limit.
#[derive(Clone, Debug)]
struct Entry {
    /// Requests per second it was asked for in its last reported interval.
    demand: f64,
    /// Requests per second it was last assigned.
    assigned: f64,
    /// When its assignment expires: past it the entry no longer counts.
    expires: Instant,
    /// The stream that wrote it, so that a stream that ends removes only its own entries
    /// (the proxy may already have reconnected).
    stream: u64,
}

/// The entries of one limit, by proxy.
type Proxies = HashMap<Arc<str>, Entry>;

/// Demands and assignments of every proxy, per limit, for this process.
#[derive(Debug, Default)]
pub struct Demands {
    limits: Mutex<HashMap<Arc<str>, Proxies>>,
    pruned_at: Mutex<Option<Instant>>,
}

/// How often [`Demands::prune_if_due`] sweeps the whole table.
const PRUNE_EVERY: Duration = Duration::from_secs(1);

/// One report of one proxy about one limit (see [`Demands::share`]).
#[derive(Clone, Copy, Debug)]
pub struct Reported<'a> {
    /// The limit's key: the limit's name and the bucket it counts.
    pub limit_key: &'a Arc<str>,
    /// The limit, in requests per second.
    pub limit: f64,
    /// The reporting proxy.
    pub proxy: &'a Arc<str>,
    /// The stream it reports on.
    pub stream: u64,
    /// Requests per second it was asked for.
    pub demand: f64,
    /// How long the assignment that answers this report lasts.
    pub ttl: Duration,
}

impl Demands {
    /// No proxy known.
    pub fn new() -> Demands {
        Demands::default()
    }

    /// Records `report`'s demand and answers the proxy's share (requests per second): its
    /// [`water_fill`] share among the proxies whose entries are live, but no more than what
    /// the others' current assignments leave of the limit (so that shares moving between
    /// proxies never add up past it; a proxy whose share shrinks gives it up at its next
    /// report, and the others take it at theirs), and never under the floor.
    pub fn share(&self, report: Reported<'_>, now: Instant) -> f64 {
        let mut limits = self.limits.lock().unwrap_or_else(|e| e.into_inner());
        let proxies = limits.entry(report.limit_key.clone()).or_default();
        proxies.retain(|_, e| e.expires > now);
        proxies.insert(
            report.proxy.clone(),
            Entry {
                demand: sane(report.demand),
                assigned: 0.0,
                expires: now + report.ttl,
                stream: report.stream,
            },
        );
        let (names, demands): (Vec<&Arc<str>>, Vec<f64>) =
            proxies.iter().map(|(p, e)| (p, e.demand)).unzip();
        let shares = water_fill(report.limit, &demands);
        let mine = names
            .iter()
            .position(|p| **p == *report.proxy)
            .map_or(0.0, |i| shares[i]);
        let others: f64 = proxies
            .iter()
            .filter(|(p, _)| **p != *report.proxy)
            .map(|(_, e)| e.assigned)
            .sum();
        let floor = (report.limit * FLOOR_FRACTION / demands.len() as f64).min(mine);
        let granted = mine.min(report.limit - others).max(floor);
        if let Some(entry) = proxies.get_mut(report.proxy) {
            entry.assigned = granted;
        }
        granted
    }

    /// Forgets what `stream` recorded for `proxy` under `limit_keys` (the stream ended):
    /// its share goes back to the others at their next reports.
    pub fn forget(&self, proxy: &Arc<str>, stream: u64, limit_keys: &[Arc<str>]) {
        let mut limits = self.limits.lock().unwrap_or_else(|e| e.into_inner());
        for key in limit_keys {
            if let Some(proxies) = limits.get_mut(key) {
                if proxies.get(proxy).is_some_and(|e| e.stream == stream) {
                    proxies.remove(proxy);
                }
                if proxies.is_empty() {
                    limits.remove(key);
                }
            }
        }
    }

    /// Drops every expired entry, and limits left without any: bounds the table by what live
    /// streams reported within their assignments' lifetimes.
    pub fn prune(&self, now: Instant) {
        let mut limits = self.limits.lock().unwrap_or_else(|e| e.into_inner());
        limits.retain(|_, proxies| {
            proxies.retain(|_, e| e.expires > now);
            !proxies.is_empty()
        });
    }

    /// [`Demands::prune`], at most once per second: limits no proxy reports any more do not
    /// stay in memory.
    pub fn prune_if_due(&self, now: Instant) {
        {
            let mut at = self.pruned_at.lock().unwrap_or_else(|e| e.into_inner());
            if at.is_some_and(|t| now.saturating_duration_since(t) < PRUNE_EVERY) {
                return;
            }
            *at = Some(now);
        }
        self.prune(now);
    }

    /// Limits with at least one entry, and entries in all (for tests and metrics).
    pub fn size(&self) -> (usize, usize) {
        let limits = self.limits.lock().unwrap_or_else(|e| e.into_inner());
        (limits.len(), limits.values().map(HashMap::len).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn equal_demands_over_the_limit_split_it_equally() {
        let shares = water_fill(300.0, &[200.0, 200.0, 200.0]);
        assert!(shares.iter().all(|s| close(*s, 100.0)), "{shares:?}");
    }

    #[test]
    fn small_demands_are_met_and_the_rest_goes_to_the_large_one() {
        // One proxy sends five times what each other sends (the uneven load).
        let shares = water_fill(300.0, &[500.0, 100.0, 100.0]);
        assert!(
            close(shares[0], 100.0) && close(shares[1], 100.0),
            "{shares:?}"
        );
        let shares = water_fill(300.0, &[250.0, 50.0, 50.0]);
        assert!(
            close(shares[0], 200.0) && close(shares[1], 50.0),
            "{shares:?}"
        );
        assert!(close(shares.iter().sum(), 300.0));
    }

    #[test]
    fn unused_capacity_is_spread_as_headroom() {
        let shares = water_fill(300.0, &[10.0, 10.0, 10.0]);
        assert!(shares.iter().all(|s| close(*s, 100.0)), "{shares:?}");
    }

    #[test]
    fn idle_proxies_keep_a_floor() {
        let shares = water_fill(300.0, &[1000.0, 0.0, 0.0]);
        assert!(
            close(shares[1], 10.0) && close(shares[2], 10.0),
            "{shares:?}"
        );
        assert!(close(shares[0], 280.0), "{shares:?}");
    }

    #[test]
    fn absurd_demands_stay_finite_and_within_the_limit() {
        let shares = water_fill(300.0, &[f64::INFINITY, f64::NAN, -5.0, u64::MAX as f64]);
        assert!(
            shares.iter().all(|s| s.is_finite() && *s > 0.0),
            "{shares:?}"
        );
        assert!(shares.iter().sum::<f64>() <= 300.0 + 1e-6);
        assert_eq!(water_fill(300.0, &[]), Vec::<f64>::new());
        assert_eq!(water_fill(0.0, &[5.0]), vec![0.0]);
    }

    fn report<'a>(key: &'a Arc<str>, proxy: &'a Arc<str>, demand: f64) -> Reported<'a> {
        Reported {
            limit_key: key,
            limit: 300.0,
            proxy,
            stream: 1,
            demand,
            ttl: Duration::from_secs(3),
        }
    }

    #[test]
    fn shares_moving_between_proxies_never_add_up_past_the_limit() {
        let demands = Demands::new();
        let key: Arc<str> = "shared".into();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let t0 = Instant::now();
        // a alone takes nearly everything.
        let a1 = demands.share(report(&key, &a, 1000.0), t0);
        assert!(close(a1, 300.0), "{a1}");
        // b arrives: its fair share is 150, but a still holds 300 until its next report.
        let b1 = demands.share(report(&key, &b, 1000.0), t0);
        assert!(a1 + b1 <= 300.0 + 15.0, "{a1} + {b1}");
        let a2 = demands.share(report(&key, &a, 1000.0), t0);
        let b2 = demands.share(report(&key, &b, 1000.0), t0);
        assert!(close(a2, 150.0) && close(b2, 150.0), "{a2} {b2}");
    }

    #[test]
    fn a_proxy_that_stops_reporting_releases_its_share() {
        let demands = Demands::new();
        let key: Arc<str> = "shared".into();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let t0 = Instant::now();
        demands.share(report(&key, &a, 1000.0), t0);
        demands.share(report(&key, &b, 1000.0), t0);
        let later = t0 + Duration::from_secs(4);
        let b_alone = demands.share(report(&key, &b, 1000.0), later);
        assert!(close(b_alone, 300.0), "{b_alone}");
        demands.forget(&b, 1, std::slice::from_ref(&key));
        assert_eq!(demands.size(), (0, 0));
        demands.share(report(&key, &a, 1.0), later);
        demands.prune(later + Duration::from_secs(10));
        assert_eq!(demands.size(), (0, 0));
    }
}
