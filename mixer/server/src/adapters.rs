//! The adapters compiled into this binary.

use std::sync::Arc;
use std::time::Duration;

use mixer_config::AdapterRegistry;

/// How `serve` sets up the Wasm plugin engine (README: "Wasm plugins").
#[derive(clap::Args, Debug, Clone)]
pub struct WasmArgs {
    /// Wasm plugin instances alive at once across all Wasm handlers (the slots of the
    /// pooling allocator, warm instances included); a call beyond them fails as overloaded
    /// and its handler's fail policy decides.
    #[arg(long, default_value_t = mixer_wasm::HostOptions::default().pool_instances,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub wasm_instances: u32,
    /// How often the Wasm engine's epoch advances: the granularity of every plugin
    /// deadline (a deadline fires between its length and its length plus one tick). A
    /// shorter tick wakes a thread more often.
    #[arg(long, default_value = "250us", value_parser = parse_tick)]
    pub wasm_epoch_tick: Duration,
    /// Allocate Wasm instances on demand instead of from the pooling allocator (which
    /// reserves address space up front; without this flag the mixer falls back by itself
    /// when the reservation fails).
    #[arg(long)]
    pub wasm_no_pooling: bool,
}

impl WasmArgs {
    /// The engine's options.
    pub fn host_options(&self) -> mixer_wasm::HostOptions {
        mixer_wasm::HostOptions {
            pool_instances: self.wasm_instances,
            epoch_tick: self.wasm_epoch_tick,
            pooling: !self.wasm_no_pooling,
            ..mixer_wasm::HostOptions::default()
        }
    }
}

fn parse_tick(text: &str) -> Result<Duration, String> {
    match mixer_model::Duration::parse(text.trim()) {
        Some(d)
            if d.to_std() >= Duration::from_micros(10) && d.to_std() <= Duration::from_secs(1) =>
        {
            Ok(d.to_std())
        }
        _ => Err(format!("{text:?} is not a duration between 10us and 1s")),
    }
}

/// Every built-in adapter, the Wasm plugin host, and the out-of-process client for handlers with a `connection`.
pub fn builtin() -> AdapterRegistry {
    with_wasm(mixer_wasm::HostOptions::default())
}

/// [`builtin`], with the Wasm engine set up by `wasm`.
pub fn with_wasm(wasm: mixer_wasm::HostOptions) -> AdapterRegistry {
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_denier::Denier));
    registry.register(Arc::new(mixer_adapter_noop::Noop));
    registry.register(Arc::new(mixer_adapter_list::ListChecker));
    registry.register(Arc::new(mixer_adapter_prometheus::Prometheus));
    registry.register(Arc::new(mixer_adapter_stdio::Stdio));
    registry.register(Arc::new(mixer_adapter_memquota::MemQuota));
    registry.register(Arc::new(mixer_adapter_kubernetesenv::KubernetesEnv));
    registry.register(Arc::new(mixer_adapter_redisquota::RedisQuota));
    registry.register(Arc::new(mixer_adapter_otlp::Otlp));
    registry.register(Arc::new(mixer_adapter_apikey::ApiKey));
    registry.register(Arc::new(mixer_adapter_jwt::JwtAdapter));
    // Plugins: its engine starts only when a config names a Wasm handler.
    registry.register(Arc::new(mixer_wasm::WasmAdapter::new(wasm)));
    registry.register_remote(Arc::new(mixer_oop::RemoteAdapterFactory::new(
        mixer_oop::OopOptions::default(),
    )));
    registry
}
