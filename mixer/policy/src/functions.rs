//! Evaluation of the built-in functions on evaluated arguments; their type checking is in
//! `typecheck/calls.rs`.

use mixer_model::{Value, ValueType};

use crate::error::{EvalError, EvalErrorKind};
use crate::ir::{Func, Glob};
use crate::val::Val;

/// Runs a built-in on evaluated arguments.
pub(crate) fn call<'a>(f: Func, args: &[Val<'a>]) -> Result<Val<'a>, EvalError> {
    let s = |i: usize| -> Result<&str, EvalError> {
        args.get(i)
            .and_then(Val::as_str)
            .ok_or_else(|| EvalError::type_error("expected a string argument"))
    };
    let arg = |i: usize| {
        args.get(i)
            .ok_or_else(|| EvalError::type_error("missing argument"))
    };
    Ok(Val::Own(match f {
        Func::Parse(ty) => {
            let text = s(0)?;
            Value::parse_as(ty, text).ok_or_else(|| EvalError::conversion(ty, text))?
        }
        Func::Glob => Value::Bool(Glob::new(s(1)?).matches(s(0)?)),
        Func::StartsWith => Value::Bool(s(0)?.starts_with(s(1)?)),
        Func::EndsWith => Value::Bool(s(0)?.ends_with(s(1)?)),
        Func::Contains => Value::Bool(s(0)?.contains(s(1)?)),
        Func::ToLower => Value::string(s(0)?.to_lowercase()),
        Func::Reverse => Value::string(s(0)?.chars().rev().collect::<String>()),
        Func::Size => {
            let a = arg(0)?;
            let n = match (a.as_str(), a.as_value()) {
                (Some(text), _) => text.chars().count(),
                (None, Some(Value::Bytes(b))) => b.len(),
                (None, Some(Value::StringMap(m))) => m.len(),
                _ => return Err(EvalError::type_error("size() of an unsized value")),
            };
            Value::Int64(i64::try_from(n).map_err(|_| EvalError::new(EvalErrorKind::Overflow))?)
        }
        Func::ToInt => {
            let a = arg(0)?;
            match a.as_value() {
                Some(Value::Int64(i)) => Value::Int64(*i),
                Some(Value::Double(d)) => {
                    let t = d.trunc();
                    if !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&t) {
                        return Err(EvalError::new(EvalErrorKind::Overflow));
                    }
                    Value::Int64(t as i64)
                }
                Some(Value::Timestamp(t)) => Value::Int64(t.0.div_euclid(1_000_000_000)),
                Some(Value::Duration(d)) => Value::Int64(d.0),
                _ => {
                    let text = s(0)?;
                    Value::Int64(
                        text.parse()
                            .map_err(|_| EvalError::conversion(ValueType::Int64, text))?,
                    )
                }
            }
        }
        Func::ToDouble => match arg(0)?.as_value() {
            Some(Value::Int64(i)) => Value::Double(*i as f64),
            Some(Value::Double(d)) => Value::Double(*d),
            _ => {
                let text = s(0)?;
                Value::Double(
                    text.parse()
                        .map_err(|_| EvalError::conversion(ValueType::Double, text))?,
                )
            }
        },
        Func::ToString => {
            let a = arg(0)?;
            match a.as_str() {
                Some(text) => Value::string(text),
                None => Value::string(a.to_value().to_string()),
            }
        }
    }))
}
