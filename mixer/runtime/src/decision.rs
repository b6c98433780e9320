//! What a decision is made of, below every stage that makes one: the validity a verdict has
//! when no handler limits it, and why the mixer may fail to decide at all.

use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::AdapterError;

/// Validity of a verdict no handler limited (Istio's default: one minute, 10000 uses).
pub const DEFAULT_VALID_DURATION: Duration = Duration::from_secs(60);
/// Use count of a verdict no handler limited.
pub const DEFAULT_VALID_USE_COUNT: i32 = 10_000;

/// The mixer could not decide a check or a quota. Front ends answer this with an error,
/// never a denial, so the proxy's own failure setting applies.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Undecided {
    /// A handler failed and its policy is to fail closed (gRPC UNAVAILABLE, HTTP 503).
    #[error("handler {handler} could not decide: {error}")]
    Handler {
        /// The handler that failed.
        handler: Arc<str>,
        /// Its error.
        error: AdapterError,
    },
    /// An instance of a matched rule could not be built from the request (gRPC INTERNAL,
    /// HTTP 500, as Istio 1.4 answers).
    #[error("performing check operation failed: {0}")]
    Instance(InstanceError),
}

/// An instance a matched rule names that could not be built: one of its fields reads an
/// absent attribute (with no `|` default) or fails to evaluate. Istio 1.4 fails the Check
/// RPC itself on such an instance (INTERNAL) and fails a Report (UNKNOWN) without sending it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("instance {instance}: field {field}: {message}")]
pub struct InstanceError {
    /// The instance's full name.
    pub instance: Arc<str>,
    /// The field (`value`, `dimensions[source]`, ...).
    pub field: String,
    /// Why its expression failed, naming the attribute.
    pub message: String,
}
