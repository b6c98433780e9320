//! The adapters compiled into this binary.

use std::sync::Arc;

use mixer_adapter_api::AdapterRegistry;

/// Every built-in adapter, the Wasm plugin host, and the out-of-process client for handlers with a `connection`.
pub fn builtin() -> AdapterRegistry {
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_denier::Denier));
    registry.register(Arc::new(mixer_adapter_noop::Noop));
    registry.register(Arc::new(mixer_adapter_list::ListChecker));
    registry.register(Arc::new(mixer_adapter_prometheus::Prometheus));
    registry.register(Arc::new(mixer_adapter_stdio::Stdio));
    registry.register(Arc::new(mixer_adapter_memquota::MemQuota));
    registry.register(Arc::new(mixer_adapter_redisquota::RedisQuota));
    registry.register(Arc::new(mixer_adapter_otlp::Otlp));
    // Plugins: its engine starts only when a config names a Wasm handler.
    registry.register(Arc::new(mixer_wasm::WasmAdapter::default()));
    registry.set_remote(Arc::new(mixer_oop::RemoteAdapterFactory::new(
        mixer_oop::OopOptions::default(),
    )));
    registry
}
