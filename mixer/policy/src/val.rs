//! The value the evaluator works on: borrowed from the bag or the expression where it can.

use std::sync::Arc;

use mixer_model::Value;

use crate::error::EvalError;

/// A value during evaluation: borrowed from the bag or the expression where possible.
#[derive(Clone, Debug)]
pub(crate) enum Val<'a> {
    Ref(&'a Value),
    /// A string borrowed from a map entry.
    MapStr(&'a str),
    Own(Value),
}

impl Val<'_> {
    pub(crate) fn as_value(&self) -> Option<&Value> {
        match self {
            Val::Ref(v) => Some(v),
            Val::Own(v) => Some(v),
            Val::MapStr(_) => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Val::MapStr(s) => Some(s),
            _ => self.as_value().and_then(Value::as_str),
        }
    }

    pub(crate) fn as_bool(&self) -> Result<bool, EvalError> {
        self.as_value()
            .and_then(Value::as_bool)
            .ok_or_else(|| EvalError::type_error("expected a BOOL"))
    }

    pub(crate) fn key_arc(&self) -> Result<Arc<str>, EvalError> {
        match self {
            Val::MapStr(s) => Ok(Arc::from(*s)),
            Val::Ref(Value::String(s)) | Val::Own(Value::String(s)) => Ok(Arc::clone(s)),
            _ => self
                .as_str()
                .map(Arc::from)
                .ok_or_else(|| EvalError::type_error("a map key must be a string")),
        }
    }

    pub(crate) fn to_value(&self) -> Value {
        match self {
            Val::Ref(v) => (*v).clone(),
            Val::MapStr(s) => Value::string(*s),
            Val::Own(v) => v.clone(),
        }
    }

    pub(crate) fn into_value(self) -> Value {
        match self {
            Val::Own(v) => v,
            other => other.to_value(),
        }
    }
}
