//! Host bindings generated from `proto/wit/adapter.wit` (the current world, `@0.2.0`) and,
//! in [`v0_1`], from `proto/wit-0.1.0/adapter.wit`, the previous world, whose plugins still
//! load (see `crate::world`).

#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../../proto/wit",
    world: "plugin",
});

/// The `mixer:adapter@0.1.0` world: no attribute generation.
pub mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../../proto/wit-0.1.0",
        world: "plugin",
    });
}
