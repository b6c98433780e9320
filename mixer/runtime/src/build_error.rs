//! Why a snapshot could not be built: a handler its adapter would not build.

/// A handler that could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}: handler {handler}: {message}")]
pub struct BuildError {
    /// The file that declared it.
    pub file: String,
    /// The handler.
    pub handler: String,
    /// Why.
    pub message: String,
}
