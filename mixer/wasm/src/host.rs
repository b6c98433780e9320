//! The engine every plugin runs on: one per process, with its epoch ticker, its pooling
//! allocator and the cache of compiled modules.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::epoch::EpochClock;
use crate::limits::{Limits, MAX_MEMORY_MIB};
use crate::metrics::WasmMetrics;
use crate::plugin::{LoadError, Plugin};

/// How the engine is set up; one set per process.
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// Plugin instances that may be alive at once across all handlers (slots of the pooling
    /// allocator). A call beyond it fails as overloaded rather than waiting.
    pub pool_instances: u32,
    /// How often the epoch advances: the granularity of every deadline. A deadline fires
    /// between its length and its length plus one tick.
    pub epoch_tick: Duration,
    /// Use the pooling allocator (falls back to on-demand allocation, with a warning, when
    /// the pool cannot reserve its address space).
    pub pooling: bool,
    /// Compiled modules kept for reloads, least recently loaded dropped first.
    pub cached_modules: usize,
}

impl Default for HostOptions {
    fn default() -> HostOptions {
        HostOptions {
            pool_instances: 128,
            epoch_tick: Duration::from_micros(250),
            pooling: true,
            cached_modules: 32,
        }
    }
}

/// The wasmtime engines (one without fuel accounting, and one with it for the handlers that
/// set `limits.fuel`, started when the first of them loads), the tickers that advance their
/// epochs, and compiled plugins by the SHA-256 of their bytes.
pub struct WasmHost {
    plain: EpochClock,
    metered: OnceLock<Result<EpochClock, LoadError>>,
    options: HostOptions,
    pooled: bool,
    cache: Mutex<Cache>,
    pub(crate) metrics: Arc<WasmMetrics>,
}

#[derive(Default)]
struct Cache {
    plugins: HashMap<Key, Arc<Plugin>>,
    /// Keys, least recently loaded first.
    order: Vec<Key>,
}

/// A compiled plugin's bytes and whether it was compiled with fuel accounting: the same
/// file compiled by both engines is two entries.
type Key = ([u8; 32], bool);

impl WasmHost {
    /// An engine with `options`. Fails only when wasmtime cannot build an engine at all.
    pub fn new(options: HostOptions) -> Result<Arc<WasmHost>, LoadError> {
        let (plain, pooled) = start_engine(&options, false)?;
        let metrics = Arc::new(WasmMetrics::new());
        metrics.host(
            pooled.then_some(options.pool_instances.max(1)),
            options.epoch_tick,
        );
        tracing::info!(
            pooled,
            pool_instances = options.pool_instances,
            epoch_tick = ?options.epoch_tick,
            "Wasm plugin engine started"
        );
        Ok(Arc::new(WasmHost {
            plain,
            metered: OnceLock::new(),
            options,
            pooled,
            cache: Mutex::default(),
            metrics,
        }))
    }

    /// The engine of plugins without a fuel limit.
    pub fn engine(&self) -> &Engine {
        self.plain.engine()
    }

    /// The engine for `limits`: the metered one when they set fuel.
    fn clock(&self, limits: &Limits) -> Result<&EpochClock, LoadError> {
        if limits.fuel.is_none() {
            return Ok(&self.plain);
        }
        self.metered
            .get_or_init(|| {
                let (clock, pooled) = start_engine(&self.options, true)?;
                tracing::info!(pooled, "Wasm plugin engine with fuel accounting started");
                Ok(clock)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The metrics of every handler on this host.
    pub fn metrics(&self) -> &Arc<WasmMetrics> {
        &self.metrics
    }

    /// Whether instances come from the pooling allocator.
    pub fn pooled(&self) -> bool {
        self.pooled
    }

    /// The options the host was built with.
    pub fn options(&self) -> &HostOptions {
        &self.options
    }

    /// Loads the component at `path` for a handler with `limits` (which decide the engine):
    /// compiled, checked against the world and pre-instantiated the first time its bytes are
    /// seen, from the cache after that.
    pub fn load(&self, path: &Path, limits: &Limits) -> Result<Arc<Plugin>, LoadError> {
        let bytes = std::fs::read(path).map_err(|e| LoadError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        self.load_bytes(&path.display().to_string(), &bytes, limits)
    }

    /// Loads a component from its bytes (binary, or WAT text when built with wasmtime's
    /// `wat` feature); `origin` names it in errors and logs.
    pub fn load_bytes(
        &self,
        origin: &str,
        bytes: &[u8],
        limits: &Limits,
    ) -> Result<Arc<Plugin>, LoadError> {
        let clock = self.clock(limits)?;
        let key = (Sha256::digest(bytes).into(), clock.metered());
        if let Some(plugin) = self.touch(&key) {
            return Ok(plugin);
        }
        // Compiled outside the lock: compiling takes milliseconds to seconds, and two loads
        // of the same new file at once only waste one compilation.
        let plugin = Arc::new(Plugin::compile(clock, &self.metrics, origin, bytes, key.0)?);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.order.retain(|k| k != &key);
        cache.order.push(key);
        cache.plugins.insert(key, plugin.clone());
        while cache.order.len() > self.options.cached_modules.max(1) {
            let oldest = cache.order.remove(0);
            cache.plugins.remove(&oldest);
        }
        Ok(plugin)
    }

    fn touch(&self, key: &Key) -> Option<Arc<Plugin>> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let plugin = cache.plugins.get(key).cloned()?;
        cache.order.retain(|k| k != key);
        cache.order.push(*key);
        Some(plugin)
    }
}

/// An engine for `options` (with fuel accounting when `metered`) and its epoch ticker;
/// whether it got the pooling allocator.
fn start_engine(options: &HostOptions, metered: bool) -> Result<(EpochClock, bool), LoadError> {
    let mut pooled = options.pooling;
    let engine = if options.pooling {
        match Engine::new(&engine_config(options, true, metered)) {
            Ok(engine) => engine,
            Err(e) => {
                // Containers with a low address-space limit (ulimit -v) or no overcommit
                // refuse the reservation; on demand is slower per instance but works.
                tracing::warn!(
                    error = %e,
                    metered,
                    "the Wasm pooling allocator could not reserve its memory; plugin instances are allocated on demand"
                );
                pooled = false;
                Engine::new(&engine_config(options, false, metered))
                    .map_err(|e| LoadError::Engine(e.to_string()))?
            }
        }
    } else {
        Engine::new(&engine_config(options, false, metered))
            .map_err(|e| LoadError::Engine(e.to_string()))?
    };
    start_ticker(&engine, options.epoch_tick);
    Ok((EpochClock::new(engine, options.epoch_tick, metered), pooled))
}

/// Bytes of each linear memory kept resident, and reset in place, when its slot is reused.
const KEEP_RESIDENT: usize = 2 << 20;
/// The same for tables.
const KEEP_RESIDENT_TABLE: usize = 64 << 10;

fn engine_config(options: &HostOptions, pooling: bool, metered: bool) -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    // Fuel is compiled into the code as a counter bumped in every block: about a third of
    // a report batch's cost (docs/wasm.md), so only the engine of handlers with a fuel
    // limit has it.
    config.consume_fuel(metered);
    // No component-model async: its per-store bookkeeping costs every call (wasmtime PR
    // 14189 measured a do-nothing call at about 800 ns with it, 300 ns without).
    config.concurrency_support(false);
    // A plugin deep in recursion traps instead of taking the thread's stack.
    config.max_wasm_stack(512 << 10);
    if pooling {
        let mut pool = PoolingAllocationConfig::new();
        let n = options.pool_instances.max(1);
        pool.total_component_instances(n);
        // A component built by wit-bindgen holds a few core instances (the program and the
        // shims of its imports), each with at most one memory and a table or two.
        pool.total_core_instances(n.saturating_mul(4));
        pool.total_memories(n.saturating_mul(2));
        pool.total_tables(n.saturating_mul(4));
        pool.max_memory_size((MAX_MEMORY_MIB << 20) as usize);
        // A slot is reset for its next instance by restoring only the pages the last one
        // wrote (found with Linux's PAGEMAP_SCAN, 6.7 and later; elsewhere the low bytes are
        // reset by hand), keeping them resident, instead of `madvise`, which costs a TLB
        // shootdown on every core the mixer runs on and a page fault per page on the next
        // instance. Measured on deny-header (docs/wasm.md): a fresh instance's check went
        // from 43 µs to 19 µs. The Rust guests' stack, data and first heap pages fit in the
        // first 2 MiB; a plugin that writes more has the rest released as before.
        pool.linear_memory_keep_resident(KEEP_RESIDENT);
        pool.table_keep_resident(KEEP_RESIDENT_TABLE);
        pool.pagemap_scan(wasmtime::Enabled::Auto);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

/// Advances the engine's epoch every `tick` for as long as the engine lives (the thread
/// holds only a weak reference).
fn start_ticker(engine: &Engine, tick: Duration) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new()
        .name("wasm-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(tick);
            }
        });
    if let Err(e) = spawned {
        // Without the ticker no deadline fires; calls still end at their fuel or the
        // dispatcher's own bound, so say so loudly rather than fail every plugin.
        tracing::error!(error = %e, "could not start the Wasm epoch ticker: plugin deadlines will not fire");
    }
}
