//! What a remote handler is built from: its params (and the message they are encoded into),
//! its connection, the instances rules send it with their inferred types; and the
//! [`RemoteAdapters`] trait that validates and builds it.

use std::sync::Arc;

use mixer_adapter_api::host::Params;
use mixer_adapter_api::{AdapterError, Handler, ParamError};
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
}

/// Builds handlers for adapters that run in another process. Called by the runtime when a
/// config snapshot is built, for handlers that are new or changed (unchanged handlers are
/// reused as they are).
///
/// Both methods are synchronous because snapshot building is (it runs on a blocking thread
/// in the server); an implementation that talks to the adapter must bound the time it takes.
pub trait RemoteAdapters: Send + Sync {
    /// Checks a handler's params with the adapter itself. An error rejects the whole config
    /// (the previous snapshot stays), so return one only for params the adapter refused,
    /// not because the adapter could not be reached.
    fn validate(&self, spec: &RemoteHandlerSpec<'_>) -> Result<(), Vec<ParamError>>;

    /// Builds the handler. Must not need the adapter to be up: a down adapter is a runtime
    /// failure handled by fail policies, not a config error.
    fn build(&self, spec: &RemoteHandlerSpec<'_>) -> Result<Arc<dyn Handler>, AdapterError>;
}
