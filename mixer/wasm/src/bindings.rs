//! Host bindings generated from `proto/wit/adapter.wit`.

#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../../proto/wit",
    world: "plugin",
});
