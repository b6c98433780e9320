//! Leases (`leaseSize`): a replica takes a block of a fixed window's units from the Redis
//! counter in one script call and serves allocations from it locally, so that Redis sees
//! one call per block instead of one per decision.
//!
//! Why the limit is never exceeded across replicas: a block is counted in Redis's `used`
//! when it is taken, never more than the window has left, so the units all replicas can
//! grant in a window add up to at most `maxAmount`. Units are only ever given back to the
//! window they were taken from (the give-back names the window's end, Redis's time, and
//! Redis ignores it for any other window), and a replica stops using a block no later than
//! Redis ends its window: its local end is the instant before the call plus what Redis said
//! was left, never later than Redis's own end.
//!
//! What it costs: a replica may deny while another holds unused units, at most
//! `leaseSize` per replica and key, until that replica uses them, gives them back (idle for
//! `leaseIdleTimeout`, or when its handler closes on reload or shutdown), or the window
//! ends. A replica that found a counter short believes that for up to `leaseIdleTimeout`
//! and denies without a call, so units given back meanwhile reach it that much later.
//!
//! A hot counter (requests waited for it while a block was taken; it stays hot until it
//! goes idle) has its next block taken in the background once half of the block is
//! granted, topping what is held up to `leaseSize`, so that its requests do not all wait a
//! round trip when the block runs out. A block taken ahead that arrives after the handler
//! closed is not given back: counted until its window ends.
//!
//! Batching: takes and give-backs of different counters that wait at the same time (many
//! cold keys, each needing its own block; the idle leases a sweep gives back) go to Redis
//! together in one script call, as the link batches allocations: while as many lease calls
//! as the pool has connections are in flight, what arrives meanwhile waits and goes out in
//! the next. The script runs them one after the other, each as it would have run alone.
//!
//! Deduplication ids (Istio's proxies send one with every Mixer v1 check): the replica that
//! answered an id remembers the answer for `minDeduplicationDuration`, and a retry of it
//! there gets the same answer without being charged again. Istio 1.4 kept these records in
//! Redis, where every replica found them; here a retry that lands on another replica is
//! charged again, which can only deny more, never admit more than the limit.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use mixer_adapter_api::{AdapterError, ErrorKind};
use mixer_adapter_quota_common::Decision;
use redis::Script;
use tokio::sync::oneshot;

use crate::link::{Link, MAX_BATCH};

/// How long a lease may sit unused before its units are given back, when
/// `leaseIdleTimeout` is absent.
pub const DEFAULT_LEASE_IDLE_TIMEOUT: Duration = Duration::from_secs(1);

/// The lease script: takes and give-backs of any number of fixed-window counters, one after
/// the other in the order given, each exactly as if it had a call of its own (so batching
/// them changes the cost, never an answer). `KEYS[i]` is a counter (the hash `used`/`end`
/// that the allocation script keeps); its five `ARGV` (from `5 * (i - 1) + 1`): the
/// operation (`t` take, `g` give back), maxAmount, validDuration (µs), units, the units the
/// caller needs at least (take) or the window's end the units came from (give back). A
/// take grants `min(units, left)`, or nothing if that is below what is needed, and starts
/// the window if none runs (as an allocation does); a give-back lowers `used` only if the
/// same window still runs. The answer, four integers per counter: units taken or given
/// back, the window's end (Redis µs), units left in Redis, µs until the window ends.
pub const SCRIPT: &str = r#"
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
for i, kc in ipairs(KEYS) do
  local a = (i - 1) * 5
  local max = tonumber(ARGV[a + 2])
  local valid = tonumber(ARGV[a + 3])
  local units = tonumber(ARGV[a + 4])
  local last = tonumber(ARGV[a + 5])
  local st = redis.call('HMGET', kc, 'used', 'end')
  local used = tonumber(st[1])
  local wend = tonumber(st[2])
  local running = used and wend and now < wend
  local r
  if ARGV[a + 1] == 'g' then
    r = {0, 0, 0, 0}
    if running and wend == last then
      local back = math.min(units, used)
      redis.call('HSET', kc, 'used', string.format('%d', used - back))
      r = {back, wend, max - used + back, wend - now}
    end
  else
    if not running then
      used = 0
      wend = now + valid
    end
    local take = math.min(units, max - used)
    if take < last or take < 0 then take = 0 end
    redis.call('HSET', kc, 'used', string.format('%d', used + take), 'end', string.format('%d', wend))
    redis.call('PEXPIRE', kc, math.ceil((wend - now) / 1000))
    r = {take, wend, max - used - take, wend - now}
  end
  for j = 1, 4 do out[#out + 1] = r[j] end
end
return out
"#;

/// Integers in every answer of [`SCRIPT`].
const ANSWER_LEN: usize = 4;

/// Most deduplication ids a handler's leases remember at once (about 100 bytes each): an id
/// beyond it is answered without being remembered, so its retry is charged again (fewer
/// admissions, never more) rather than the memory growing with the request rate times
/// `minDeduplicationDuration`.
pub const MAX_REMEMBERED_IDS: usize = 1_000_000;

/// The answer given to a check with a deduplication id, kept for its retries.
struct Remembered {
    granted: i64,
    remaining: i64,
    valid_until: Instant,
    reset_at: Instant,
}

impl Remembered {
    fn decision(&self, now: Instant) -> Decision {
        Decision {
            granted: self.granted,
            valid_duration: self.valid_until.saturating_duration_since(now),
            deduplicated: true,
            remaining: self.remaining,
            reset_after: self.reset_at.saturating_duration_since(now),
        }
    }
}

/// What one replica holds of one counter.
struct Lease {
    /// Units taken from Redis and not yet granted.
    units: i64,
    /// The window they belong to: its end, Redis's µs (what a give-back names).
    window: i64,
    /// When this replica stops using them: no later than Redis ends the window.
    until: Instant,
    /// Units Redis had left when the block was taken.
    left_in_redis: i64,
    /// Until when `left_in_redis` is believed: Redis's count only falls meanwhile, except
    /// for units other replicas give back, so a request needing more than that is denied
    /// here without a call (the give-backs are seen after at most `leaseIdleTimeout`).
    believed_until: Instant,
    last_used: Instant,
    /// Units asked for by a take ahead still under way (0: none).
    refilling: i64,
    /// Requests waited for this counter while a request took a block: it is hot, and its
    /// next blocks are taken ahead (see [`Leases::refill_ahead`]) until it goes idle.
    hot: bool,
    /// Answers to checks with a deduplication id, by id, and the ids in the order they are
    /// forgotten (every id is kept equally long, so that order is the order they came).
    answered: HashMap<Arc<str>, Remembered>,
    forget: VecDeque<(Instant, Arc<str>)>,
}

impl Lease {
    fn empty(now: Instant) -> Lease {
        Lease {
            units: 0,
            window: 0,
            until: now,
            left_in_redis: 0,
            believed_until: now,
            last_used: now,
            refilling: 0,
            hot: false,
            answered: HashMap::new(),
            forget: VecDeque::new(),
        }
    }

    /// Holds what a take (sent at `sent`) answered.
    fn took(&mut self, sent: Instant, answer: &[i64], idle: Duration) {
        let (taken, window, left, reset) = (answer[0], answer[1], answer[2], answer[3]);
        if window != self.window {
            // Redis began another window: what was held belonged to the last one.
            self.units = 0;
        }
        self.units += taken;
        self.window = window;
        self.until = sent + Duration::from_micros(u64::try_from(reset).unwrap_or(0));
        self.left_in_redis = left;
        self.believed_until = self.until.min(sent + idle);
    }

    /// The answer to a retry of `id` (none for an empty id).
    fn remembered(&self, id: &str) -> Option<&Remembered> {
        if id.is_empty() {
            return None;
        }
        self.answered.get(id)
    }

    /// The units a take must bring for `ask`.
    fn need(&self, ask: &Ask<'_>) -> i64 {
        if ask.best_effort {
            i64::from(self.units == 0)
        } else {
            ask.amount - self.units
        }
    }

    /// The decision on `ask` from what is held, or from what Redis had left at the last
    /// take; `None` when a take is needed.
    fn decide_held(&mut self, ask: &Ask<'_>, now: Instant) -> Option<Decision> {
        if now >= self.until {
            // The window ended in Redis: its counter expired with the units in it.
            self.units = 0;
        }
        self.last_used = now;
        if self.units >= ask.amount {
            return Some(self.grant(ask));
        }
        if self.need(ask) > self.left_in_redis && now < self.believed_until {
            // Redis had less than this needs at the last take: a call would deny too.
            // Without this, every denial of an exhausted counter would be a call, one at a
            // time per counter (the lease's lock), queueing past the call budget.
            let window_left = self.until.saturating_duration_since(now);
            let granted = if ask.best_effort { self.units } else { 0 };
            self.units -= granted;
            return Some(Decision {
                granted,
                valid_duration: window_left,
                deduplicated: false,
                remaining: self.left_in_redis + self.units,
                reset_after: window_left,
            });
        }
        None
    }

    /// Grants `ask` what is held (all of it, what there is when best effort, else nothing).
    fn grant(&mut self, ask: &Ask<'_>) -> Decision {
        let granted = if self.units >= ask.amount {
            ask.amount
        } else if ask.best_effort {
            self.units
        } else {
            0
        };
        self.units -= granted;
        let window_left = self.until.saturating_duration_since(Instant::now());
        Decision {
            granted,
            valid_duration: window_left,
            deduplicated: false,
            remaining: self.left_in_redis + self.units,
            reset_after: window_left,
        }
    }

    /// Forgets the ids remembered for their whole `minDeduplicationDuration`.
    fn forget_expired(&mut self, now: Instant, remembered: &AtomicUsize) {
        while let Some((at, _)) = self.forget.front()
            && *at <= now
        {
            if let Some((_, id)) = self.forget.pop_front()
                && self.answered.remove(&id).is_some()
            {
                remembered.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// One counter's lease, locked while a request uses it: a replica takes at most one block
/// of a counter at a time, so concurrent requests wait for that block rather than each
/// taking one (which would hold `leaseSize` per request, not per replica).
struct Counter {
    lease: tokio::sync::Mutex<Lease>,
    /// Requests waiting for the lock: any while a block is taken make the counter hot (see
    /// [`Leases::refill_ahead`]).
    waiting: AtomicUsize,
}

type Slot = Arc<Counter>;

/// Counts a request waiting for a counter's lock until it has it, gave up, or went away
/// (its future dropped: the client hung up).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(waiting: &'a AtomicUsize) -> Waiting<'a> {
        waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One take or give-back waiting for the next lease script call.
struct Job {
    key: String,
    /// `t` take, `g` give back.
    op: &'static str,
    max_amount: i64,
    valid_us: i64,
    units: i64,
    /// What a take needs at least, or the window a give-back names.
    last: i64,
    reply: oneshot::Sender<Result<[i64; ANSWER_LEN], AdapterError>>,
}

/// Lease calls waiting to be sent, and the drainers sending them.
#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Drainers running (each has at most one script call in flight).
    in_flight: usize,
}

struct Inner {
    size: i64,
    idle: Duration,
    /// How long a deduplication id's answer is kept (`minDeduplicationDuration`).
    dedup: Duration,
    /// Ids remembered by all leases, bounded by [`MAX_REMEMBERED_IDS`].
    remembered: AtomicUsize,
    link: Arc<Link>,
    script: Script,
    queue: Mutex<Queue>,
    table: Mutex<HashMap<String, Slot>>,
    sweeping: AtomicBool,
    calls: AtomicU64,
    returned: AtomicU64,
}

/// A handler's leases (see the module documentation).
pub struct Leases {
    inner: Arc<Inner>,
}

/// One leased allocation: the counter, its limit and what is asked.
pub struct Ask<'a> {
    /// The counter's Redis key.
    pub key: &'a str,
    /// maxAmount of its window.
    pub max_amount: i64,
    /// validDuration.
    pub valid: Duration,
    /// Units wanted.
    pub amount: i64,
    /// Grant what is there rather than nothing.
    pub best_effort: bool,
    /// The check's deduplication id (empty: none).
    pub deduplication_id: &'a str,
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

impl Leases {
    /// Leases of `size` units, given back after `idle` unused, remembering deduplication
    /// ids for `dedup`, through `link`.
    pub fn new(size: i64, idle: Duration, dedup: Duration, link: Arc<Link>) -> Leases {
        Leases {
            inner: Arc::new(Inner {
                size,
                idle,
                dedup,
                remembered: AtomicUsize::new(0),
                link,
                script: Script::new(SCRIPT),
                queue: Mutex::default(),
                table: Mutex::default(),
                sweeping: AtomicBool::new(false),
                calls: AtomicU64::new(0),
                returned: AtomicU64::new(0),
            }),
        }
    }

    /// Script calls that took or gave back blocks (one call may carry many).
    pub fn calls(&self) -> u64 {
        self.inner.calls.load(Ordering::Relaxed)
    }

    /// Units given back to Redis unused.
    pub fn returned(&self) -> u64 {
        self.inner.returned.load(Ordering::Relaxed)
    }

    fn slot(&self, key: &str) -> Slot {
        let mut table = self.inner.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = table.get(key) {
            return slot.clone();
        }
        let slot = Arc::new(Counter {
            lease: tokio::sync::Mutex::new(Lease::empty(Instant::now())),
            waiting: AtomicUsize::new(0),
        });
        table.insert(key.to_string(), slot.clone());
        drop(table);
        self.start_sweeping();
        slot
    }

    /// Deduplication ids remembered now.
    pub fn remembered_ids(&self) -> usize {
        self.inner.remembered.load(Ordering::Relaxed)
    }

    /// Allocates from this replica's block of the counter, taking a new block from Redis
    /// when it is short; a retried deduplication id gets its first answer again, uncharged.
    /// Redis errors are returned (the fail policy applies); the block is then unchanged and
    /// the id not remembered.
    pub async fn allocate(&self, ask: &Ask<'_>) -> Result<Decision, AdapterError> {
        let slot = self.slot(ask.key);
        let budget = self.inner.link.call_timeout();
        // A request waits for another's take of this counter at most one call budget.
        let waiting = Waiting::new(&slot.waiting);
        let locked = tokio::time::timeout(budget, slot.lease.lock()).await;
        drop(waiting);
        let mut lease = locked.map_err(|_| {
            self.inner.link.error(
                ErrorKind::Timeout,
                "redis: a lease take of this counter did not finish within callTimeout".to_string(),
            )
        })?;
        let now = Instant::now();
        lease.forget_expired(now, &self.inner.remembered);
        if let Some(first) = lease.remembered(ask.deduplication_id) {
            return Ok(first.decision(now));
        }
        // After an error nothing is taken ahead: the next request meets Redis's state.
        let decision = self.decide(&slot, &mut lease, ask, now).await?;
        self.refill_ahead(&slot, &mut lease, ask);
        self.remember(&mut lease, ask, &decision);
        Ok(decision)
    }

    /// [`Self::allocate`] when it needs no Redis call and the counter is not locked (no take
    /// of it under way): the answer `allocate` would give, on the caller's stack, without a
    /// future or a timer. `None` when a take is needed or the lock is held; nothing is
    /// granted then (the caller awaits [`Self::allocate`]). Most decisions of a counter in
    /// use are answered here: one take serves `leaseSize` of them.
    pub fn allocate_now(&self, ask: &Ask<'_>) -> Option<Decision> {
        let slot = self.slot(ask.key);
        let mut lease = slot.lease.try_lock().ok()?;
        let now = Instant::now();
        lease.forget_expired(now, &self.inner.remembered);
        if let Some(first) = lease.remembered(ask.deduplication_id) {
            return Some(first.decision(now));
        }
        let decision = lease.decide_held(ask, now)?;
        self.refill_ahead(&slot, &mut lease, ask);
        self.remember(&mut lease, ask, &decision);
        Some(decision)
    }

    /// Remembers the answer to a check with a deduplication id for its retries (up to
    /// [`MAX_REMEMBERED_IDS`] ids a handler).
    fn remember(&self, lease: &mut Lease, ask: &Ask<'_>, decision: &Decision) {
        if ask.deduplication_id.is_empty() {
            return;
        }
        if self.inner.remembered.fetch_add(1, Ordering::Relaxed) >= MAX_REMEMBERED_IDS {
            self.inner.remembered.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let id: Arc<str> = Arc::from(ask.deduplication_id);
        let answered = Instant::now();
        lease.answered.insert(
            id.clone(),
            Remembered {
                granted: decision.granted,
                remaining: decision.remaining,
                valid_until: answered + decision.valid_duration,
                reset_at: answered + decision.reset_after,
            },
        );
        lease.forget.push_back((answered + self.inner.dedup, id));
    }

    /// [`Self::allocate`] under the counter's lock, without deduplication.
    async fn decide(
        &self,
        slot: &Counter,
        lease: &mut Lease,
        ask: &Ask<'_>,
        now: Instant,
    ) -> Result<Decision, AdapterError> {
        if let Some(decision) = lease.decide_held(ask, now) {
            return Ok(decision);
        }
        let need = lease.need(ask);
        // A block being taken ahead counts as held: at most `leaseSize` either way.
        let want = (self.inner.size - lease.refilling).max(ask.amount - lease.units);
        let sent = Instant::now();
        let answer = self
            .call("t", ask.key, ask.max_amount, ask.valid, want, need)
            .await?;
        lease.took(sent, &answer, self.inner.idle);
        // Others waited this round trip: without taking ahead, they would at every block.
        lease.hot |= slot.waiting.load(Ordering::Relaxed) > 0;
        Ok(lease.grant(ask))
    }

    /// Takes the counter's next block in the background, before this one runs out, when
    /// requests wait for the counter or waited at a take since it was last idle (it is
    /// hot: on one runtime thread nothing waits between takes, as the lock is only held
    /// across a take) and it is down to half a block. Without it, every `leaseSize`
    /// decisions of a hot counter, all its requests waited one Redis round trip for the
    /// next block (one counter, 32 requests in flight: RLS ran at 0.75x memquota, where
    /// many counters, taking blocks at different times, ran at 0.9-1.1x).
    /// The block asked for tops what is held up to `leaseSize`, so a replica still never
    /// holds more; a counter only ever used one request at a time is not taken ahead
    /// (nothing waits, and the take's answers stay those of one take when short).
    fn refill_ahead(&self, slot: &Slot, lease: &mut Lease, ask: &Ask<'_>) {
        let size = self.inner.size;
        let now = Instant::now();
        if lease.refilling > 0
            || !(lease.hot || slot.waiting.load(Ordering::Relaxed) > 0)
            || lease.units * 2 > size
            || lease.left_in_redis <= 0
            || now >= lease.until
        {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let want = size - lease.units;
        lease.refilling = want;
        let leases = Leases {
            inner: self.inner.clone(),
        };
        let (slot, key) = (slot.clone(), ask.key.to_string());
        let (max_amount, valid) = (ask.max_amount, ask.valid);
        rt.spawn(async move {
            let sent = Instant::now();
            let answer = leases.call("t", &key, max_amount, valid, want, 1).await;
            let mut lease = slot.lease.lock().await;
            lease.refilling = 0;
            match answer {
                // A take of a window that ended meanwhile (a take by a request, short,
                // began the next one): its units stay counted there, unused.
                Ok(answer) if answer[1] < lease.window => {}
                Ok(answer) => lease.took(sent, &answer, leases.inner.idle),
                // The next take by a request meets the error and gets the fail policy.
                Err(e) => tracing::debug!(key, "lease not taken ahead: {e}"),
            }
        });
    }

    /// Gives every held block back (the handler closes: reload or shutdown).
    pub async fn give_back_all(&self) {
        let slots: Vec<(String, Slot)> = self
            .inner
            .table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .collect();
        let backs = slots.iter().map(|(key, slot)| async move {
            let mut lease = slot.lease.lock().await;
            self.give_back(key, &mut lease).await;
        });
        futures_util::future::join_all(backs).await;
    }

    /// Gives back what `lease` holds if its window still runs here; nothing is held after.
    async fn give_back(&self, key: &str, lease: &mut Lease) {
        if let Some(back) = GiveBack::of(lease) {
            self.send_back(key, back).await;
        }
    }

    /// Gives `back` to Redis, counting what it took back.
    async fn send_back(&self, key: &str, back: GiveBack) {
        // maxAmount and validDuration are not read by a give-back.
        match self
            .call("g", key, 0, Duration::ZERO, back.units, back.window)
            .await
        {
            Ok(answer) => {
                let back = u64::try_from(answer[0]).unwrap_or(0);
                self.inner.returned.fetch_add(back, Ordering::Relaxed);
            }
            // Not given back: the units stay counted until the window ends, which only
            // denies more, never admits more.
            Err(e) => tracing::debug!(key, "lease not given back: {e}"),
        }
    }

    /// One take or give-back, in the next lease script call (see the module
    /// documentation), within the call budget.
    async fn call(
        &self,
        op: &'static str,
        key: &str,
        max_amount: i64,
        valid: Duration,
        units: i64,
        last: i64,
    ) -> Result<[i64; ANSWER_LEN], AdapterError> {
        // The drainer is a task: without a runtime there is none to run it (a handler is
        // only called inside one; this fails rather than panics if it is not).
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return Err(AdapterError::transient(
                ErrorKind::Internal,
                "redis: a lease call outside an async runtime",
            ));
        };
        let (reply, answer) = oneshot::channel();
        let job = Job {
            key: key.to_string(),
            op,
            max_amount,
            valid_us: micros(valid),
            units,
            last,
            reply,
        };
        let start_drainer = {
            let mut q = self.inner.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.jobs.push_back(job);
            let start = q.in_flight < self.inner.link.pool_size();
            if start {
                q.in_flight += 1;
            }
            start
        };
        if start_drainer {
            // A task of its own, so that a request that goes away (its client hung up) never
            // strands the calls batched with it.
            rt.spawn(drain(self.inner.clone()));
        }
        let budget = self.inner.link.call_timeout();
        match tokio::time::timeout(budget, answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(AdapterError::transient(
                ErrorKind::Unavailable,
                "redis: the lease call was dropped (shutting down)",
            )),
            Err(_) => Err(self.inner.link.error(
                ErrorKind::Timeout,
                format!(
                    "redis did not answer a lease call within callTimeout {}",
                    mixer_model::Duration::from_std(budget)
                ),
            )),
        }
    }

    /// Starts (once, inside a runtime) the task that gives back idle leases and forgets
    /// ended ones; it ends with the handler.
    fn start_sweeping(&self) {
        if self.inner.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.inner.sweeping.store(false, Ordering::Release);
            return;
        };
        let weak = Arc::downgrade(&self.inner);
        rt.spawn(sweep(weak));
    }
}

/// Units a lease gives back, and the window they came from.
struct GiveBack {
    units: i64,
    window: i64,
}

impl GiveBack {
    /// Takes what `lease` holds out of it, to be given back, if its window still runs
    /// here: the lease holds nothing after, so no request grants these units meanwhile.
    fn of(lease: &mut Lease) -> Option<GiveBack> {
        let units = std::mem::take(&mut lease.units);
        (units > 0 && Instant::now() < lease.until).then_some(GiveBack {
            units,
            window: lease.window,
        })
    }
}

/// Sends the queued lease calls, up to [`MAX_BATCH`] a script call, until none waits.
async fn drain(inner: Arc<Inner>) {
    while let Some(batch) = next_batch(&inner) {
        let mut invocation = inner.script.prepare_invoke();
        for job in &batch {
            invocation
                .key(&job.key)
                .arg(job.op)
                .arg(job.max_amount)
                .arg(job.valid_us)
                .arg(job.units)
                .arg(job.last);
        }
        inner.calls.fetch_add(1, Ordering::Relaxed);
        match inner
            .link
            .invoke(&invocation, ANSWER_LEN * batch.len())
            .await
        {
            Ok(answer) => {
                for (job, mine) in batch.into_iter().zip(answer.chunks_exact(ANSWER_LEN)) {
                    let mut one = [0; ANSWER_LEN];
                    one.copy_from_slice(mine);
                    let _ = job.reply.send(Ok(one));
                }
            }
            Err(e) => {
                for job in batch {
                    let _ = job.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// The queued lease calls whose callers still wait, up to [`MAX_BATCH`]; `None` (and the
/// drainer ends) when nothing waits.
fn next_batch(inner: &Inner) -> Option<Vec<Job>> {
    let mut q = inner.queue.lock().unwrap_or_else(|p| p.into_inner());
    let mut batch = Vec::new();
    while batch.len() < MAX_BATCH
        && let Some(job) = q.jobs.pop_front()
    {
        if !job.reply.is_closed() {
            batch.push(job);
        }
    }
    if batch.is_empty() {
        q.in_flight -= 1;
        return None;
    }
    Some(batch)
}

/// Every quarter of the idle timeout: leases unused for it are given back, and counters
/// neither held nor used for it are forgotten (so the table holds the keys in use only).
async fn sweep(weak: Weak<Inner>) {
    let period = match weak.upgrade() {
        Some(inner) => (inner.idle / 4).max(Duration::from_millis(10)),
        None => return,
    };
    loop {
        tokio::time::sleep(period).await;
        let Some(inner) = weak.upgrade() else { return };
        let leases = Leases { inner };
        let now = Instant::now();
        let idle = leases.inner.idle;
        let slots: Vec<(String, Slot)> = leases
            .inner
            .table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, s)| (k.clone(), s.clone()))
            .collect();
        let mut backs = Vec::new();
        for (key, slot) in slots {
            // A lease in use is not idle.
            let Ok(mut lease) = slot.lease.try_lock() else {
                continue;
            };
            lease.forget_expired(now, &leases.inner.remembered);
            if now.saturating_duration_since(lease.last_used) < idle {
                continue;
            }
            if let Some(back) = GiveBack::of(&mut lease) {
                backs.push((key.clone(), back));
            }
            // Idle: when it is used again, it is hot only if requests wait for it again.
            lease.hot = false;
            // Its ids are kept for their retries until they expire.
            let remembers = !lease.answered.is_empty();
            drop(lease);
            if remembers {
                continue;
            }
            let mut table = leases.inner.table.lock().unwrap_or_else(|p| p.into_inner());
            // Forgotten unless a request took it meanwhile (it then holds a clone).
            if Arc::strong_count(&slot) == 2 {
                table.remove(&key);
            }
        }
        // All at once: they go to Redis together, a script call per batch, not one each.
        let leases = &leases;
        futures_util::future::join_all(
            backs
                .into_iter()
                .map(|(key, back)| async move { leases.send_back(&key, back).await }),
        )
        .await;
    }
}
