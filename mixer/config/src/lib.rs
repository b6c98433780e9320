//! Mixer config: Istio's `config.istio.io/v1alpha2` YAML documents (handlers, instances,
//! rules, attribute manifests, adapters, and Istio 1.0's per-adapter and per-template kinds)
//! loaded and validated into a typed [`Config`] before anything is built.
//!
//! Validation collects every problem, each with its file, document and field path, so one run
//! shows everything that is wrong:
//!
//! ```
//! use std::sync::Arc;
//! use mixer_adapter_api::{Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError,
//!     Stability};
//! use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile, validate};
//! use mixer_model::Template;
//!
//! // A registry with one adapter that supports `checknothing` and takes no params.
//! struct Deny;
//! #[derive(serde::Deserialize)]
//! #[serde(deny_unknown_fields)]
//! struct NoParams {}
//! static INFO: AdapterInfo = AdapterInfo { name: "denier", description: "denies",
//!     templates: &[Template::CheckNothing], cacheable: true, stability: Stability::Stable };
//! impl Adapter for Deny {
//!     type Config = NoParams;
//!     type Compiled = NoParams;
//!     fn info(&self) -> &AdapterInfo { &INFO }
//!     fn compile(&self, none: NoParams) -> Result<NoParams, Vec<ParamError>> { Ok(none) }
//!     fn build(&self, _: &NoParams, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
//!         unreachable!("not built in this example")
//!     }
//! }
//! let mut registry = AdapterRegistry::new();
//! registry.register(Arc::new(Deny));
//!
//! let yaml = r#"
//! apiVersion: config.istio.io/v1alpha2
//! kind: handler
//! metadata: {name: denyall}
//! spec: {compiledAdapter: denier}
//! ---
//! kind: instance
//! metadata: {name: nothing}
//! spec: {compiledTemplate: checknothing}
//! ---
//! kind: rule
//! metadata: {name: deny-bad}
//! spec:
//!   match: source.namespace == "bad"
//!   actions: [{handler: denyall, instances: [nothing]}]
//! "#;
//! let sources = [SourceFile::new("rules.yaml", yaml)];
//! let validated = validate(&sources, &registry, &ConfigOptions::default()).unwrap();
//! let rule = &validated.config.rules[0];
//! assert_eq!(&*rule.name, "deny-bad.rule.istio-system");
//! assert_eq!(&*validated.config.handlers[rule.actions[0].handler].name, "denyall.handler.istio-system");
//!
//! // The same rule pointing at a handler that does not exist, with an unknown field too.
//! let bad = yaml.replace("handler: denyall", "handler: denyal").replace("match:", "mtch:");
//! let errors = validate(&[SourceFile::new("rules.yaml", bad)], &registry,
//!     &ConfigOptions::default()).unwrap_err();
//! let shown: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
//! assert_eq!(shown, [
//!     "rules.yaml: rule deny-bad: spec.mtch: unknown field (did you mean match?)",
//!     "rules.yaml: rule deny-bad: spec.actions[0].handler: unknown handler \"denyal\" (did you mean denyall?)",
//! ]);
//! ```
//!
//! Order of work: documents are parsed and classified by kind; `attributemanifest`s extend
//! [`Vocabulary::istio`](mixer_model::Vocabulary::istio); `adapter` documents (an
//! out-of-process adapter's templates and, base64 in `config`, the descriptor set of its
//! `Params` message: an [`AdapterResource`]) are read; handlers are checked against the
//! [`AdapterRegistry`] (their params by the adapter's own `validate`), or, for a remote handler
//! whose `adapter` names an `adapter` document, their params against its `Params` message with
//! proto3's JSON mapping; instance fields and rule matches are compiled as expressions; rule
//! actions are resolved to handler and instance indices (see Istio 1.4's `name`,
//! `name.namespace`, `name.kind`, `name.kind.namespace` forms) and checked against the
//! templates each adapter (or `adapter` document) supports.

mod document;
mod dump;
mod error;
mod expr;
mod inputs;
mod kinds;
mod model;
mod registry;
mod resolve;
mod secrets;
mod source;
mod validate;

pub use error::ConfigError;
pub use expr::{CompileError, Expression, Syntax};
pub use inputs::InputFile;
pub use kinds::bindings::outputs_vocabulary;
pub use kinds::decision_log::DECISION_LOG_TEMPLATE;
pub use kinds::rule::DRY_RUN_ANNOTATION;
pub use model::{
    ActionConfig, AdapterResource, AttributeBinding, AttributeSelector, Config, Connection,
    DecisionLogParams, DropReason, DroppedDocument, FieldExpr, FieldExprValue, HandlerConfig,
    HeaderOperationConfig, InstanceConfig, MatchErrorPolicy, RandomSamplingConfig,
    RateLimitBehaviour, RateLimitSamplingConfig, RuleConfig, SamplingConfig,
};
pub use registry::AdapterRegistry;
pub use source::{SourceFile, emptied_files, read_sources};
pub use validate::LANG_ANNOTATION;

/// The namespace of documents that give none, as in Istio.
pub const DEFAULT_NAMESPACE: &str = "istio-system";

/// Choices that apply to every document.
#[derive(Clone, Debug)]
pub struct ConfigOptions {
    /// Namespace for documents without `metadata.namespace` (default `istio-system`); rules
    /// there apply to every namespace, and unqualified references fall back to it.
    pub default_namespace: String,
    /// Expression syntax for documents without a `policy.istio.io/lang` annotation.
    pub default_syntax: Syntax,
    /// What an invalid document does to the whole config.
    pub invalid_config: InvalidConfig,
    /// The memquota or redisquota handler (a reference as a rule would write it) whose adapter
    /// and params serve bare envoyproxy/ratelimit files. `None`: the only memquota or redisquota
    /// handler of the config, or an in-memory memquota when there is none; with several, a bare
    /// file is an error that asks for this choice.
    pub ratelimit_backend: Option<String>,
    /// Accept a reload in which a file that held documents holds none (see
    /// [`emptied_files`]); by default such a reload is refused, so that a file caught
    /// truncated does not drop its rules (a deny rule would stop denying).
    pub allow_empty_files: bool,
    /// The directory the sources' names are relative to (the `--config` directory, or the
    /// directory of the `--config` file): a relative path in a param an adapter declares a
    /// file ([`mixer_adapter_api::Adapter::path_params`]) is resolved against the directory
    /// of the file that holds it. `None`: against the process's working directory.
    pub config_root: Option<std::path::PathBuf>,
}

/// What an invalid document does to the config it is part of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InvalidConfig {
    /// The whole config is refused (the default: nothing half-checked is served).
    #[default]
    Refuse,
    /// As Istio 1.4: the invalid document is dropped, and with it what depends on it (a rule
    /// action whose handler or every instance was dropped; a rule with no action left and no
    /// header operation); the rest is served and [`Config::dropped`] says what was left out.
    /// A config whose every rule was dropped is still refused.
    Skip,
}

impl Default for ConfigOptions {
    fn default() -> ConfigOptions {
        ConfigOptions {
            default_namespace: DEFAULT_NAMESPACE.to_string(),
            default_syntax: Syntax::default(),
            invalid_config: InvalidConfig::default(),
            ratelimit_backend: None,
            allow_empty_files: false,
            config_root: None,
        }
    }
}

/// A config that passed validation, with the warnings found on the way.
#[derive(Clone, Debug)]
pub struct Validated {
    /// The typed config.
    pub config: Config,
    /// Things that load but probably do not do what was meant (same shape as errors).
    pub warnings: Vec<ConfigError>,
}

/// Parses and validates every document of `sources` against the adapters in `registry`.
///
/// Returns every error found (never just the first), or the config with its warnings.
pub fn validate(
    sources: &[SourceFile],
    registry: &AdapterRegistry,
    options: &ConfigOptions,
) -> Result<Validated, Vec<ConfigError>> {
    validate::validate(sources, registry, options)
}
