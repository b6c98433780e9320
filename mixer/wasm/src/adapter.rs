//! The `wasm` adapter: `compiledAdapter: wasm` with `params: {module, config, limits}`.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, Stability,
};
use mixer_model::Template;
use serde::Deserialize;

use crate::call::CallContext;
use crate::handler::{Instances, WasmHandler};
use crate::host::{HostOptions, WasmHost};
use crate::limits::Limits;
use crate::plugin::Plugin;

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
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WasmParams {
    /// Path of the component file; a relative one is resolved by the config loader against
    /// the directory of the file that declares the handler ([`Adapter::path_params`]).
    pub module: String,
    /// The plugin's own config, given to it as JSON.
    #[serde(default)]
    pub config: serde_json::Value,
    /// Per-call limits.
    #[serde(default)]
    pub limits: serde_json::Value,
    /// `fresh` (the default): a new instance per call; `warm`: instances kept and reused
    /// between this handler's calls ([`Instances`]).
    #[serde(default)]
    pub instances: Option<String>,
    /// With `instances: warm`, the idle instances kept.
    #[serde(default)]
    pub keep_warm: Option<usize>,
}

fn instances(p: &WasmParams) -> Result<Instances, ParamError> {
    let keep = match p.keep_warm {
        Some(0) => return Err(ParamError::new("keepWarm", "must be at least 1")),
        Some(_) if p.instances.as_deref() != Some("warm") => {
            return Err(ParamError::new(
                "keepWarm",
                "applies only with instances: warm",
            ));
        }
        Some(n) => n,
        None => Instances::DEFAULT_KEEP,
    };
    match p.instances.as_deref().map(str::trim) {
        None | Some("fresh") => Ok(Instances::Fresh),
        Some("warm") => Ok(Instances::Warm { keep }),
        Some(other) => Err(ParamError::new(
            "instances",
            format!(
                "{other:?} is neither fresh (a new instance per call) nor warm (instances reused between calls)"
            ),
        )),
    }
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

/// A handler's params compiled: its module loaded (and compiled, or found in the host's
/// cache), its config accepted by the plugin's own `validate`, its limits parsed.
pub struct LoadedPlugin {
    host: Arc<WasmHost>,
    plugin: Arc<Plugin>,
    config: String,
    limits: Limits,
    instances: Instances,
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

    /// Loads the module and runs the plugin's `validate` on its config.
    fn load(&self, p: &WasmParams) -> Result<LoadedPlugin, Vec<ParamError>> {
        let limits = Limits::parse(Some(&p.limits)).map_err(|e| vec![e])?;
        let instances = instances(p).map_err(|e| vec![e])?;
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
            .load(Path::new(&p.module), &limits)
            .map_err(|e| vec![ParamError::new("module", e.to_string())])?;
        let config = if p.config.is_null() {
            "{}".to_string()
        } else {
            p.config.to_string()
        };
        let ctx = Arc::new(CallContext::new(
            Arc::from(format!("validate of {}", plugin.name())),
            host.metrics.clone(),
        ));
        // The report deadline: validating is off the request path and may parse a lot.
        let errors = plugin
            .call(&ctx, &limits, limits.report_deadline, |pl, s| {
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
        Ok(LoadedPlugin {
            host,
            plugin,
            config,
            limits,
            instances,
        })
    }

    /// [`Adapter::build`], with the handler's own type (for its synchronous calls).
    pub fn build_handler(&self, loaded: &LoadedPlugin, ctx: &BuildContext) -> WasmHandler {
        WasmHandler::new(
            &loaded.host,
            loaded.plugin.clone(),
            loaded.config.clone(),
            loaded.limits,
            loaded.instances,
            ctx.handler_name.clone(),
        )
    }
}

impl Adapter for WasmAdapter {
    type Config = WasmParams;
    type Compiled = LoadedPlugin;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, params: WasmParams) -> Result<LoadedPlugin, Vec<ParamError>> {
        self.load(&params)
    }

    fn path_params(&self) -> &'static [&'static str] {
        &["module"]
    }

    fn build(
        &self,
        loaded: &LoadedPlugin,
        ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(self.build_handler(loaded, ctx)))
    }

    fn templates_for(&self, loaded: &LoadedPlugin) -> Option<Vec<Template>> {
        Some(loaded.plugin.templates().to_vec())
    }
}
