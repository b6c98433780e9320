//! Type checking of calls to the built-in functions: Mixer's (`match`, `ip`, `email`,
//! `dnsName`, `uri`, `timestamp`, `conditional`, `emptyStringMap`, `toLower`, `reverse`,
//! `"re".matches(s)`, `startsWith`, `endsWith`) and CEL's (`matches`, `contains`, `size`, `int`,
//! `double`, `string`, `duration`, `timestamp`, `has`, `dyn`). Their evaluation is in
//! `functions.rs`.

use std::sync::Arc;

use mixer_model::{Value, ValueType};
use regex::Regex;

use super::{Checker, Resolved, Typed, fold};
use crate::Syntax;
use crate::error::CompileError;
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
