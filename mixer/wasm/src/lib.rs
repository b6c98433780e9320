//! The Wasm plugin host: plugin adapters compiled to WebAssembly components of the
//! `mixer:adapter@0.2.0` world (`proto/wit/adapter.wit`), or of the previous `@0.1.0` world
//! (`proto/wit-0.1.0/adapter.wit`, no attribute generation), run inside the mixer by wasmtime.
//!
//! A plugin appears to the runtime as any other adapter: [`WasmAdapter`] implements
//! [`mixer_adapter_api::Adapter`] under the name `wasm`, and its handlers implement the same
//! [`CheckHandler`](mixer_adapter_api::CheckHandler),
//! [`QuotaHandler`](mixer_adapter_api::QuotaHandler),
//! [`ReportHandler`](mixer_adapter_api::ReportHandler) and
//! [`AttributeHandler`](mixer_adapter_api::AttributeHandler) as built-in and out-of-process
//! ones.
//! The mixer builds the instances from the rule's fields, so referenced attributes and the
//! check cache work as for any handler.
//!
//! What the host guarantees:
//! - one [`wasmtime::Engine`]; each module file is compiled once and pre-instantiated, and
//!   kept by the SHA-256 of its bytes, so a reload with an unchanged file compiles nothing;
//! - a fresh instance for every call, from the pooling allocator (or on demand when the
//!   pool cannot reserve its address space): no state leaks from one request to the next.
//!   A handler may ask for warm instances instead (`params.instances: warm`, [`Instances`]),
//!   which keep their memory between that handler's calls;
//! - limits on every call ([`Limits`]): a wall-clock deadline through epoch interruption, a
//!   memory cap, optional fuel. A trap, a deadline or a limit is an
//!   [`AdapterError`](mixer_adapter_api::AdapterError): the handler's fail policy decides the
//!   request; the fault is counted in `mixer_wasm_plugin_faults_total{handler,kind}` and
//!   logged at most once per 10 s per handler;
//! - no ambient authority: the plugin can import only the `host` interface (logging, the
//!   time, counters and histograms); a component importing anything else (WASI's file
//!   system, sockets, ...) is refused when it loads.

mod adapter;
mod batch;
mod bindings;
mod call;
mod convert;
mod epoch;
mod fault;
mod handler;
mod host;
mod imports;
mod limits;
mod metrics;
mod plugin;
mod world;

pub use adapter::{ADAPTER_NAME, LoadedPlugin, WasmAdapter, WasmParams};
pub use handler::{Instances, WasmHandler};
pub use host::{HostOptions, WasmHost};
pub use limits::Limits;
pub use metrics::WasmMetrics;
pub use plugin::{LoadError, Plugin};

/// The WIT world plugins implement, `mixer:adapter/plugin@0.2.0`.
pub const WORLD: &str = "mixer:adapter/plugin@0.2.0";

/// The only interface a plugin may import (a plugin of the previous world, its own
/// version of it, [`PREVIOUS_HOST_INTERFACE`]).
pub const HOST_INTERFACE: &str = world::HOST_0_2;

/// The host interface of the previous world, `mixer:adapter@0.1.0`, whose plugins still load.
pub const PREVIOUS_HOST_INTERFACE: &str = world::HOST_0_1;
