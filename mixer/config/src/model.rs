//! The validated config: typed handlers, instances and rules, with every expression compiled
//! and every reference resolved to an index.

use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::host::{CompiledConfig, FailPolicy};
use mixer_adapter_api::secrets::Redactor;
use mixer_model::{AttrId, HeaderOp, Template, Vocabulary};
use mixer_remote::ParamsDescriptor;

use crate::expr::Expression;
use crate::inputs::InputFile;

/// A validated config snapshot: what the runtime builds handlers and routes from.
#[derive(Clone, Debug)]
pub struct Config {
    /// Istio's vocabulary extended by every `attributemanifest`.
    pub vocabulary: Arc<Vocabulary>,
    /// The namespace documents without one were put in; rules there apply to every namespace.
    pub default_namespace: Arc<str>,
    /// Handlers, in the order their documents were read.
    pub handlers: Vec<HandlerConfig>,
    /// Instances, in the order their documents were read.
    pub instances: Vec<InstanceConfig>,
    /// Rules, in the order their documents were read.
    pub rules: Vec<RuleConfig>,
    /// envoyproxy/ratelimit behaviour of the quota instances generated from its config format
    /// (`ratelimitconfig` documents and bare envoyproxy/ratelimit files), in instance order.
    pub rate_limits: Vec<RateLimitBehaviour>,
    /// Documents left out because they were invalid or depended on one that was (only with
    /// [`InvalidConfig::Skip`](crate::InvalidConfig::Skip); empty otherwise).
    pub dropped: Vec<DroppedDocument>,
    /// What loading could not check, for readiness (an out-of-process adapter that was
    /// unreachable, so its params and templates went unchecked); one line each.
    pub notes: Vec<String>,
}

impl Config {
    /// No handlers, instances or rules; Istio's vocabulary; namespace `istio-system`. The
    /// runtime starts from this and diffs the first real config against it.
    pub fn empty() -> Config {
        Config {
            vocabulary: Arc::new(Vocabulary::istio()),
            default_namespace: Arc::from(crate::DEFAULT_NAMESPACE),
            handlers: Vec::new(),
            instances: Vec::new(),
            rules: Vec::new(),
            rate_limits: Vec::new(),
            dropped: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// The envoyproxy/ratelimit behaviour of the instance at `instance`, if it was generated
    /// from that format.
    pub fn rate_limit(&self, instance: usize) -> Option<&RateLimitBehaviour> {
        // Kept in instance order: validation adds them as it adds the instances.
        self.rate_limits
            .binary_search_by_key(&instance, |r| r.instance)
            .ok()
            .map(|i| &self.rate_limits[i])
    }

    /// The handler with this fully qualified name (`denyall.istio-system`).
    pub fn handler(&self, name: &str) -> Option<&HandlerConfig> {
        self.handlers.iter().find(|h| &*h.name == name)
    }

    /// The instance with this fully qualified name.
    pub fn instance(&self, name: &str) -> Option<&InstanceConfig> {
        self.instances.iter().find(|i| &*i.name == name)
    }

    /// The rule with this fully qualified name.
    pub fn rule(&self, name: &str) -> Option<&RuleConfig> {
        self.rules.iter().find(|r| &*r.name == name)
    }

    /// Hex SHA-256 of what the handlers are built from beyond the config files' text, their
    /// secrets left out: each handler's params as its adapter gets them (`${NAME}`s expanded,
    /// params known to be secret hidden), its connection and fail policy, and the digests of the
    /// files it reads that are not secrets (a Wasm module, a local list). Two replicas
    /// loading the same files under different environments, or beside different modules or
    /// lists, get different digests; the same inputs always give the same one. Published
    /// (in the config hash), so nothing in it helps guess a secret.
    pub fn resolved_digest(&self) -> String {
        self.digest(false)
    }

    /// Hex SHA-256 of [`Config::resolved_digest`]'s material with the secrets in: the
    /// params as the adapter gets them and the digests of `<name>File` secrets. Replicas
    /// that disagree on a secret must not share verdicts either; kept out of what is shown.
    pub fn secrets_digest(&self) -> String {
        self.digest(true)
    }

    fn digest(&self, with_secrets: bool) -> String {
        use crate::inputs::feed;
        use sha2::{Digest, Sha256};
        let mut digest = Sha256::new();
        for h in &self.handlers {
            feed(&mut digest, h.name.as_bytes());
            feed(&mut digest, h.adapter.as_bytes());
            let params = if with_secrets {
                h.params.to_string()
            } else {
                h.hashed_params.to_string()
            };
            feed(&mut digest, params.as_bytes());
            feed(&mut digest, format!("{:?}", h.connection).as_bytes());
            feed(&mut digest, format!("{:?}", h.fail_policy).as_bytes());
            let inputs: Vec<&InputFile> = h
                .inputs
                .iter()
                .filter(|i| with_secrets || !i.secret)
                .collect();
            digest.update((inputs.len() as u64).to_le_bytes());
            for input in inputs {
                feed(&mut digest, input.path.as_os_str().as_encoded_bytes());
                feed(
                    &mut digest,
                    input.sha256.as_deref().unwrap_or("unreadable").as_bytes(),
                );
            }
        }
        crate::inputs::hex(&digest.finalize())
    }

    /// Every file the handlers read besides the config files, once each.
    pub fn inputs(&self) -> Vec<InputFile> {
        let mut all: Vec<InputFile> = self
            .handlers
            .iter()
            .flat_map(|h| h.inputs.iter().cloned())
            .collect();
        all.sort();
        all.dedup();
        all
    }
}

/// A handler: an adapter with its params.
#[derive(Clone)]
pub struct HandlerConfig {
    /// Fully qualified name, `name.namespace`.
    pub name: Arc<str>,
    /// Its namespace.
    pub namespace: Arc<str>,
    /// The adapter's name (a registered one, or any name for a remote adapter).
    pub adapter: String,
    /// Params as the adapter gets them: as written, with `${NAME}` expanded and `<name>File`s
    /// read (already accepted by the adapter's `validate` for built-in ones). They may hold
    /// secrets: show [`HandlerConfig::shown_params`] instead.
    pub params: serde_json::Value,
    /// What hides the secrets of `params` (see [`mixer_adapter_api::secrets`]).
    pub redactor: Redactor,
    /// Where a remote (out-of-process) adapter listens; `None` for built-in adapters.
    pub connection: Option<Connection>,
    /// What to do when the handler cannot decide; `None` = the default for the variety.
    pub fail_policy: Option<FailPolicy>,
    /// The `adapter` resource a remote handler's `adapter` names, if there is one: it gives
    /// the templates the adapter serves and the message its params are encoded into.
    pub adapter_resource: Option<Arc<AdapterResource>>,
    /// The params as the handler's adapter compiled them when config loaded (a remote one's by
    /// the out-of-process adapter, with its connection, once rules were resolved): what the
    /// runtime builds the handler from. `None` only in a config assembled in code.
    pub compiled: Option<CompiledConfig>,
    /// The files its config read besides the config files (`<name>File` secrets, a Wasm
    /// module, a local list), with their digests when config loaded.
    pub inputs: Vec<InputFile>,
    /// The params as the config hash covers them ([`Config::resolved_digest`]): values from
    /// the environment expanded, params known to be secret (declared, secret-named, URL
    /// passwords and query keys) hidden.
    pub hashed_params: serde_json::Value,
    /// The file it came from.
    pub file: String,
}

impl PartialEq for HandlerConfig {
    // The compiled config is the params decoded: equal params compile alike.
    fn eq(&self, other: &HandlerConfig) -> bool {
        self.name == other.name
            && self.namespace == other.namespace
            && self.adapter == other.adapter
            && self.params == other.params
            && self.redactor == other.redactor
            && self.connection == other.connection
            && self.fail_policy == other.fail_policy
            && self.adapter_resource == other.adapter_resource
            && self.inputs == other.inputs
            && self.file == other.file
    }
}

impl std::fmt::Debug for HandlerConfig {
    // Params may hold secrets: a debug print shows them hidden.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerConfig")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("adapter", &self.adapter)
            .field("params", &self.shown_params())
            .field("connection", &self.connection)
            .field("fail_policy", &self.fail_policy)
            .field("adapter_resource", &self.adapter_resource)
            .field("file", &self.file)
            .finish()
    }
}

impl HandlerConfig {
    /// True when both would build the same handler (adapter, params, connection, fail
    /// policy, adapter resource, the files it reads), so a reload may keep the running one.
    pub fn same_build(&self, other: &HandlerConfig) -> bool {
        self.adapter == other.adapter
            && self.params == other.params
            && self.inputs == other.inputs
            && self.connection == other.connection
            && self.fail_policy == other.fail_policy
            && self.adapter_resource == other.adapter_resource
    }

    /// The params with their secrets hidden, for dumps and logs.
    pub fn shown_params(&self) -> serde_json::Value {
        self.redactor.params()
    }

    /// `text` (an error about this handler) without the secrets of its params.
    pub fn scrub(&self, text: &str) -> String {
        self.redactor.scrub(text)
    }

    /// True for an out-of-process adapter (one with a `connection`).
    pub fn is_remote(&self) -> bool {
        self.connection.is_some()
    }
}

/// An `adapter` document (Istio's `config.istio.io/v1alpha2` kind `adapter`): what an
/// out-of-process adapter serves and the message its handlers' params are encoded into.
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterResource {
    /// Fully qualified name, `name.namespace`.
    pub name: Arc<str>,
    /// `spec.description`.
    pub description: String,
    /// `spec.session_based`: false makes the mixer send the params with every call instead
    /// of opening a session.
    pub session_based: bool,
    /// `spec.templates`: the templates its handlers may be sent.
    pub templates: Vec<Template>,
    /// The message named `Params` in `spec.config`'s descriptor set; `None` when `config` is
    /// empty (params then go as a `google.protobuf.Struct`).
    pub params: Option<ParamsDescriptor>,
    /// The file it came from.
    pub file: String,
}

/// How to reach a remote adapter (Istio's `connection`).
#[derive(Clone, Debug, PartialEq)]
pub struct Connection {
    /// `host:port` of the adapter's gRPC service.
    pub address: String,
    /// Per-call timeout.
    pub timeout: Option<Duration>,
    /// Istio's `authentication` block (TLS or mutual TLS), its certificate files read.
    pub authentication: Option<mixer_remote::Authentication>,
}

/// An instance: how to build one template's data from a request's attributes.
#[derive(Clone, Debug)]
pub struct InstanceConfig {
    /// Fully qualified name, `name.namespace`.
    pub name: Arc<str>,
    /// Its namespace.
    pub namespace: Arc<str>,
    /// Its template.
    pub template: Template,
    /// The fields set, in template order.
    pub fields: Vec<FieldExpr>,
    /// For an attribute generator template: which attributes its handler's outputs fill
    /// (`spec.attributeBindings`), in config order; empty for every other template.
    pub bindings: Vec<AttributeBinding>,
    /// For a `decisionlog` instance: how its records are sampled and masked. The mixer fills
    /// such an instance from each decision it makes (never from a request's attributes), and
    /// sends it as a `logentry`; `None` for every other instance.
    pub decision_log: Option<Arc<DecisionLogParams>>,
}

impl InstanceConfig {
    /// A quota instance with a `charge`: report rules charge it the usage a report carries
    /// (besides checks looking at it, charging nothing).
    pub fn charged_by_reports(&self) -> bool {
        self.template == mixer_model::Template::Quota
            && self.fields.iter().any(|f| f.name == "charge")
    }

    /// Whether evaluating rules for `variety` builds this instance: its template's variety,
    /// and for reports also a charged quota instance.
    pub fn serves(&self, variety: mixer_model::Variety) -> bool {
        self.template.variety() == variety
            || (variety == mixer_model::Variety::Report && self.charged_by_reports())
    }
}

/// One entry of an instance's `attributeBindings`: a request attribute and the expression
/// over the handler's outputs (`$out.<field>`) that computes it.
#[derive(Clone, Debug)]
pub struct AttributeBinding {
    /// The attribute bound, in the config's vocabulary.
    pub attr: AttrId,
    /// Its name.
    pub name: Arc<str>,
    /// The expression as written (with `$out.`), for dumps.
    pub source: Arc<str>,
    /// The expression compiled against [`outputs_vocabulary`](crate::outputs_vocabulary)
    /// of the instance's template, typed as the attribute is declared.
    pub expr: Expression,
}

/// One template field and the expression(s) that compute it.
#[derive(Clone, Debug)]
pub struct FieldExpr {
    /// The field's name as in [`Template::fields`] (`subject.user`, `span_tags`).
    pub name: &'static str,
    /// Its expression(s).
    pub value: FieldExprValue,
}

/// The expression(s) of a field.
#[derive(Clone, Debug)]
pub enum FieldExprValue {
    /// A single-valued field.
    Value(Expression),
    /// A map field: one expression per entry, in config order.
    Map(Vec<(Arc<str>, Expression)>),
}

/// A rule: when it matches, send instances to handlers and edit headers.
#[derive(Clone, Debug)]
pub struct RuleConfig {
    /// Fully qualified name, `name.namespace`.
    pub name: Arc<str>,
    /// Its namespace; rules in the default namespace apply to every namespace.
    pub namespace: Arc<str>,
    /// The match condition (BOOL); `None` = always.
    pub match_expr: Option<Expression>,
    /// What a match that fails to evaluate means; `None` = the runtime's global default.
    pub match_error_policy: Option<MatchErrorPolicy>,
    /// Handlers to call.
    pub actions: Vec<ActionConfig>,
    /// Header edits on the request to the service.
    pub request_header_operations: Vec<HeaderOperationConfig>,
    /// Header edits on the response to the client.
    pub response_header_operations: Vec<HeaderOperationConfig>,
    /// Not enforced (annotation `istio.io/dry-run: "true"`): its check and quota actions are
    /// evaluated and their handlers called, but what they would decide is only counted and
    /// recorded, never answered.
    pub dry_run: bool,
    /// Istio 1.4's `spec.sampling`: which records its report actions are sent. `None` sends
    /// every one.
    pub sampling: Option<SamplingConfig>,
}

/// Istio 1.4's `rule.sampling` (`policy/v1beta1/cfg.proto`, `Sampling`): a record goes to the
/// rule's report actions only when every strategy configured selects it.
#[derive(Clone, Debug)]
pub struct SamplingConfig {
    /// `random`: a percentage of records.
    pub random: Option<RandomSamplingConfig>,
    /// `rateLimit`: every record up to a count per window, then one in N.
    pub rate_limit: Option<RateLimitSamplingConfig>,
}

/// Istio's `RandomSampling`.
#[derive(Clone, Debug)]
pub struct RandomSamplingConfig {
    /// `percentSampled`, as parts per million (100% is 1,000,000; more is capped to it).
    pub parts_per_million: u32,
    /// `attributeExpression`: when set, its value (a number) replaces `percentSampled`'s
    /// numerator, over [`Self::denominator`]; absent or not a number samples nothing, as
    /// Istio documents.
    pub attribute_expression: Option<Expression>,
    /// What `attributeExpression`'s value is a fraction of: `percentSampled`'s denominator
    /// (100 when it is written as a plain percentage).
    pub denominator: u32,
    /// `useIndependentRandomness`: draw at random for each record instead of deciding on
    /// `request.id`, which keeps a request's records sampled alike across rules and hosts.
    pub use_independent_randomness: bool,
}

/// Istio's `RateLimitSampling`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitSamplingConfig {
    /// `samplingDuration`: the window (positive).
    pub sampling_duration: std::time::Duration,
    /// `maxUnsampledEntries`: records sent in a window before sampling starts.
    pub max_unsampled_entries: u64,
    /// `samplingRate`: past that, one record in this many is sent (at least 1).
    pub sampling_rate: u64,
}

/// What a rule's match that cannot be evaluated (an absent attribute) means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatchErrorPolicy {
    /// The rule does not apply (Istio's behaviour).
    NoMatch,
    /// The request is denied.
    Deny,
}

/// One action of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionConfig {
    /// Index into [`Config::handlers`].
    pub handler: usize,
    /// Indices into [`Config::instances`], each of a template the handler supports.
    pub instances: Vec<usize>,
    /// The action's name, if given.
    pub name: Option<String>,
}

/// One header edit of a rule.
#[derive(Clone, Debug)]
pub struct HeaderOperationConfig {
    /// Header name.
    pub name: String,
    /// Value expressions (STRING); empty for remove.
    pub values: Vec<Expression>,
    /// Replace, append or remove.
    pub operation: HeaderOp,
}

/// What envoyproxy/ratelimit does with one limit beyond counting (its `rate_limit` block and
/// descriptor flags), for the rate limit front end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RateLimitBehaviour {
    /// Index into [`Config::instances`] of the quota instance of the limit.
    pub instance: usize,
    /// `rate_limit.name`: what other limits' `replaces` name.
    pub name: Option<String>,
    /// `rate_limit.replaces[].name`: limits that are not applied to a request this limit
    /// applies to (in any of the request's descriptors).
    pub replaces: Vec<String>,
    /// `rate_limit.unlimited`: the descriptor is allowed without asking any handler.
    pub unlimited: bool,
    /// `quota_mode`: over this limit, the request is refused only when every quota-mode
    /// descriptor of the request is over its limit (and no other descriptor refuses it).
    pub quota_mode: bool,
}

/// A document served without, because it was invalid or needed one that was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DroppedDocument {
    /// Istio's full name, `name.kind.namespace` (`requestcount.metric.istio-system`), or
    /// `document N` of its file when it has no usable header.
    pub name: String,
    /// The file it came from.
    pub file: String,
    /// Why.
    pub reason: DropReason,
}

impl DroppedDocument {
    /// `invalid` or `dependency`: the label of `mixer_config_dropped_documents`.
    pub fn reason_label(&self) -> &'static str {
        match self.reason {
            DropReason::Invalid(_) => "invalid",
            DropReason::Dependency(_) => "dependency",
        }
    }
}

impl std::fmt::Display for DroppedDocument {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): ", self.name, self.file)?;
        match &self.reason {
            DropReason::Invalid(errors) => {
                let shown: Vec<String> = errors
                    .iter()
                    .map(|e| {
                        if e.field.is_empty() {
                            e.message.clone()
                        } else {
                            format!("{}: {}", e.field, e.message)
                        }
                    })
                    .collect();
                write!(f, "invalid: {}", shown.join("; "))
            }
            DropReason::Dependency(names) => {
                write!(f, "depends on dropped {}", names.join(", "))
            }
        }
    }
}

/// Why a document was dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Its own errors.
    Invalid(Vec<crate::ConfigError>),
    /// Everything it needed was dropped: the full names of those documents (a rule whose every
    /// action lost its handler or all of its instances).
    Dependency(Vec<String>),
}

/// How a `decisionlog` instance samples and masks the decision records it sends.
#[derive(Clone, Debug, PartialEq)]
pub struct DecisionLogParams {
    /// Percentage of decisions logged, 0 to 100 (`percentSampled`, default 100).
    pub percent_sampled: f64,
    /// Denials (and decisions the mixer could not make) are logged whatever the sampling
    /// (`alwaysLogDenials`, default true): they are what an operator looks for.
    pub always_log_denials: bool,
    /// Attributes, or keys of map attributes, left out of the record (`drop`).
    pub drop: Vec<AttributeSelector>,
    /// Attributes, or keys of map attributes, logged as a hash of their value (`hash`), so
    /// that records can be correlated without the value being written.
    pub hash: Vec<AttributeSelector>,
}

impl Default for DecisionLogParams {
    fn default() -> DecisionLogParams {
        DecisionLogParams {
            percent_sampled: 100.0,
            always_log_denials: true,
            drop: Vec::new(),
            hash: Vec::new(),
        }
    }
}

/// One attribute, or one key of a map attribute (`request.headers[x-user]`), as masking names
/// it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttributeSelector {
    /// The attribute.
    pub attr: AttrId,
    /// The map key, lower-case (header names are); `None` selects the whole attribute.
    pub key: Option<Arc<str>>,
}

impl AttributeSelector {
    /// Whether this selects `attr` (or, with a key, that key of it; compared ignoring case).
    pub fn selects(&self, attr: AttrId, key: Option<&str>) -> bool {
        self.attr == attr
            && match (&self.key, key) {
                (None, _) => true,
                (Some(want), Some(key)) => want.eq_ignore_ascii_case(key),
                (Some(_), None) => false,
            }
    }
}
