//! Errors: an adapter that could not decide, and params that do not validate.

use std::fmt;

/// Why a handler call failed. The kind decides metrics labels and whether a retry may help.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The backend could not be reached.
    Unavailable,
    /// The call did not finish before its deadline.
    Timeout,
    /// The backend answered something that makes no sense.
    InvalidResponse,
    /// The instance cannot be handled (wrong template, bad field).
    InvalidInstance,
    /// Too many calls in flight.
    Overloaded,
    /// Not tried: the circuit breaker is open after calls in a row failed (see
    /// [`crate::breaker`]); the backend is asked again after the cool-down.
    CircuitOpen,
    /// Anything else inside the adapter.
    Internal,
}

impl ErrorKind {
    /// A short label for metrics (`unavailable`, `timeout`, ...).
    pub fn label(self) -> &'static str {
        match self {
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::InvalidResponse => "invalid_response",
            ErrorKind::InvalidInstance => "invalid_instance",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::CircuitOpen => "circuit_open",
            ErrorKind::Internal => "internal",
        }
    }
}

/// A handler could not decide. This is not a denial: the front end applies the handler's
/// [`crate::host::FailPolicy`] or reports an error to the proxy.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct AdapterError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// Whether trying again may succeed.
    pub retryable: bool,
    /// For people.
    pub message: String,
}

impl AdapterError {
    /// A transient failure (retry may help).
    pub fn transient(kind: ErrorKind, message: impl Into<String>) -> AdapterError {
        AdapterError {
            kind,
            retryable: true,
            message: message.into(),
        }
    }

    /// Params that do not compile, as one permanent error listing each problem.
    pub fn invalid_config(errors: Vec<ParamError>) -> AdapterError {
        let said: Vec<String> = errors.iter().map(ToString::to_string).collect();
        AdapterError::permanent(
            ErrorKind::InvalidInstance,
            format!("invalid params: {}", said.join("; ")),
        )
    }

    /// A permanent failure (retrying the same call will fail again).
    pub fn permanent(kind: ErrorKind, message: impl Into<String>) -> AdapterError {
        AdapterError {
            kind,
            retryable: false,
            message: message.into(),
        }
    }
}

/// One problem with a handler's `params`, at a field path inside them (`status.code`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamError {
    /// Dotted path inside `params`; empty for the params as a whole.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl ParamError {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> ParamError {
        ParamError {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The value of `result`, or `None` once its error is recorded in `errors`: one step of a
    /// compile that reports every problem of the params, not only the first.
    ///
    /// ```
    /// use mixer_adapter_api::{DurationParam, ParamError};
    /// let mut errors = Vec::new();
    /// let ttl = ParamError::collect(DurationParam::new("soon").positive("ttl"), &mut errors);
    /// assert_eq!((ttl, errors[0].path.as_str()), (None, "ttl"));
    /// ```
    pub fn collect<T>(result: Result<T, ParamError>, errors: &mut Vec<ParamError>) -> Option<T> {
        result.map_err(|e| errors.push(e)).ok()
    }
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ParamError {}
