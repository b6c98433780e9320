//! The second-level check cache.
//!
//! A verdict depends only on the attributes its evaluation read: the same values for those
//! reads give the same evaluation path, the same instances and the same handler calls. The
//! cache therefore keys a verdict by exactly those reads (Mixer's referenced attributes):
//! present values, absent names, map keys. An attribute the decision did not read does not
//! split the cache; one it did read does.
//!
//! The set of reads is only known after evaluating, so the cache keeps the distinct read sets
//! ("shapes") it has seen; a lookup builds the key of the request under each shape. A config
//! has few shapes (one per distinct path through its rules).
//!
//! Entries honour the verdict's valid duration and use count (the minimum over the handlers
//! consulted), the cache is bounded in entries, each snapshot has its own (so a config change
//! starts empty), and concurrent misses for identical requests share one evaluation.
//!
//! With a shared tier ([`crate::SharedTier`], `--shared-cache`) a miss here asks it before
//! evaluating. A verdict found there is kept here for no longer than its life there (capped),
//! with only the uses leased from it; a verdict evaluated here is offered to it, and one
//! whose use count is a limit is then counted there only, so that the limit holds across
//! every replica.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use mixer_model::{AttrId, Bag, Value, Verdict};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::dispatch::CheckError;
use crate::metrics::RuntimeMetrics;
use crate::shared_tier::{SharedTierRef, use_limited};
use crate::snapshot::Snapshot;

/// A decided check: the verdict and whether it came from the cache.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The verdict.
    pub verdict: Arc<Verdict>,
    /// True when no handler was consulted because a cached verdict applied.
    pub cache_hit: bool,
}

/// Cache settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheOptions {
    /// Most verdicts kept; 0 turns the cache off.
    pub max_entries: u64,
    /// Most distinct read sets tracked; verdicts of further shapes are not cached.
    pub max_shapes: usize,
}

impl Default for CacheOptions {
    fn default() -> CacheOptions {
        CacheOptions {
            max_entries: 10_000,
            max_shapes: 256,
        }
    }
}

type Read = (AttrId, Option<Arc<str>>);

struct Entry {
    verdict: Arc<Verdict>,
    expires: Instant,
    uses_left: AtomicI64,
    /// The shared entry its uses were leased from, to give back those left at expiry.
    lease: Option<Arc<[u8]>>,
}

/// How a coalesced miss was decided.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Filled {
    /// Evaluated here.
    Evaluated,
    /// Found in the shared tier.
    Shared,
}

type Inflight = Arc<OnceCell<Result<(Arc<Verdict>, Filled), CheckError>>>;

/// One snapshot's verdict cache.
pub(crate) struct CheckCache {
    entries: moka::sync::Cache<Vec<u8>, Arc<Entry>>,
    shapes: RwLock<Vec<Arc<[Read]>>>,
    inflight: Mutex<HashMap<Vec<u8>, Inflight>>,
    max_shapes: usize,
    metrics: RuntimeMetrics,
    shared: Option<SharedTierRef>,
}

impl CheckCache {
    pub(crate) fn new(
        options: CacheOptions,
        metrics: &RuntimeMetrics,
        shared: Option<SharedTierRef>,
    ) -> Option<CheckCache> {
        if options.max_entries == 0 {
            return None;
        }
        let evictions = metrics.cache_evictions.clone();
        let entries = moka::sync::Cache::builder()
            .max_capacity(options.max_entries)
            .eviction_listener(move |_k, _v, cause| {
                if cause == moka::notification::RemovalCause::Size {
                    evictions.inc();
                }
            })
            .build();
        Some(CheckCache {
            entries,
            shapes: RwLock::new(Vec::new()),
            inflight: Mutex::new(HashMap::new()),
            max_shapes: options.max_shapes,
            metrics: metrics.clone(),
            shared,
        })
    }

    fn lookup(&self, bag: &dyn Bag) -> Option<Arc<Verdict>> {
        // Looked up under the read lock: copying the shape list would allocate on every check.
        let shapes = self.shapes.read().ok()?;
        let now = Instant::now();
        let mut key = Vec::with_capacity(128);
        for (i, shape) in shapes.iter().enumerate() {
            key.clear();
            key.extend_from_slice(&(i as u32).to_le_bytes());
            encode_reads(bag, shape, &mut key);
            let Some(entry) = self.entries.get(&key) else {
                continue;
            };
            if now < entry.expires && entry.uses_left.fetch_sub(1, Ordering::Relaxed) > 0 {
                return Some(entry.verdict.clone());
            }
            // Uses leased from the shared tier and not served go back there; swapped out
            // so that two lookups seeing the expiry at once cannot both give them back.
            if let (Some(lease), Some(shared)) = (&entry.lease, &self.shared) {
                let left = entry.uses_left.swap(0, Ordering::Relaxed);
                if left > 0 {
                    shared.0.give_back(lease.clone(), left);
                }
            }
            self.entries.invalidate(&key);
        }
        None
    }

    fn insert(&self, bag: &dyn Bag, verdict: &Arc<Verdict>) {
        self.insert_for(
            bag,
            verdict,
            verdict.valid_duration,
            i64::from(verdict.valid_use_count),
            None,
        );
    }

    /// Keeps `verdict` for `life` and `uses`, leased from the shared entry `lease` if any.
    fn insert_for(
        &self,
        bag: &dyn Bag,
        verdict: &Arc<Verdict>,
        life: std::time::Duration,
        uses: i64,
        lease: Option<Arc<[u8]>>,
    ) {
        let reads: Vec<Read> = verdict
            .referenced
            .iter()
            .map(|r| (r.attr, r.map_key.clone()))
            .collect();
        let shape_id = {
            let Ok(mut shapes) = self.shapes.write() else {
                return;
            };
            match shapes.iter().position(|s| s.as_ref() == reads.as_slice()) {
                Some(i) => i,
                None if shapes.len() < self.max_shapes => {
                    shapes.push(reads.into());
                    shapes.len() - 1
                }
                None => return,
            }
        };
        let Some(shape) = self
            .shapes
            .read()
            .ok()
            .and_then(|s| s.get(shape_id).cloned())
        else {
            return;
        };
        let mut key = Vec::with_capacity(128);
        key.extend_from_slice(&(shape_id as u32).to_le_bytes());
        encode_reads(bag, &shape, &mut key);
        self.entries.insert(
            key,
            Arc::new(Entry {
                verdict: verdict.clone(),
                expires: Instant::now() + life,
                uses_left: AtomicI64::new(uses),
                lease,
            }),
        );
        self.metrics
            .cache_entries
            .set(i64::try_from(self.entries.entry_count()).unwrap_or(i64::MAX));
    }

    pub(crate) fn invalidate_all(&self) {
        self.entries.invalidate_all();
    }

    pub(crate) fn len(&self) -> u64 {
        self.entries.run_pending_tasks();
        self.entries.entry_count()
    }
}

impl Snapshot {
    /// Decides a check through the snapshot's check cache, and observes how long that took
    /// in `mixer_check_duration_seconds`. Front ends call this.
    pub async fn check_cached(&self, bag: &dyn Bag) -> Result<Checked, CheckError> {
        self.check_cached_recording(bag, true).await
    }

    /// [`Snapshot::check_cached`] for a front end that answers without the attributes the
    /// decision read (ext_authz, forward-auth). With the cache off they are then not recorded
    /// at all, and the verdict's `referenced` is empty; with it on they are, as the cache's
    /// key.
    pub async fn check_cached_without_reads(&self, bag: &dyn Bag) -> Result<Checked, CheckError> {
        self.check_cached_recording(bag, false).await
    }

    async fn check_cached_recording(
        &self,
        bag: &dyn Bag,
        record_reads: bool,
    ) -> Result<Checked, CheckError> {
        let started = std::time::Instant::now();
        self.metrics.check_activity.mark(started);
        let checked = self.check_through_cache(bag, record_reads).await;
        self.metrics
            .check_duration
            .observe(started.elapsed().as_secs_f64());
        checked
    }

    async fn check_through_cache(
        &self,
        bag: &dyn Bag,
        record_reads: bool,
    ) -> Result<Checked, CheckError> {
        let Some(cache) = &self.cache else {
            let (verdict, _) = self.check_uncached(bag, record_reads).await?;
            return Ok(Checked {
                verdict: Arc::new(verdict),
                cache_hit: false,
            });
        };
        if let Some(verdict) = cache.lookup(bag) {
            self.metrics.cache_hits.inc();
            return Ok(self.count_hit(verdict));
        }
        self.metrics.cache_misses.inc();
        // Identical requests missing at the same time share one evaluation.
        let mut whole = Vec::with_capacity(512);
        encode_bag(bag, self.vocabulary().len(), &mut whole);
        let cell = {
            let mut inflight = cache.inflight.lock().unwrap_or_else(|e| e.into_inner());
            inflight.entry(whole.clone()).or_default().clone()
        };
        let mut filled_here = false;
        let result = cell
            .get_or_init(|| {
                filled_here = true;
                self.fill(cache, bag)
            })
            .await
            .clone();
        if let Ok(mut inflight) = cache.inflight.lock() {
            inflight.remove(&whole);
        }
        match result {
            Ok((verdict, Filled::Shared)) => {
                // A shared verdict with a use limit serves only the uses leased: a request
                // that waited on another's lookup takes its own use, here or evaluated.
                if !filled_here && use_limited(&verdict) {
                    return match cache.lookup(bag) {
                        Some(verdict) => {
                            self.metrics.cache_hits.inc();
                            Ok(self.count_hit(verdict))
                        }
                        None => {
                            let (verdict, _) = self.check_uncached(bag, record_reads).await?;
                            Ok(Checked {
                                verdict: Arc::new(verdict),
                                cache_hit: false,
                            })
                        }
                    };
                }
                Ok(self.count_hit(verdict))
            }
            Ok((verdict, Filled::Evaluated)) => Ok(Checked {
                verdict,
                cache_hit: false,
            }),
            Err(e) => Err(e),
        }
    }

    /// A verdict served without consulting a handler: counted as the evaluation would have.
    fn count_hit(&self, verdict: Arc<Verdict>) -> Checked {
        if verdict.is_allowed() {
            self.metrics.check_results.allowed.inc();
        } else {
            self.metrics.check_results.denied.inc();
        }
        Checked {
            verdict,
            cache_hit: true,
        }
    }

    /// Decides a miss of the in-process tier: from the shared tier when it has the verdict,
    /// else by evaluating (and then offering the verdict to both tiers).
    async fn fill(
        &self,
        cache: &CheckCache,
        bag: &dyn Bag,
    ) -> Result<(Arc<Verdict>, Filled), CheckError> {
        let shared = match (&cache.shared, &self.generation) {
            (Some(tier), Some(generation)) => Some((tier, generation)),
            _ => None,
        };
        if let Some((tier, generation)) = shared
            && let Some(hit) = tier.0.lookup(generation, self.vocabulary(), bag).await
        {
            let verdict = Arc::new(hit.verdict);
            // This request takes one of the uses leased.
            cache.insert_for(bag, &verdict, hit.local_life, hit.uses - 1, hit.lease);
            return Ok((verdict, Filled::Shared));
        }
        // The cache keys the verdict by its reads: always recorded here.
        let (verdict, cacheable) = self.check_uncached(bag, true).await?;
        let verdict = Arc::new(verdict);
        if cacheable && verdict.valid_use_count > 0 && !verdict.valid_duration.is_zero() {
            let stored = match shared {
                Some((tier, generation)) => {
                    tier.0
                        .store(generation, self.vocabulary(), bag, &verdict)
                        .await
                }
                None => false,
            };
            // A use limit held by the shared tier is counted there only: uses kept here
            // too would be served beside those the other replicas take.
            if !(stored && use_limited(&verdict)) {
                cache.insert(bag, &verdict);
            }
        }
        Ok((verdict, Filled::Evaluated))
    }

    /// Verdicts held in this snapshot's cache (after pending evictions ran).
    pub fn cached_verdicts(&self) -> u64 {
        self.cache.as_ref().map_or(0, CheckCache::len)
    }

    /// Drops every cached verdict of this snapshot.
    pub fn clear_cache(&self) {
        if let Some(cache) = &self.cache {
            cache.invalidate_all();
        }
    }
}

fn encode_reads(bag: &dyn Bag, reads: &[Read], out: &mut Vec<u8>) {
    for (attr, key) in reads {
        match (bag.get(*attr), key) {
            (None, _) => out.push(0),
            (Some(Value::StringMap(map)), Some(k)) => match map.get(k) {
                Some(v) => {
                    out.push(1);
                    encode_str(v, out);
                }
                None => out.push(2),
            },
            (Some(v), _) => {
                out.push(3);
                encode_value(v, out);
            }
        }
    }
}

fn encode_bag(bag: &dyn Bag, attrs: usize, out: &mut Vec<u8>) {
    for i in 0..attrs {
        let id = AttrId(i as u32);
        if let Some(v) = bag.get(id) {
            out.extend_from_slice(&id.0.to_le_bytes());
            encode_value(v, out);
        }
    }
}

fn encode_str(s: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// An unambiguous byte encoding of a value: a type tag, then fixed-size or length-prefixed
/// data. The in-process cache keys on it, and the shared tier hashes it into its Redis keys.
pub fn encode_value(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::String(s) => {
            out.push(1);
            encode_str(s, out);
        }
        Value::Int64(i) => {
            out.push(2);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::Double(d) => {
            out.push(3);
            out.extend_from_slice(&d.to_bits().to_le_bytes());
        }
        Value::Bool(b) => out.extend_from_slice(&[4, u8::from(*b)]),
        Value::Timestamp(t) => {
            out.push(5);
            out.extend_from_slice(&t.0.to_le_bytes());
        }
        Value::Duration(d) => {
            out.push(6);
            out.extend_from_slice(&d.0.to_le_bytes());
        }
        Value::Bytes(b) => {
            out.push(7);
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
        Value::IpAddress(std::net::IpAddr::V4(ip)) => {
            out.push(8);
            out.extend_from_slice(&ip.octets());
        }
        Value::IpAddress(std::net::IpAddr::V6(ip)) => {
            out.push(9);
            out.extend_from_slice(&ip.octets());
        }
        Value::EmailAddress(s) => {
            out.push(10);
            encode_str(s, out);
        }
        Value::Uri(s) => {
            out.push(11);
            encode_str(s, out);
        }
        Value::DnsName(s) => {
            out.push(12);
            encode_str(s, out);
        }
        Value::StringMap(m) => {
            out.push(13);
            out.extend_from_slice(&(m.len() as u32).to_le_bytes());
            for (k, v) in m.iter() {
                encode_str(k, out);
                encode_str(v, out);
            }
        }
    }
}
