//! The check cache tier shared by every mixer replica (`mixer serve --shared-cache`), kept
//! in Redis or Redis Cluster.
//!
//! It implements the runtime's [`SharedTier`]: the runtime asks it after its in-process cache
//! missed and offers it the verdicts it evaluates. Redis holds, per config generation:
//!
//! - `mixer:cache:shapes:{GEN}`: a set of the shapes (read sets) the replicas have learned,
//!   so a replica that never evaluated a shape still looks entries of it up. Each replica
//!   keeps the set in process and reads it again at most every `--shared-cache-shapes-refresh`
//!   (a miss then costs one script call per known shape, and the set's slot is not hot);
//!   a shape it learns itself it knows at once;
//! - `mixer:cache:{GEN:KEY}`: one hash per verdict, field `v` the verdict ([`codec`]), field
//!   `u` the uses left for a verdict with a use limit, expiring with the verdict. The hash tag
//!   keeps an entry's fields in one slot of a Redis Cluster; each script touches one key.
//!
//! Uses are taken by a Lua script, atomically: a replica leases at most `--shared-cache-lease`
//! uses at a time and at most a 32nd of what is left (one at a time below 32), so a small
//! count is served exactly and a large one at worst a few leases short, never over. Unserved
//! leased uses are given back when the in-process entry expires.
//!
//! Every call is bounded by `--shared-cache-timeout` and goes through a circuit breaker; a
//! failure is a miss (or "not stored") and the runtime evaluates as without this tier.

pub mod codec;
mod metrics;
pub mod seal;
mod store;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mixer_adapter_api::breaker::{BreakerOptions, CircuitBreaker};
use mixer_model::{Bag, Verdict, Vocabulary};
use mixer_runtime::{SharedHit, SharedTier, use_limited};

pub use metrics::SharedCacheMetrics;
pub use store::{Target, parse_target};

use codec::Read;
use store::Store;

/// The default budget of one call to Redis.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(5);
/// The default cap on how long the in-process tier keeps a verdict learned from Redis.
pub const DEFAULT_LOCAL_LIFE: Duration = Duration::from_secs(2);
/// The default most uses leased at a time.
pub const DEFAULT_LEASE: u32 = 16;
/// The default time between two reads of a generation's shape set.
pub const DEFAULT_SHAPES_REFRESH: Duration = Duration::from_secs(1);
/// How long a generation's shape set outlives its last addition.
const SHAPES_LIFE: Duration = Duration::from_secs(24 * 3600);

/// How the shared tier is reached and used.
#[derive(Clone, Debug)]
pub struct SharedCacheOptions {
    /// Where Redis is.
    pub target: Target,
    /// For a `rediss://` target: the CA certificates (PEM) its certificate must chain to;
    /// `None`: the system's roots (or none checked, with `#insecure`).
    pub ca_pem: Option<Vec<u8>>,
    /// Budget of one lookup or store, connecting included.
    pub timeout: Duration,
    /// Longest the in-process tier keeps a verdict found in Redis.
    pub local_life: Duration,
    /// Most uses leased at a time.
    pub lease: u32,
    /// Time between two reads of the shape set: shapes other replicas learned are found
    /// this late at most, and a miss costs no read of the set in between.
    pub shapes_refresh: Duration,
    /// The breaker in front of Redis.
    pub breaker: BreakerOptions,
    /// The keys entries are sealed with ([`seal`]); `None`: entries are stored as they are,
    /// and whoever can write to Redis can have a verdict served.
    pub keys: Option<Arc<seal::Keys>>,
}

/// A shape learned, with its encoded form.
struct Shape {
    reads: Vec<Read>,
    bytes: Vec<u8>,
}

/// The shapes of the current generation: those known here, and those known to be in Redis.
///
/// Kept in process so that a miss does not read the shape set (one key per generation, so
/// one hot slot of a cluster) each time: it is read again at most every `shapes_refresh`,
/// and a shape this replica learns itself is known at once.
#[derive(Default)]
struct Shapes {
    generation: String,
    known: Vec<Arc<Shape>>,
    in_redis: HashSet<Vec<u8>>,
    /// When the set was last read (or a read started); `None`: never, or the last read failed.
    refreshed: Option<Instant>,
}

/// The Redis-backed shared tier.
pub struct SharedCache {
    options: SharedCacheOptions,
    store: Store,
    breaker: CircuitBreaker,
    shapes: Mutex<Shapes>,
    metrics: SharedCacheMetrics,
}

/// Why a call to Redis gave nothing.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("timed out")]
    Timeout,
    #[error("circuit open")]
    CircuitOpen,
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

impl Failure {
    fn label(&self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::CircuitOpen => "circuit_open",
            Failure::Redis(_) => "redis",
        }
    }
}

impl SharedCache {
    /// A tier for `options`, its metrics in `registry`. Starts connecting in the background
    /// (inside a tokio runtime); checks miss it until the connection is up.
    pub fn new(
        options: SharedCacheOptions,
        registry: &prometheus::Registry,
    ) -> Result<Arc<SharedCache>, String> {
        let metrics = SharedCacheMetrics::new(registry).map_err(|e| e.to_string())?;
        let store = Store::new(&options.target, options.ca_pem.as_deref())?;
        store.warm_up();
        Ok(Arc::new(SharedCache {
            breaker: CircuitBreaker::new(options.breaker),
            options,
            store,
            shapes: Mutex::new(Shapes::default()),
            metrics,
        }))
    }

    /// Its metrics.
    pub fn metrics(&self) -> &SharedCacheMetrics {
        &self.metrics
    }

    fn shapes(&self) -> std::sync::MutexGuard<'_, Shapes> {
        self.shapes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The shapes known for `generation` (forgetting another generation's), and whether
    /// this lookup is the one to read the shape set again (the first past the refresh time
    /// claims it, so concurrent misses do not all read it).
    fn known(&self, generation: &str) -> (Vec<Arc<Shape>>, bool) {
        let mut shapes = self.shapes();
        if shapes.generation != generation {
            *shapes = Shapes {
                generation: generation.to_string(),
                ..Shapes::default()
            };
        }
        let now = Instant::now();
        let refresh = shapes
            .refreshed
            .is_none_or(|at| now.duration_since(at) >= self.options.shapes_refresh);
        if refresh {
            shapes.refreshed = Some(now);
        }
        (shapes.known.clone(), refresh)
    }

    /// A read of the shape set failed: the next lookup tries again (the breaker spaces them).
    fn refresh_failed(&self, generation: &str) {
        let mut shapes = self.shapes();
        if shapes.generation == generation {
            shapes.refreshed = None;
        }
    }

    /// Adds the shapes Redis has for `generation`; returns those new here.
    fn learn(&self, generation: &str, members: Vec<Vec<u8>>) -> Vec<Arc<Shape>> {
        let mut shapes = self.shapes();
        if shapes.generation != generation {
            return Vec::new();
        }
        let mut new = Vec::new();
        for bytes in &members {
            if shapes.known.iter().any(|s| &s.bytes == bytes) {
                continue;
            }
            let Some(reads) = codec::decode_shape(bytes) else {
                continue;
            };
            let shape = Arc::new(Shape {
                reads,
                bytes: bytes.clone(),
            });
            shapes.known.push(shape.clone());
            new.push(shape);
        }
        shapes.in_redis = members.into_iter().collect();
        new
    }

    fn entry_key(generation: &str, hash: &[u8; 32]) -> String {
        let mut key = format!("mixer:cache:{{{generation}:");
        for b in hash {
            use std::fmt::Write as _;
            let _ = write!(key, "{b:02x}");
        }
        key.push('}');
        key
    }

    /// The generation entries are kept under: sealed entries under their own, so replicas
    /// with and without keys never read each other's.
    fn generation<'g>(&self, generation: &'g str) -> std::borrow::Cow<'g, str> {
        match self.options.keys {
            None => generation.into(),
            Some(_) => format!("{generation}-sealed").into(),
        }
    }

    fn shapes_key(generation: &str) -> String {
        format!("mixer:cache:shapes:{{{generation}}}")
    }

    /// Runs `call` within the budget and through the breaker, counting its outcome.
    async fn guarded<T, F>(&self, call: F) -> Result<T, Failure>
    where
        F: Future<Output = Result<T, Failure>>,
    {
        let Some(admission) = self.breaker.admit() else {
            return Err(Failure::CircuitOpen);
        };
        let started = Instant::now();
        let outcome = match tokio::time::timeout(self.options.timeout, call).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure::Timeout),
        };
        self.metrics
            .round_trip
            .observe(started.elapsed().as_secs_f64());
        match &outcome {
            Ok(_) => admission.success(),
            Err(_) => admission.failure(),
        }
        outcome
    }

    fn failed(&self, what: &str, failure: &Failure) {
        self.metrics
            .errors
            .with_label_values(&[failure.label()])
            .inc();
        tracing::debug!("shared cache {what}: {failure}");
    }

    async fn take_any(
        &self,
        generation: &str,
        shapes: &[Arc<Shape>],
        vocabulary: &Vocabulary,
        bag: &dyn Bag,
    ) -> Result<Option<(String, store::Taken)>, Failure> {
        let keys: Vec<String> = shapes
            .iter()
            .filter_map(|s| codec::entry_key(&s.reads, &s.bytes, vocabulary, bag))
            .map(|h| SharedCache::entry_key(generation, &h))
            .collect();
        let lease = self.options.lease.max(1);
        let taken =
            futures_util::future::join_all(keys.iter().map(|k| self.store.take(k, lease))).await;
        let mut found = None;
        for (key, t) in keys.into_iter().zip(taken) {
            if let Some(t) = t? {
                // The first found serves; uses taken from another (a request matches one
                // shape's entries only, so this is rare) are given back.
                if found.is_none() {
                    found = Some((key, t));
                } else if t.uses > 0 {
                    self.give_back(key.into_bytes().into(), t.uses);
                }
            }
        }
        Ok(found)
    }

    async fn lookup_in_redis(
        &self,
        generation: &str,
        vocabulary: &Vocabulary,
        bag: &dyn Bag,
    ) -> Result<Option<(String, store::Taken)>, Failure> {
        let (known, refresh) = self.known(generation);
        if !refresh {
            return self.take_any(generation, &known, vocabulary, bag).await;
        }
        let shapes_key = SharedCache::shapes_key(generation);
        let (members, found) = futures_util::future::join(
            self.store.members(&shapes_key),
            self.take_any(generation, &known, vocabulary, bag),
        )
        .await;
        let members = match members {
            Ok(members) => members,
            Err(e) => {
                self.refresh_failed(generation);
                return Err(e.into());
            }
        };
        self.metrics.shape_reads.inc();
        let members = match &self.options.keys {
            None => members,
            Some(keys) => members
                .iter()
                .filter_map(|m| keys.open(shapes_key.as_bytes(), m, 0).ok())
                .map(<[u8]>::to_vec)
                .collect(),
        };
        // Shapes another replica learned: their entries may hold this request.
        let new = self.learn(generation, members);
        if let Some(found) = found? {
            return Ok(Some(found));
        }
        if new.is_empty() {
            return Ok(None);
        }
        self.take_any(generation, &new, vocabulary, bag).await
    }
}

#[async_trait::async_trait]
impl SharedTier for SharedCache {
    async fn lookup(
        &self,
        generation: &str,
        vocabulary: &Vocabulary,
        bag: &dyn Bag,
    ) -> Option<SharedHit> {
        let generation = &*self.generation(generation);
        let found = self
            .guarded(self.lookup_in_redis(generation, vocabulary, bag))
            .await;
        let (key, taken) = match found {
            Ok(Some(found)) => found,
            Ok(None) => {
                self.metrics.misses.inc();
                return None;
            }
            Err(e) => {
                self.failed("lookup", &e);
                return None;
            }
        };
        let value = match &self.options.keys {
            None => &taken.value[..],
            Some(keys) => match keys.open(key.as_bytes(), &taken.value, unix_ms()) {
                Ok(value) => value,
                Err(e) => {
                    // Not stored by a replica holding the key, or changed since: never
                    // served.
                    self.metrics.errors.with_label_values(&["seal"]).inc();
                    tracing::warn!("shared cache entry {key} refused: {e}");
                    return None;
                }
            },
        };
        let Some(verdict) = codec::decode_verdict(value, vocabulary) else {
            // Written by another build, or damaged: not served, and its uses are left.
            self.metrics.errors.with_label_values(&["decode"]).inc();
            return None;
        };
        self.metrics.hits.inc();
        let life = Duration::from_millis(u64::try_from(taken.ttl_ms).unwrap_or(0));
        let (uses, lease) = if taken.uses >= 0 {
            self.metrics
                .uses_leased
                .inc_by(u64::try_from(taken.uses).unwrap_or(0));
            (taken.uses, Some(Arc::<[u8]>::from(key.into_bytes())))
        } else {
            (i64::from(verdict.valid_use_count), None)
        };
        Some(SharedHit {
            verdict,
            local_life: life.min(self.options.local_life),
            uses,
            lease,
        })
    }

    async fn store(
        &self,
        generation: &str,
        vocabulary: &Vocabulary,
        bag: &dyn Bag,
        verdict: &Verdict,
    ) -> bool {
        let generation = &*self.generation(generation);
        let reads = codec::shape_of(verdict, vocabulary);
        let bytes = codec::encode_shape(&reads);
        let Some(hash) = codec::entry_key(&reads, &bytes, vocabulary, bag) else {
            return false;
        };
        let key = SharedCache::entry_key(generation, &hash);
        let ttl_ms = u64::try_from(verdict.valid_duration.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let value = codec::encode_verdict(verdict, vocabulary);
        let value = match &self.options.keys {
            None => value,
            Some(keys) => keys.seal(key.as_bytes(), &value, unix_ms().saturating_add(ttl_ms)),
        };
        let uses = if use_limited(verdict) {
            i64::from(verdict.valid_use_count)
        } else {
            -1
        };
        {
            // Known here from now on: this replica looks its entries up without asking.
            let mut shapes = self.shapes();
            if shapes.generation == generation && !shapes.known.iter().any(|s| s.bytes == bytes) {
                shapes.known.push(Arc::new(Shape {
                    reads,
                    bytes: bytes.clone(),
                }));
            }
        }
        let add_shape = !self.shapes().in_redis.contains(&bytes);
        let shapes_key = SharedCache::shapes_key(generation);
        let stored = self
            .guarded(async {
                if add_shape {
                    let member = match &self.options.keys {
                        None => bytes.clone(),
                        Some(keys) => keys.seal(shapes_key.as_bytes(), &bytes, 0),
                    };
                    self.store
                        .add_member(&shapes_key, &member, SHAPES_LIFE)
                        .await?;
                }
                Ok(self.store.put(&key, &value, ttl_ms, uses).await?)
            })
            .await;
        match stored {
            Ok(_) => {
                if add_shape {
                    self.shapes().in_redis.insert(bytes);
                }
                self.metrics.stores.inc();
                // Held there: by this write or an identical one another replica made first,
                // whose count stands (two fills never both count their uses).
                true
            }
            Err(e) => {
                self.failed("store", &e);
                false
            }
        }
    }

    fn give_back(&self, lease: Arc<[u8]>, uses: i64) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.store.clone();
        let metrics = self.metrics.clone();
        let budget = self.options.timeout;
        rt.spawn(async move {
            let key = String::from_utf8_lossy(&lease).into_owned();
            if let Ok(Ok(true)) = tokio::time::timeout(budget, store.give_back(&key, uses)).await {
                metrics
                    .uses_returned
                    .inc_by(u64::try_from(uses).unwrap_or(0));
            }
        });
    }
}

/// Now, in Unix milliseconds, as sealed expiries are written (replicas' clocks are assumed
/// to agree within the verdicts' lives, as NTP keeps them).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
