//! Compile-time and evaluation-time errors.

use std::fmt;
use std::sync::Arc;

use mixer_model::ValueType;

/// Why an expression does not compile: a syntax error, an unknown attribute, a type error,
/// a malformed literal or regular expression.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CompileError {
    /// Human-readable explanation, such as
    /// `unknown attribute "request.hedaers" (did you mean request.headers?)`.
    pub message: String,
    /// Byte offset in the source where the problem was found, when known.
    pub offset: Option<usize>,
}

impl CompileError {
    pub(crate) fn new(message: impl Into<String>, offset: Option<usize>) -> CompileError {
        CompileError {
            message: message.into(),
            offset,
        }
    }

    pub(crate) fn at(offset: usize, message: impl Into<String>) -> CompileError {
        CompileError::new(message, Some(offset))
    }
}

/// What went wrong while evaluating an expression against a bag.
#[derive(Clone, Debug, PartialEq)]
pub enum EvalErrorKind {
    /// A whole attribute the expression needed is not in the bag.
    AbsentAttribute {
        /// The attribute's name.
        name: Arc<str>,
    },
    /// A `STRING_MAP` attribute is present but lacks the key looked up.
    MissingKey {
        /// The map attribute's name (or `<map>` for a computed map).
        attr: Arc<str>,
        /// The key.
        key: Arc<str>,
    },
    /// A value had a type the operation cannot take (only possible for dynamic cases).
    Type {
        /// Explanation.
        message: String,
    },
    /// A run-time conversion (`ip(x)`, `int(s)`, ...) failed.
    Conversion {
        /// The type converted to.
        target: ValueType,
        /// The text or value that did not convert.
        input: String,
    },
    /// A regular expression could not be built (only for run-time patterns).
    Regex {
        /// Explanation.
        message: String,
    },
    /// Integer arithmetic overflowed.
    Overflow,
    /// Integer division or remainder by zero.
    DivideByZero,
}

/// An evaluation failure. The expression's result is unknown; a `|` default or a commutative
/// `&&`/`||` may still absorb it.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalError {
    kind: EvalErrorKind,
}

impl EvalError {
    /// The error's kind.
    pub fn kind(&self) -> &EvalErrorKind {
        &self.kind
    }

    /// True when the failure is due to a missing attribute or map key.
    pub fn is_absence(&self) -> bool {
        matches!(
            self.kind,
            EvalErrorKind::AbsentAttribute { .. } | EvalErrorKind::MissingKey { .. }
        )
    }

    pub(crate) fn new(kind: EvalErrorKind) -> EvalError {
        EvalError { kind }
    }

    pub(crate) fn absent(name: &Arc<str>) -> EvalError {
        EvalError::new(EvalErrorKind::AbsentAttribute { name: name.clone() })
    }

    pub(crate) fn missing_key(attr: &Arc<str>, key: Arc<str>) -> EvalError {
        EvalError::new(EvalErrorKind::MissingKey {
            attr: attr.clone(),
            key,
        })
    }

    pub(crate) fn type_error(message: impl Into<String>) -> EvalError {
        EvalError::new(EvalErrorKind::Type {
            message: message.into(),
        })
    }

    pub(crate) fn conversion(target: ValueType, input: impl Into<String>) -> EvalError {
        EvalError::new(EvalErrorKind::Conversion {
            target,
            input: input.into(),
        })
    }
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            EvalErrorKind::AbsentAttribute { name } => write!(f, "attribute {name:?} is absent"),
            EvalErrorKind::MissingKey { attr, key } => {
                write!(f, "attribute {attr:?} has no key {key:?}")
            }
            EvalErrorKind::Type { message } => write!(f, "type error: {message}"),
            EvalErrorKind::Conversion { target, input } => {
                write!(f, "cannot convert {input:?} to {target}")
            }
            EvalErrorKind::Regex { message } => write!(f, "bad regular expression: {message}"),
            EvalErrorKind::Overflow => f.write_str("integer overflow"),
            EvalErrorKind::DivideByZero => f.write_str("division by zero"),
        }
    }
}

impl std::error::Error for EvalError {}
