//! The counters: sharded maps from counter key to algorithm state, with least-recently-used
//! order for the key cap, lazy eviction of idle counters, and the deduplication memory.
//!
//! Time is `tokio::time::Instant` (nanoseconds since the store was made), so tests can run on
//! tokio's paused clock.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap, VecDeque};

use hashbrown::HashTable;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mixer_adapter_quota_common::{Algorithm, Decision, Limit};
use tokio::time::Instant;

/// Counters whose state is back to "fresh" are dropped, at most this many per allocation.
const SWEEP_PER_CALL: usize = 4;
const MAX_SHARDS: u64 = 16;

/// One counter's state.
#[derive(Clone, Debug)]
enum State {
    /// Window end and units used in it.
    Fixed { end: u64, used: i64 },
    /// Non-empty buckets (index, units), oldest first, and their sum.
    Rolling {
        buckets: VecDeque<(u64, i64)>,
        total: i64,
    },
    /// Tokens left at `at`.
    Token { tokens: f64, at: u64 },
}

#[derive(Debug)]
struct Entry {
    key: Arc<str>,
    /// The key's hash, computed once per call: it picks the shard and the table slot.
    hash: u64,
    state: State,
    /// Position in the shard's LRU order.
    seq: u64,
    /// From then on the state is equivalent to no state: dropping it loses nothing.
    idle_at: u64,
}

#[derive(Debug)]
struct Remembered {
    granted: i64,
    /// When the first answer's valid duration ends.
    expires_at: u64,
    /// What the first answer said was left, and when the counter was to be full again.
    remaining: i64,
    reset_at: u64,
}

#[derive(Debug, Default)]
struct Shard {
    entries: HashTable<Entry>,
    /// Sequence number of last use -> (hash, key).
    lru: BTreeMap<u64, (u64, Arc<str>)>,
    seq: u64,
    dedup: HashMap<String, Remembered>,
    dedup_order: VecDeque<(u64, String)>,
}

/// Counts of evictions, for the exposition.
#[derive(Debug, Default)]
pub struct Evictions {
    /// Counters dropped because their state was back to fresh (nothing lost).
    pub idle: AtomicU64,
    /// Counters dropped because of the key cap (their counts are lost).
    pub cap: AtomicU64,
    /// Deduplication ids dropped before their time because of the cap.
    pub dedup_cap: AtomicU64,
}

/// All counters of one handler.
#[derive(Debug)]
pub struct Store {
    shards: Vec<Mutex<Shard>>,
    hasher: RandomState,
    epoch: Instant,
    per_shard_cap: usize,
    dedup_ttl: u64,
    /// Eviction counts.
    pub evictions: Evictions,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// How an allocation takes units from a counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// A check: nothing while fewer than `min_remaining` units are left; else `amount` when
    /// it fits, with best effort what is left (possibly 0), else nothing.
    Check {
        /// Grant what is left when `amount` does not fit.
        best_effort: bool,
        /// Refuse while fewer units than this are left (0: no minimum).
        min_remaining: i64,
    },
    /// A report's charge: usage already spent, counted whole even past the limit.
    Charge,
}

impl Take {
    fn min_remaining(self) -> i64 {
        match self {
            Take::Check { min_remaining, .. } => min_remaining,
            Take::Charge => 0,
        }
    }
}

/// What `take` gets of `amount` when `available` units are left.
fn grant(available: i64, amount: i64, take: Take) -> i64 {
    match take {
        Take::Charge => amount,
        Take::Check { min_remaining, .. } if available < min_remaining => 0,
        Take::Check { .. } if amount <= available => amount,
        Take::Check {
            best_effort: true, ..
        } => available.max(0),
        Take::Check { .. } => 0,
    }
}

impl Store {
    /// A store for at most `max_keys` counters and `max_keys` deduplication ids.
    pub fn new(max_keys: u64, dedup_ttl: Duration) -> Store {
        Store::with_shards(max_keys, MAX_SHARDS, dedup_ttl)
    }

    /// [`Store::new`] with at most `max_shards` shards (tests use one, to know every
    /// counter's shard).
    fn with_shards(max_keys: u64, max_shards: u64, dedup_ttl: Duration) -> Store {
        let shards = max_shards.clamp(1, max_keys.max(1));
        let per_shard_cap = usize::try_from(max_keys.max(1) / shards).unwrap_or(usize::MAX);
        Store {
            shards: (0..shards).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: RandomState::new(),
            epoch: Instant::now(),
            per_shard_cap,
            dedup_ttl: nanos(dedup_ttl),
            evictions: Evictions::default(),
        }
    }

    fn now(&self) -> u64 {
        nanos(Instant::now().saturating_duration_since(self.epoch))
    }

    /// The shard of `key`, locked, and the key's hash (SipHash with this store's random
    /// keys, so that request values cannot be chosen to collide).
    fn shard(&self, key: &str) -> (MutexGuard<'_, Shard>, u64) {
        let hash = self.hasher.hash_one(key);
        let i = (hash % self.shards.len() as u64) as usize;
        (
            self.shards[i].lock().unwrap_or_else(|e| e.into_inner()),
            hash,
        )
    }

    /// Counters tracked now (at most `maxKeys`).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).entries.len())
            .sum()
    }

    /// Deduplication ids remembered now (at most `maxKeys`).
    pub fn dedup_len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).dedup.len())
            .sum()
    }

    /// Drops every counter whose state is back to fresh and every expired deduplication id.
    pub fn sweep(&self) {
        let now = self.now();
        for s in &self.shards {
            let mut shard = s.lock().unwrap_or_else(|e| e.into_inner());
            let shard = &mut *shard;
            let lru = &mut shard.lru;
            shard.entries.retain(|e| {
                if e.idle_at > now {
                    return true;
                }
                lru.remove(&e.seq);
                self.evictions.idle.fetch_add(1, Ordering::Relaxed);
                false
            });
            shard.forget_dedup(now, usize::MAX);
        }
    }

    /// The counter `key` as it stands now, without charging or keeping anything: units that
    /// could be granted and the time until it is full again (a counter not tracked is full).
    pub fn peek(&self, key: &str, limit: &Limit) -> (i64, Duration) {
        let now = self.now();
        let state = {
            let (shard, hash) = self.shard(key);
            shard.get(hash, key).map(|e| e.state.clone())
        };
        // Deciding nothing on a copy brings a window or a bucket up to now, and says what is
        // left; the copy is dropped.
        let mut state = state.unwrap_or_else(|| fresh(limit, now));
        let d = decide(
            &mut state,
            limit,
            now,
            0,
            Take::Check {
                best_effort: true,
                min_remaining: 0,
            },
        );
        (d.remaining, Duration::from_nanos(d.reset))
    }

    /// Allocates `amount` (>= 0; 0 only looks, for a minimum remaining) on `key` under
    /// `limit`, as `take` says; `dedup_id` (when not empty) makes a repeat within the
    /// deduplication time answer the first answer without charging again.
    pub fn allocate(
        &self,
        key: &str,
        limit: &Limit,
        amount: i64,
        take: Take,
        dedup_id: &str,
    ) -> Decision {
        let now = self.now();
        let (mut guard, hash) = self.shard(key);
        let shard = &mut *guard;
        shard.sweep_front(now, SWEEP_PER_CALL, &self.evictions);
        shard.forget_dedup(now, SWEEP_PER_CALL);

        let dedup_key = (!dedup_id.is_empty()).then(|| format!("{key}\u{0}{dedup_id}"));
        if let Some(dk) = &dedup_key
            && let Some(r) = shard.dedup.get(dk)
        {
            return Decision {
                granted: r.granted,
                valid_duration: Duration::from_nanos(r.expires_at.saturating_sub(now)),
                deduplicated: true,
                remaining: r.remaining,
                reset_after: Duration::from_nanos(r.reset_at.saturating_sub(now)),
            };
        }

        let d = match shard.entries.find_mut(hash, |e| *e.key == *key) {
            Some(entry) => {
                // Only a counter that is not already the most recently used moves in the LRU
                // order: a hot counter costs one lookup and no reordering.
                if entry.seq != shard.seq {
                    shard.seq += 1;
                    if let Some(k) = shard.lru.remove(&entry.seq) {
                        shard.lru.insert(shard.seq, k);
                    }
                    entry.seq = shard.seq;
                }
                let d = decide(&mut entry.state, limit, now, amount, take);
                entry.idle_at = d.idle_at;
                d
            }
            None => {
                shard.seq += 1;
                let k: Arc<str> = Arc::from(key);
                let mut entry = Entry {
                    key: k.clone(),
                    hash,
                    state: fresh(limit, now),
                    seq: shard.seq,
                    idle_at: now,
                };
                let d = decide(&mut entry.state, limit, now, amount, take);
                entry.idle_at = d.idle_at;
                shard.lru.insert(shard.seq, (hash, k));
                shard.entries.insert_unique(hash, entry, |e| e.hash);
                d
            }
        };
        let (granted, valid) = (d.granted, d.valid);
        while shard.entries.len() > self.per_shard_cap {
            let Some((_, (h, oldest))) = shard.lru.pop_first() else {
                break;
            };
            shard.remove(h, &oldest);
            self.evictions.cap.fetch_add(1, Ordering::Relaxed);
        }

        if let Some(dk) = dedup_key {
            let forget_at = now.saturating_add(self.dedup_ttl);
            shard.dedup.insert(
                dk.clone(),
                Remembered {
                    granted,
                    expires_at: now.saturating_add(valid),
                    remaining: d.remaining,
                    reset_at: now.saturating_add(d.reset),
                },
            );
            shard.dedup_order.push_back((forget_at, dk));
            while shard.dedup.len() > self.per_shard_cap {
                let Some((_, k)) = shard.dedup_order.pop_front() else {
                    break;
                };
                shard.dedup.remove(&k);
                self.evictions.dedup_cap.fetch_add(1, Ordering::Relaxed);
            }
        }
        Decision {
            granted,
            valid_duration: Duration::from_nanos(valid),
            deduplicated: false,
            remaining: d.remaining,
            reset_after: Duration::from_nanos(d.reset),
        }
    }
}

impl Shard {
    fn get(&self, hash: u64, key: &str) -> Option<&Entry> {
        self.entries.find(hash, |e| *e.key == *key)
    }

    fn remove(&mut self, hash: u64, key: &str) {
        if let Ok(found) = self.entries.find_entry(hash, |e| *e.key == *key) {
            found.remove();
        }
    }

    /// Drops least recently used counters that are idle, up to `budget`.
    fn sweep_front(&mut self, now: u64, budget: usize, ev: &Evictions) {
        for _ in 0..budget {
            let Some((&seq, (hash, key))) = self.lru.first_key_value() else {
                return;
            };
            match self.get(*hash, key) {
                Some(e) if e.idle_at > now => return,
                _ => {
                    let (hash, key) = (*hash, key.clone());
                    self.lru.remove(&seq);
                    self.remove(hash, &key);
                    ev.idle.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Forgets deduplication ids whose time is over, up to `budget`.
    fn forget_dedup(&mut self, now: u64, budget: usize) {
        for _ in 0..budget {
            match self.dedup_order.front() {
                Some((at, _)) if *at <= now => {
                    if let Some((_, k)) = self.dedup_order.pop_front() {
                        self.dedup.remove(&k);
                    }
                }
                _ => return,
            }
        }
    }
}

fn fresh(limit: &Limit, now: u64) -> State {
    match limit.algorithm {
        Algorithm::FixedWindow => State::Fixed { end: now, used: 0 },
        Algorithm::RollingWindow => State::Rolling {
            buckets: VecDeque::new(),
            total: 0,
        },
        Algorithm::TokenBucket => State::Token {
            tokens: limit.max_amount as f64,
            at: now,
        },
    }
}

/// What one allocation did to a counter (times in ns).
struct Decided {
    granted: i64,
    valid: u64,
    /// From then on the state is equivalent to no state.
    idle_at: u64,
    remaining: i64,
    /// From now until the counter is back to the full limit.
    reset: u64,
}

/// Applies one allocation.
fn decide(state: &mut State, limit: &Limit, now: u64, amount: i64, take: Take) -> Decided {
    let max = limit.max_amount;
    let valid = nanos(limit.valid_duration).max(1);
    match (limit.algorithm, &mut *state) {
        (Algorithm::FixedWindow, State::Fixed { end, used }) => {
            if now >= *end {
                *end = now.saturating_add(valid);
                *used = 0;
            }
            let granted = grant(max - *used, amount, take);
            *used += granted;
            Decided {
                granted,
                valid: *end - now,
                idle_at: *end,
                remaining: max - *used,
                reset: *end - now,
            }
        }
        (Algorithm::RollingWindow, State::Rolling { buckets, total }) => {
            let b = nanos(limit.bucket_duration).max(1);
            let n = limit.buckets().max(1);
            let cur = now / b;
            while let Some(&(idx, units)) = buckets.front() {
                if idx + n > cur {
                    break;
                }
                *total -= units;
                buckets.pop_front();
            }
            let granted = grant(max - *total, amount, take);
            if granted > 0 {
                *total += granted;
                match buckets.back_mut() {
                    Some((idx, units)) if *idx == cur => *units += granted,
                    _ => buckets.push_back((cur, granted)),
                }
            }
            let leaves = |idx: u64| (idx + n).saturating_mul(b).saturating_sub(now);
            let valid_for = if granted > 0 {
                valid
            } else {
                buckets.front().map_or(valid, |&(idx, _)| leaves(idx))
            };
            let idle = buckets.back().map_or(now, |&(idx, _)| now + leaves(idx));
            Decided {
                granted,
                valid: valid_for,
                idle_at: idle,
                remaining: max - *total,
                reset: buckets.front().map_or(0, |&(idx, _)| leaves(idx)),
            }
        }
        (Algorithm::TokenBucket, State::Token { tokens, at }) => {
            if max <= 0 {
                return Decided {
                    granted: grant(0, amount, take),
                    valid,
                    idle_at: now,
                    remaining: 0,
                    reset: 0,
                };
            }
            let rate = max as f64 / valid as f64; // tokens per ns
            let elapsed = now.saturating_sub(*at) as f64;
            *tokens = (*tokens + elapsed * rate).min(max as f64);
            *at = now;
            let available = (*tokens + 1e-9).floor() as i64;
            let granted = grant(available, amount, take);
            // A charge may leave the bucket in debt: usage past the limit is paid back by
            // refill time before the next check is admitted.
            *tokens = match take {
                Take::Charge => *tokens - granted as f64,
                Take::Check { .. } => (*tokens - granted as f64).max(0.0),
            };
            let needed = amount.max(take.min_remaining());
            let valid_for = if granted > 0 {
                (granted as f64 / rate).ceil() as u64
            } else if needed > max {
                valid
            } else {
                ((needed as f64 - *tokens) / rate).ceil().max(0.0) as u64
            };
            let refill = ((max as f64 - *tokens) / rate).ceil() as u64;
            Decided {
                granted,
                valid: valid_for,
                idle_at: now + refill,
                remaining: (*tokens + 1e-9).floor() as i64,
                reset: refill,
            }
        }
        // The algorithm of a key never changes within a handler; start over if it did.
        _ => {
            *state = fresh(limit, now);
            decide(state, limit, now, amount, take)
        }
    }
}

#[cfg(test)]
mod lru_order {
    use std::collections::VecDeque;
    use std::time::Duration;

    use mixer_adapter_quota_common::{Algorithm, Limit};
    use proptest::prelude::*;

    use super::{Store, Take};

    const CHECK: Take = Take::Check {
        best_effort: false,
        min_remaining: 0,
    };

    proptest! {
        /// Against a plain LRU list of (key, units used): with a window longer than the
        /// test, a counter leaves only by the key cap, the least recently used first, and
        /// comes back fresh; every grant is what the list says. A counter used again while
        /// it is already the most recent one keeps its place without being moved.
        #[test]
        fn key_cap_evicts_the_least_recently_used(
            cap in 1u64..5,
            calls in proptest::collection::vec((0u8..7, 1i64..4), 1..60),
        ) {
            let limit = Limit {
                max_amount: 5,
                valid_duration: Duration::from_secs(3600),
                bucket_duration: Duration::from_secs(60),
                algorithm: Algorithm::FixedWindow,
                shadow: false,
            };
            let store = Store::with_shards(cap, 1, Duration::from_secs(1));
            let mut model: VecDeque<(String, i64)> = VecDeque::new();
            for (key, amount) in calls {
                let key = format!("k{key}");
                let used = match model.iter().position(|(k, _)| *k == key) {
                    Some(i) => model.remove(i).map_or(0, |(_, u)| u),
                    None => 0,
                };
                let granted = if used + amount <= limit.max_amount { amount } else { 0 };
                model.push_back((key.clone(), used + granted));
                if model.len() as u64 > cap {
                    model.pop_front();
                }
                let d = store.allocate(&key, &limit, amount, CHECK, "");
                prop_assert_eq!(d.granted, granted, "key {}", key);
                prop_assert_eq!(d.remaining, limit.max_amount - used - granted);
                prop_assert_eq!(store.len(), model.len());
            }
        }
    }
}
