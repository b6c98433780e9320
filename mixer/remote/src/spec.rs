//! What a remote handler is built from: its params (and the message they are encoded into),
//! its connection, the instances rules send it with their inferred types; and the
//! [`RemoteAdapter`] that compiles it.

use std::sync::Arc;

use mixer_adapter_api::ParamError;
use mixer_adapter_api::host::{AnyAdapter, CompiledConfig, Params};
use mixer_model::{Template, ValueType};

use crate::connection::RemoteConnection;

/// The inferred type of one instance field (or one entry of a map field), as the config's
/// expressions say; sent to the adapter at validation and session creation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InferredField {
    /// The template field (`dimensions`, `subject.properties`, `value`).
    pub field: &'static str,
    /// The map key, for an entry of a map field.
    pub key: Option<Arc<str>>,
    /// The expression's type; `None` when it is not known at config time.
    pub value_type: Option<ValueType>,
}

/// One instance the config routes to a remote handler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteInstance {
    /// Fully qualified instance name.
    pub name: Arc<str>,
    /// Its template.
    pub template: Template,
    /// Field types inferred from the config.
    pub fields: Vec<InferredField>,
}

/// The adapter's own config message, as an `adapter` resource describes it (Istio's
/// `spec.config`): a remote handler's `params` are encoded into it instead of a
/// `google.protobuf.Struct`.
#[derive(Clone, PartialEq, Eq)]
pub struct ParamsDescriptor {
    /// Full name of the message (`mygrpcadapter.config.Params`); the `adapter_config` sent is
    /// an `Any` of type `type.googleapis.com/<message>`.
    pub message: Arc<str>,
    /// A serialized `google.protobuf.FileDescriptorSet` that defines the message (and the
    /// files it imports, well-known types excepted), already checked by config validation.
    pub file_descriptor_set: Arc<[u8]>,
}

impl std::fmt::Debug for ParamsDescriptor {
    // The descriptor bytes say nothing to a reader of logs or dumps.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParamsDescriptor")
            .field("message", &self.message)
            .field("file_descriptor_set_bytes", &self.file_descriptor_set.len())
            .finish()
    }
}

/// Everything the config says about one remote handler.
#[derive(Clone, Debug)]
pub struct RemoteHandlerSpec<'a> {
    /// Fully qualified handler name, for logs and metrics.
    pub handler_name: Arc<str>,
    /// The adapter name as written (`myadapter`); informational for remote adapters.
    pub adapter: &'a str,
    /// The handler's params, passed to the adapter as its config.
    pub params: &'a Params,
    /// The message `params` are encoded into, when an `adapter` resource gives one; `None`
    /// sends them as a `google.protobuf.Struct`.
    pub params_descriptor: Option<&'a ParamsDescriptor>,
    /// Whether the adapter keeps sessions, when an `adapter` resource says
    /// (`spec.session_based`); `None`: unknown, so a client may try and fall back.
    pub session_based: Option<bool>,
    /// How to reach it.
    pub connection: &'a RemoteConnection,
    /// The instances rules send it (every rule of the config).
    pub instances: &'a [RemoteInstance],
    /// The templates its `adapter` document declares, if it has one: what it serves when it
    /// offers no gRPC server reflection.
    pub declared_templates: Option<&'a [Template]>,
}

/// What compiling a remote handler came to: its compiled form and what the adapter said of
/// itself.
#[derive(Clone, Debug)]
pub struct RemoteCompiled {
    /// The handler's compiled form, built by the [`RemoteAdapter`] that compiled it (through
    /// [`AnyAdapter::build_compiled`], as every other handler).
    pub config: CompiledConfig,
    /// The templates the adapter serves, as its gRPC server reflection lists them or, when it
    /// serves no reflection, as its `adapter` document declares them; `None` when neither
    /// says (or the adapter could not be asked): no template check is made.
    pub templates: Option<Vec<Template>>,
    /// Why the adapter could not be asked (down, slow, TLS refused): its params and templates
    /// were not checked. The config is accepted with a warning; calls apply the handler's fail
    /// policy until it is up.
    pub unreachable: Option<String>,
}

/// The adapter of every handler with a `connection`: the out-of-process transport, an
/// ordinary [`AnyAdapter`] whose compile step needs more than params (the connection, the
/// instances rules send it) and may talk to the adapter. The config loader compiles each such
/// handler through it once rules are resolved; the runtime builds it like any other handler.
///
/// Compiling is synchronous because config validation is; an implementation that talks to the
/// adapter must bound the time it takes.
pub trait RemoteAdapter: AnyAdapter {
    /// Checks what can be checked without the adapter (address, TLS settings, params against
    /// their message), then asks the adapter to validate the params and which templates it
    /// serves. An error rejects the config: return one only for params or settings that cannot
    /// work, never because the adapter could not be reached (say so in
    /// [`RemoteCompiled::unreachable`]).
    fn compile_remote(
        &self,
        spec: &RemoteHandlerSpec<'_>,
    ) -> Result<RemoteCompiled, Vec<ParamError>>;
}
