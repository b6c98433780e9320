//! The local over-limit cache, as envoyproxy/ratelimit's (`LOCAL_CACHE_SIZE_IN_BYTES`,
//! counted as `over_limit_with_local_cache`): once Redis answers that a fixed or rolling
//! window counter has nothing left, its checks are refused here, without Redis, until units
//! can come back (the window's end; for a rolling window, the end of its oldest counted
//! bucket). Exact: such a counter only grows until then (checks and charges add, nothing
//! subtracts), so Redis would refuse them too. The time is measured from before the call
//! was sent, so the entry ends no later than Redis's own window does.
//!
//! Not cached: token buckets (they refill continuously), checks with a deduplication id (a
//! retry must get its first answer back from Redis) and charges (always counted in Redis).
//! What the cache cannot know is a counter removed behind the mixer's back (`FLUSHALL`, a
//! Redis restarted without persistence): such keys stay refused until their window ends. And
//! while Redis is down, a cached key is refused rather than given the fail policy. So, as in
//! envoyproxy/ratelimit, it is off unless `localCacheSize` asks for it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mixer_adapter_quota_common::{Algorithm, Limit};

/// Keys the cache holds when `localCacheSize` is absent: none (off), so that a Redis
/// outage gets the fail policy for every key and a flushed Redis is believed at once.
pub const DEFAULT_LOCAL_CACHE_SIZE: usize = 0;

struct Entry {
    /// The limit the refusal was for: a request with another limit (an Envoy descriptor's
    /// own limit) on the same key is not answered from this entry.
    max_amount: i64,
    valid: Duration,
    until: Instant,
}

/// See the module documentation.
pub struct OverLimitCache {
    capacity: usize,
    entries: Mutex<HashMap<String, Entry>>,
    hits: AtomicU64,
}

impl OverLimitCache {
    /// A cache of at most `capacity` keys (0: off).
    pub fn new(capacity: usize) -> OverLimitCache {
        OverLimitCache {
            capacity,
            entries: Mutex::default(),
            hits: AtomicU64::new(0),
        }
    }

    /// Whether a limit's counter may be cached.
    pub fn caches(&self, limit: &Limit) -> bool {
        self.capacity > 0
            && matches!(
                limit.algorithm,
                Algorithm::FixedWindow | Algorithm::RollingWindow
            )
    }

    /// How long `key` stays over `limit`, if it is known to be (and counts the hit).
    pub fn lookup(&self, key: &str, limit: &Limit, now: Instant) -> Option<Duration> {
        if !self.caches(limit) {
            return None;
        }
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let e = entries.get(key)?;
        if e.until <= now || e.max_amount != limit.max_amount || e.valid != limit.valid_duration {
            return None;
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(e.until - now)
    }

    /// Remembers that `key` has nothing left of `limit` until `until`. When full, expired
    /// keys are dropped first; a key that still does not fit is not cached (and simply asks
    /// Redis, as without the cache).
    pub fn insert(&self, key: &str, limit: &Limit, until: Instant, now: Instant) {
        if !self.caches(limit) || until <= now {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= self.capacity && !entries.contains_key(key) {
            entries.retain(|_, e| e.until > now);
            if entries.len() >= self.capacity {
                return;
            }
        }
        entries.insert(
            key.to_string(),
            Entry {
                max_amount: limit.max_amount,
                valid: limit.valid_duration,
                until,
            },
        );
    }

    /// Checks answered from the cache.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(algorithm: Algorithm, max_amount: i64) -> Limit {
        Limit {
            max_amount,
            valid_duration: Duration::from_secs(1),
            bucket_duration: Duration::from_millis(100),
            algorithm,
            shadow: false,
        }
    }

    #[test]
    fn a_key_is_refused_until_its_window_ends_and_only_for_its_own_limit() {
        let cache = OverLimitCache::new(10);
        let now = Instant::now();
        let fw = limit(Algorithm::FixedWindow, 5);
        cache.insert("k", &fw, now + Duration::from_millis(300), now);
        assert_eq!(
            cache.lookup("k", &fw, now + Duration::from_millis(100)),
            Some(Duration::from_millis(200))
        );
        assert_eq!(
            cache.lookup("k", &fw, now + Duration::from_millis(300)),
            None
        );
        assert_eq!(
            cache.lookup("k", &limit(Algorithm::FixedWindow, 6), now),
            None
        );
        assert_eq!(cache.lookup("other", &fw, now), None);
        assert_eq!(cache.hits(), 1);
    }

    #[test]
    fn token_buckets_and_a_size_of_zero_are_never_cached() {
        let now = Instant::now();
        let later = now + Duration::from_secs(1);
        let cache = OverLimitCache::new(10);
        let tb = limit(Algorithm::TokenBucket, 5);
        cache.insert("k", &tb, later, now);
        assert_eq!(cache.lookup("k", &tb, now), None);
        let off = OverLimitCache::new(0);
        let fw = limit(Algorithm::FixedWindow, 5);
        off.insert("k", &fw, later, now);
        assert_eq!(off.lookup("k", &fw, now), None);
    }

    #[test]
    fn a_full_cache_drops_expired_keys_and_never_grows_past_its_size() {
        let cache = OverLimitCache::new(2);
        let now = Instant::now();
        let rw = limit(Algorithm::RollingWindow, 1);
        cache.insert("a", &rw, now + Duration::from_millis(10), now);
        cache.insert("b", &rw, now + Duration::from_secs(1), now);
        let later = now + Duration::from_millis(20);
        cache.insert("c", &rw, now + Duration::from_secs(1), later);
        cache.insert("d", &rw, now + Duration::from_secs(1), later);
        assert!(cache.lookup("b", &rw, later).is_some());
        assert!(cache.lookup("c", &rw, later).is_some());
        assert_eq!(cache.lookup("d", &rw, later), None);
        assert_eq!(cache.entries.lock().expect("lock").len(), 2);
    }
}
