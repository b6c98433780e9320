//! A compiled plugin: its component, pre-instantiated against the host imports, and what it
//! declared about itself; and one call of it, in a fresh instance under limits.

use std::sync::Arc;
use std::time::Duration;

use mixer_model::Template;
use wasmtime::Store;
use wasmtime::Trap;
use wasmtime::component::{Component, HasSelf, Linker};

use crate::bindings;
use crate::call::{CallContext, CallState, LogBudget, MemoryCap};
use crate::epoch::EpochClock;
use crate::fault::{Fault, FaultKind};
use crate::limits::Limits;
use crate::metrics::WasmMetrics;
use crate::world::{Exports, Pre};
use crate::{HOST_INTERFACE, PREVIOUS_HOST_INTERFACE};

/// Why a module could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read Wasm module {path}: {message}")]
    Read {
        /// The file.
        path: String,
        /// The OS's reason.
        message: String,
    },
    /// Not a valid component (a core module, a broken file, a feature this host lacks).
    #[error("{origin} is not a valid Wasm component: {message}")]
    Compile {
        /// The file.
        origin: String,
        /// wasmtime's reason.
        message: String,
    },
    /// A file in another format than a component: what a plain `cargo build` makes.
    #[error(
        "{origin} is {got}, but a plugin must be a Wasm component of the {} world: build the plugin crate with `adapters/wasm-sdk/build-plugin.sh <crate-dir> <out.wasm>` ({why})",
        crate::WORLD
    )]
    NotAComponent {
        /// The file.
        origin: String,
        /// What the file is.
        got: &'static str,
        /// The build that makes such a file.
        why: &'static str,
    },
    /// The component imports what the mixer does not give plugins.
    #[error(
        "{origin} imports {import}, which the mixer does not provide: a plugin may import only {HOST_INTERFACE} (or, built against the previous world, {PREVIOUS_HOST_INTERFACE}; no WASI: build the plugin crate with `adapters/wasm-sdk/build-plugin.sh <crate-dir> <out.wasm>`, which targets wasm32-unknown-unknown, not wasm32-wasip2; check with `wasm-tools component wit`)"
    )]
    ForbiddenImport {
        /// The file.
        origin: String,
        /// The import's name.
        import: String,
    },
    /// The component implements neither the `mixer:adapter/plugin@0.2.0` world nor the
    /// previous `@0.1.0`.
    #[error("{origin} does not implement {}: {message}", crate::WORLD)]
    World {
        /// The file.
        origin: String,
        /// What is missing or mistyped.
        message: String,
    },
    /// Its `info` export failed or answered nonsense.
    #[error("{origin}: info() failed: {message}")]
    Info {
        /// The file.
        origin: String,
        /// Why.
        message: String,
    },
    /// wasmtime could not build an engine.
    #[error("cannot start the Wasm engine: {0}")]
    Engine(String),
}

/// What a file is when it is a build's output but not a component, and the build that
/// makes it; `None` for a component (or anything else, which wasmtime then explains).
/// wasmtime's own answer for a core module ("attempted to parse a wasm module with a
/// component parser") tells an author nothing about what to do.
fn wrong_format(bytes: &[u8]) -> Option<(&'static str, &'static str)> {
    // The 8-byte preamble: `\0asm`, then a version (1 for a core module) or, for a
    // component, version 0x0d and layer 1.
    const CORE_MODULE: &[u8] = b"\0asm\x01\0\0\0";
    let native: [(&[u8], &str); 4] = [
        (b"\x7fELF", "an ELF shared library"),
        (b"\xcf\xfa\xed\xfe", "a Mach-O library"),
        (b"\xce\xfa\xed\xfe", "a Mach-O library"),
        (b"MZ", "a Windows DLL"),
    ];
    if bytes.starts_with(CORE_MODULE) {
        return Some((
            "a core Wasm module",
            "a plain `cargo build --target wasm32-unknown-unknown` makes a core module",
        ));
    }
    native
        .iter()
        .find(|(magic, _)| bytes.starts_with(magic))
        .map(|(_, what)| {
            (
                *what,
                "a plain `cargo build` makes a native library for this machine, not Wasm",
            )
        })
}

/// A plugin ready to run: compiled once, instantiated afresh for every call.
pub struct Plugin {
    /// The engine it was compiled by, and its clock.
    clock: EpochClock,
    origin: String,
    hash: [u8; 32],
    pre: Pre,
    name: String,
    templates: Vec<Template>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("origin", &self.origin)
            .field("name", &self.name)
            .field("templates", &self.templates)
            .finish_non_exhaustive()
    }
}

/// An instance and its store: made for one call (fresh), or kept for the next calls of the
/// same handler (warm).
pub(crate) struct Live {
    store: Store<CallState>,
    instance: Exports,
}

/// The bound on making an instance (and running its start function).
const INSTANTIATE_DEADLINE: Duration = Duration::from_millis(100);

impl Plugin {
    /// Compiles, checks imports and exports, and asks the plugin for its info.
    pub(crate) fn compile(
        clock: &EpochClock,
        metrics: &Arc<WasmMetrics>,
        origin: &str,
        bytes: &[u8],
        hash: [u8; 32],
    ) -> Result<Plugin, LoadError> {
        let engine = clock.engine();
        if let Some((got, why)) = wrong_format(bytes) {
            return Err(LoadError::NotAComponent {
                origin: origin.to_string(),
                got,
                why,
            });
        }
        let component = Component::new(engine, bytes).map_err(|e| LoadError::Compile {
            origin: origin.to_string(),
            message: format!("{e:#}"),
        })?;
        // Refused here with a clear message rather than by the linker's "import not
        // defined": a plugin built for WASI needs rebuilding, not a config change.
        if let Some((import, _)) = component
            .component_type()
            .imports(engine)
            .find(|(name, _)| *name != HOST_INTERFACE && *name != PREVIOUS_HOST_INTERFACE)
        {
            return Err(LoadError::ForbiddenImport {
                origin: origin.to_string(),
                import: import.to_string(),
            });
        }
        let mut linker = Linker::<CallState>::new(engine);
        bindings::Plugin::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)
            .map_err(|e| LoadError::Engine(format!("{e:#}")))?;
        bindings::v0_1::Plugin::add_to_linker::<CallState, HasSelf<CallState>>(&mut linker, |s| s)
            .map_err(|e| LoadError::Engine(format!("{e:#}")))?;
        let world = |e: wasmtime::Error| LoadError::World {
            origin: origin.to_string(),
            message: format!("{e:#}"),
        };
        let pre = Pre::new(&linker, &component, engine).map_err(world)?;
        let mut plugin = Plugin {
            clock: clock.clone(),
            origin: origin.to_string(),
            hash,
            pre,
            name: String::new(),
            templates: Vec::new(),
        };
        let ctx = Arc::new(CallContext::new(
            Arc::from(format!("load of {origin}")),
            metrics.clone(),
        ));
        let info = plugin
            .call(&ctx, &Limits::default(), Duration::from_secs(1), |p, s| {
                p.call_info(s)
            })
            .map_err(|f| LoadError::Info {
                origin: origin.to_string(),
                message: f.message,
            })?;
        if info.name.trim().is_empty() {
            return Err(LoadError::Info {
                origin: origin.to_string(),
                message: "the plugin's name is empty".into(),
            });
        }
        plugin.name = info.name;
        plugin.templates = info.templates.into_iter().map(Into::into).collect();
        plugin.templates.dedup();
        Ok(plugin)
    }

    /// The name the plugin gives itself.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The templates it declares.
    pub fn templates(&self) -> &[Template] {
        &self.templates
    }

    /// The version of the world it implements (`0.2.0`, or `0.1.0` for a plugin built
    /// against the previous world).
    pub fn world_version(&self) -> &'static str {
        self.pre.version()
    }

    /// Where it was loaded from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The SHA-256 of its bytes, in hex.
    pub fn sha256(&self) -> String {
        self.hash.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Runs `f` in a fresh instance with `limits`' memory and fuel and a wall-clock
    /// `deadline`. Every way the call can fail comes back as a [`Fault`], never a panic.
    pub(crate) fn call<R>(
        &self,
        ctx: &Arc<CallContext>,
        limits: &Limits,
        deadline: Duration,
        f: impl FnOnce(&Exports, &mut Store<CallState>) -> wasmtime::Result<R>,
    ) -> Result<R, Fault> {
        let mut live = self.instantiate(ctx, limits, deadline)?;
        self.run(&mut live, limits, deadline, f)
    }

    /// A new instance in a store of its own, with `limits`' memory cap.
    pub(crate) fn instantiate(
        &self,
        ctx: &Arc<CallContext>,
        limits: &Limits,
        deadline: Duration,
    ) -> Result<Live, Fault> {
        let clock = &self.clock;
        let mut store = Store::new(
            clock.engine(),
            CallState {
                cap: MemoryCap {
                    max_bytes: usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX),
                    refused: false,
                },
                ctx: ctx.clone(),
                log: LogBudget::default(),
            },
        );
        store.limiter(|s| &mut s.cap);
        // Instantiation is the host's work (and a start function's); it gets a bound of its
        // own so that the call's deadline is the plugin's time alone.
        store.set_epoch_deadline(clock.ticks(INSTANTIATE_DEADLINE.max(deadline)));
        if clock.metered() {
            store.set_fuel(u64::MAX).map_err(|e| Fault {
                kind: FaultKind::Instantiate,
                message: format!("{e:#}"),
            })?;
        }
        match self.pre.instantiate(&mut store) {
            Ok(instance) => Ok(Live { store, instance }),
            Err(e) => {
                let kind = if store.data().cap.refused {
                    FaultKind::Memory
                } else {
                    FaultKind::Instantiate
                };
                Err(Fault {
                    kind,
                    message: format!("cannot instantiate: {e:#}"),
                })
            }
        }
    }

    /// Runs `f` in `live` with `limits`' fuel and a wall-clock `deadline`, both counted from
    /// now: an instance reused for many calls gets the same budget for each. After a
    /// [`Fault`] the instance must be dropped (its memory may be half-written).
    pub(crate) fn run<R>(
        &self,
        live: &mut Live,
        limits: &Limits,
        deadline: Duration,
        f: impl FnOnce(&Exports, &mut Store<CallState>) -> wasmtime::Result<R>,
    ) -> Result<R, Fault> {
        let store = &mut live.store;
        store.data_mut().cap.refused = false;
        // A warm instance's next call gets its whole log budget again.
        store.data_mut().log = LogBudget::default();
        if self.clock.metered() {
            // A metered plugin's info and validate run without a limit: the tank is full.
            store
                .set_fuel(limits.fuel.unwrap_or(u64::MAX))
                .map_err(|e| Fault {
                    kind: FaultKind::Instantiate,
                    message: format!("{e:#}"),
                })?;
        }
        store.set_epoch_deadline(self.clock.ticks(deadline));
        f(&live.instance, store).map_err(|e| {
            let kind = if store.data().cap.refused {
                FaultKind::Memory
            } else {
                match e.downcast_ref::<Trap>() {
                    Some(Trap::Interrupt) => FaultKind::Deadline,
                    Some(Trap::OutOfFuel) => FaultKind::Fuel,
                    _ => FaultKind::Trap,
                }
            };
            let message = match kind {
                FaultKind::Deadline => format!("deadline of {deadline:?} passed"),
                FaultKind::Memory => format!(
                    "memory cap of {} MiB reached ({e})",
                    limits.memory_bytes >> 20
                ),
                FaultKind::Fuel => format!("fuel of {} used up", limits.fuel.unwrap_or(0)),
                _ => format!("{e}"),
            };
            Fault { kind, message }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::wrong_format;

    #[test]
    fn what_a_plain_cargo_build_makes_is_named_with_the_build_that_made_it() {
        let (got, why) = wrong_format(b"\0asm\x01\0\0\0").expect("a core module");
        assert_eq!(got, "a core Wasm module");
        assert!(why.contains("wasm32-unknown-unknown"), "{why}");
        let (got, why) = wrong_format(b"\x7fELF\x02\x01\x01\0").expect("a shared library");
        assert_eq!(got, "an ELF shared library");
        assert!(why.contains("native library"), "{why}");
        // A component, and what is neither, are left to wasmtime.
        assert_eq!(wrong_format(b"\0asm\x0d\0\x01\0"), None);
        assert_eq!(wrong_format(b"(module)"), None);
    }
}
