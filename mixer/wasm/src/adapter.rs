//! The `wasm` adapter: `compiledAdapter: wasm` with `params: {module, config, limits}`.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, ErrorKind, Handler, ParamError, Params,
    Stability,
};
use mixer_model::Template;
use serde::Deserialize;

use crate::handler::WasmHandler;
use crate::host::{HostOptions, WasmHost};
use crate::limits::Limits;
use crate::plugin::{CallContext, Plugin};

/// The name in `compiledAdapter:`.
pub const ADAPTER_NAME: &str = "wasm";

static INFO: AdapterInfo = AdapterInfo {
    name: ADAPTER_NAME,
    description: "runs a WebAssembly component plugin (mixer:adapter@0.1.0) under per-call limits",
    // Any template a plugin may declare; each handler's come from its module
    // (`templates_for`), and rules are checked against those.
    templates: &Template::ALL,
    // A plugin's answer carries its own validity; the mixer bounds reuse with it.
    cacheable: true,
    stability: Stability::Alpha,
};

/// A handler's params.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WasmParams {
    /// Path of the component file (relative: to the mixer's working directory).
    module: String,
    /// The plugin's own config, given to it as JSON.
    #[serde(default)]
    config: serde_json::Value,
    /// Per-call limits.
    #[serde(default)]
    limits: serde_json::Value,
}

/// The `wasm` adapter. Its engine starts on first use, so a mixer whose config has no Wasm
/// handler spends nothing on it.
pub struct WasmAdapter {
    options: HostOptions,
    host: OnceLock<Result<Arc<WasmHost>, String>>,
}

impl Default for WasmAdapter {
    fn default() -> WasmAdapter {
        WasmAdapter::new(HostOptions::default())
    }
}

struct Loaded {
    host: Arc<WasmHost>,
    plugin: Arc<Plugin>,
    config: String,
    limits: Limits,
}

impl WasmAdapter {
    /// An adapter whose engine will have `options`.
    pub fn new(options: HostOptions) -> WasmAdapter {
        WasmAdapter {
            options,
            host: OnceLock::new(),
        }
    }

    /// The host (engine, module cache, metrics), started on first use.
    pub fn host(&self) -> Result<&Arc<WasmHost>, String> {
        self.host
            .get_or_init(|| WasmHost::new(self.options.clone()).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Decodes params, loads the module and runs the plugin's `validate` on its config.
    fn load(&self, params: &Params) -> Result<Loaded, Vec<ParamError>> {
        let p: WasmParams = mixer_adapter_api::decode_params(params).map_err(|e| vec![e])?;
        let limits = Limits::parse(Some(&p.limits)).map_err(|e| vec![e])?;
        if p.module.trim().is_empty() {
            return Err(vec![ParamError::new(
                "module",
                "missing: the path of a .wasm component",
            )]);
        }
        let host = self
            .host()
            .map_err(|e| vec![ParamError::new("", e)])?
            .clone();
        let plugin = host
            .load(Path::new(&p.module))
            .map_err(|e| vec![ParamError::new("module", e.to_string())])?;
        let config = if p.config.is_null() {
            "{}".to_string()
        } else {
            p.config.to_string()
        };
        let ctx = Arc::new(CallContext {
            handler: Arc::from(format!("validate of {}", plugin.name())),
            metrics: host.metrics.clone(),
        });
        // The report deadline: validating is off the request path and may parse a lot.
        let errors = plugin
            .call(&host, &ctx, &limits, limits.report_deadline, |pl, s| {
                pl.call_validate(s, &config)
            })
            .map_err(|f| {
                vec![ParamError::new(
                    "config",
                    format!(
                        "plugin {}'s validate failed ({}): {}",
                        plugin.name(),
                        f.kind.label(),
                        f.message
                    ),
                )]
            })?;
        if !errors.is_empty() {
            return Err(errors
                .into_iter()
                .map(|e| {
                    let path = if e.path.is_empty() {
                        "config".to_string()
                    } else {
                        format!("config.{}", e.path)
                    };
                    ParamError::new(path, e.message)
                })
                .collect());
        }
        Ok(Loaded {
            host,
            plugin,
            config,
            limits,
        })
    }

    /// [`Adapter::build`], with the handler's own type (for its synchronous calls).
    pub fn build_handler(
        &self,
        params: &Params,
        ctx: &BuildContext,
    ) -> Result<WasmHandler, AdapterError> {
        let loaded = self.load(params).map_err(|errors| {
            let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
            AdapterError::permanent(ErrorKind::InvalidInstance, lines.join("; "))
        })?;
        Ok(WasmHandler::new(
            loaded.host,
            loaded.plugin,
            loaded.config,
            loaded.limits,
            ctx.handler_name.clone(),
        ))
    }
}

impl Adapter for WasmAdapter {
    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn validate(&self, params: &Params) -> Result<(), Vec<ParamError>> {
        self.load(params).map(|_| ())
    }

    fn build(&self, params: &Params, ctx: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(self.build_handler(params, ctx)?))
    }

    fn templates_for(&self, params: &Params) -> Option<Vec<Template>> {
        // Loaded (from the cache: validate compiled it a moment ago) for its declaration;
        // a module that does not load has already been reported by validate.
        let p: WasmParams = mixer_adapter_api::decode_params(params).ok()?;
        let plugin = self.host().ok()?.load(Path::new(&p.module)).ok()?;
        Some(plugin.templates().to_vec())
    }
}
