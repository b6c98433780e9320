//! Built-in functions: Mixer's (`match`, `ip`, `email`, `dnsName`, `uri`, `timestamp`,
//! `conditional`, `emptyStringMap`, `toLower`, `reverse`, `"re".matches(s)`, `startsWith`,
//! `endsWith`) and CEL's (`matches`, `contains`, `size`, `int`, `double`, `string`,
//! `duration`, `timestamp`, `has`, `dyn`).

use std::sync::Arc;

use mixer_model::{Value, ValueType};
use regex::Regex;

use crate::Syntax;
use crate::check::{Checker, Resolved, Typed, fold};
use crate::error::{CompileError, EvalError, EvalErrorKind};
use crate::eval::Val;
use crate::ir::{Func, Glob, Node};
use crate::syntax::{Syn, SynKind};

impl Checker<'_> {
    pub(crate) fn call(
        &self,
        pos: usize,
        target: Option<&Syn>,
        name: &str,
        args: &[Syn],
    ) -> Result<Typed, CompileError> {
        use ValueType::*;
        let arity = |n: usize| -> Result<(), CompileError> {
            if args.len() == n {
                Ok(())
            } else {
                Err(CompileError::at(
                    pos,
                    format!("{name}() takes {n} argument(s), got {}", args.len()),
                ))
            }
        };
        // Functions written either as f(x) or x.f().
        let unary_subject = || -> Result<&Syn, CompileError> {
            match (target, args) {
                (Some(t), []) => Ok(t),
                (None, [a]) => Ok(a),
                _ => Err(CompileError::at(
                    pos,
                    format!("{name}() takes one argument"),
                )),
            }
        };
        match name {
            "has" if target.is_none() => {
                arity(1)?;
                self.has(&args[0], pos)
            }
            "match" if target.is_none() => {
                arity(2)?;
                let s = self.stringlike(&args[0])?;
                if let Some(p) = args[1].as_str_lit() {
                    return Ok(Typed::new(Node::GlobLit(Glob::new(p), Box::new(s)), Bool));
                }
                let p = self.stringlike(&args[1])?;
                Ok(Typed::new(Node::Call(Func::Glob, vec![s, p]), Bool))
            }
            "matches" => {
                let (subject, pattern) = match (target, args) {
                    (Some(t), [a]) => {
                        let mixer_order = match self.syntax {
                            Syntax::Cexl => true,
                            Syntax::Cel => false,
                            Syntax::Compat => t.as_str_lit().is_some() && a.as_str_lit().is_none(),
                        };
                        if mixer_order { (a, t) } else { (t, a) }
                    }
                    (None, [s, p]) => (s, p),
                    _ => {
                        return Err(CompileError::at(
                            pos,
                            "matches() takes a string and a pattern",
                        ));
                    }
                };
                let Some(pattern) = pattern.as_str_lit() else {
                    return Err(CompileError::at(
                        pattern.pos,
                        "the pattern of matches() must be a string literal",
                    ));
                };
                let re = Regex::new(pattern).map_err(|e| {
                    CompileError::at(pos, format!("invalid regular expression {pattern:?}: {e}"))
                })?;
                let s = self.stringlike(subject)?;
                Ok(Typed::new(Node::Regex(Arc::new(re), Box::new(s)), Bool))
            }
            "startsWith" | "endsWith" | "contains" => {
                let (Some(t), [a]) = (target, args) else {
                    return Err(CompileError::at(
                        pos,
                        format!("{name}() is a method: s.{name}(x)"),
                    ));
                };
                let f = match name {
                    "startsWith" => Func::StartsWith,
                    "endsWith" => Func::EndsWith,
                    _ => Func::Contains,
                };
                Ok(Typed::new(
                    Node::Call(f, vec![self.stringlike(t)?, self.stringlike(a)?]),
                    Bool,
                ))
            }
            "ip" | "timestamp" | "email" | "dnsName" | "uri" | "duration" if target.is_none() => {
                arity(1)?;
                let ty = match name {
                    "ip" => IpAddress,
                    "timestamp" => Timestamp,
                    "email" => EmailAddress,
                    "dnsName" => DnsName,
                    "uri" => Uri,
                    _ => Duration,
                };
                let a = self.check(&args[0])?;
                if a.ty == ty {
                    return Ok(a);
                }
                if a.ty != String {
                    return Err(CompileError::at(
                        pos,
                        format!("{name}() needs a STRING argument, got {}", a.ty),
                    ));
                }
                Ok(Typed::new(Node::Call(Func::Parse(ty), vec![a.node]), ty))
            }
            "conditional" | "conditionalString" if target.is_none() => {
                arity(3)?;
                self.cond(&args[0], &args[1], &args[2], pos)
            }
            "emptyStringMap" if target.is_none() => {
                arity(0)?;
                Ok(Typed::new(
                    Node::Lit(Value::StringMap(Arc::new(mixer_model::StringMap::new()))),
                    StringMap,
                ))
            }
            "toLower" | "reverse" => {
                let f = if name == "toLower" {
                    Func::ToLower
                } else {
                    Func::Reverse
                };
                let s = self.stringlike(unary_subject()?)?;
                Ok(Typed::new(Node::Call(f, vec![s]), String))
            }
            "size" => {
                let a = self.check(unary_subject()?)?;
                if !matches!(a.ty, String | Bytes | StringMap) && !a.ty.is_stringlike() {
                    return Err(CompileError::at(
                        pos,
                        format!("size() cannot take a {}", a.ty),
                    ));
                }
                Ok(Typed::new(Node::Call(Func::Size, vec![a.node]), Int64))
            }
            "int" | "double" | "string" | "dyn" if target.is_none() => {
                arity(1)?;
                let a = self.check(&args[0])?;
                let (f, ty, ok) = match name {
                    "int" => (
                        Func::ToInt,
                        Int64,
                        matches!(a.ty, Int64 | Double | String | Timestamp | Duration),
                    ),
                    "double" => (
                        Func::ToDouble,
                        Double,
                        matches!(a.ty, Int64 | Double | String),
                    ),
                    "string" => (Func::ToString, String, a.ty != StringMap),
                    _ => return Ok(a),
                };
                if !ok {
                    return Err(CompileError::at(
                        pos,
                        format!("{name}() cannot convert a {}", a.ty),
                    ));
                }
                if a.ty == ty {
                    return Ok(a);
                }
                Ok(Typed::new(Node::Call(f, vec![a.node]), ty))
            }
            _ => Err(CompileError::at(
                pos,
                match target {
                    Some(_) => format!("unknown method {name}()"),
                    None => format!("unknown function {name}()"),
                },
            )),
        }
    }

    fn stringlike(&self, s: &Syn) -> Result<Node, CompileError> {
        let t = self.check(s)?;
        if t.ty.is_stringlike() {
            Ok(t.node)
        } else {
            Err(CompileError::at(
                s.pos,
                format!("expected a STRING, got {}", t.ty),
            ))
        }
    }

    fn has(&self, arg: &Syn, pos: usize) -> Result<Typed, CompileError> {
        match self.resolve(arg) {
            Some(Ok(Resolved::Attr(a, _))) => {
                return Ok(Typed::new(Node::HasAttr(a), ValueType::Bool));
            }
            Some(Ok(Resolved::Key(a, k))) => {
                let key = Node::Lit(Value::String(k));
                return Ok(Typed::new(Node::HasKey(a, Box::new(key)), ValueType::Bool));
            }
            Some(Err(e)) => return Err(e),
            None => {}
        }
        if let SynKind::Select(operand, field) = &arg.kind {
            let m = self.check(operand)?;
            self.expect_type(&m, ValueType::StringMap, pos, "has()")?;
            let key = Node::Lit(Value::string(field.as_str()));
            return fold(
                Typed::new(
                    Node::InMap(Box::new(key), Box::new(m.node)),
                    ValueType::Bool,
                ),
                pos,
            );
        }
        Err(CompileError::at(
            pos,
            "has() needs an attribute or a map field, such as has(request.headers.x)",
        ))
    }
}

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
