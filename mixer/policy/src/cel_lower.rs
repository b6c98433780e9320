//! `Syntax::Cel`: parse with the `cel` crate's parser and lower its AST to our syntax tree.

use cel::common::ast::{Expr, IdedExpr, LiteralValue, SourceInfo, operators};

use crate::error::CompileError;
use crate::parse::MAX_NODES;
use crate::syntax::{BinOp, Lit, Syn, SynKind, UnOp};

/// Parses CEL source with the `cel` crate.
pub(crate) fn parse(src: &str) -> Result<Syn, CompileError> {
    let parsed =
        std::panic::catch_unwind(|| cel::parser::Parser::new().parse_with_source_info(src));
    let (expr, info) = match parsed {
        Ok(Ok(r)) => r,
        Ok(Err(errs)) => {
            let first = errs.errors.first();
            let message = first.map_or_else(
                || "syntax error".to_string(),
                |e| format!("syntax error at {}:{}: {}", e.pos.0, e.pos.1, e.msg),
            );
            let offset = first.and_then(|e| line_col_to_offset(src, e.pos.0, e.pos.1));
            return Err(CompileError::new(message, offset));
        }
        Err(_) => {
            return Err(CompileError::new(
                "syntax error: the CEL parser failed",
                None,
            ));
        }
    };
    let mut lower = Lower {
        info: &info,
        nodes: 0,
    };
    lower.expr(&expr)
}

fn line_col_to_offset(src: &str, line: isize, col: isize) -> Option<usize> {
    let line = usize::try_from(line).ok()?.checked_sub(1)?;
    let col = usize::try_from(col).ok()?;
    let start: usize = src.split_inclusive('\n').take(line).map(str::len).sum();
    Some((start + col).min(src.len()))
}

struct Lower<'i> {
    info: &'i SourceInfo,
    nodes: usize,
}

impl Lower<'_> {
    fn pos(&self, e: &IdedExpr) -> usize {
        self.info
            .offset_for(e.id)
            .map_or(0, |(start, _)| start as usize)
    }

    fn boxed(&mut self, e: &IdedExpr) -> Result<Box<Syn>, CompileError> {
        self.expr(e).map(Box::new)
    }

    fn expr(&mut self, e: &IdedExpr) -> Result<Syn, CompileError> {
        let pos = self.pos(e);
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(CompileError::at(pos, "expression is too large"));
        }
        let kind = match &e.expr {
            Expr::Literal(l) => SynKind::Lit(match l {
                LiteralValue::Boolean(b) => Lit::Bool(*b.inner()),
                LiteralValue::Int(i) => Lit::Int(*i.inner()),
                LiteralValue::UInt(u) => Lit::UInt(*u.inner()),
                LiteralValue::Double(d) => Lit::Double(*d.inner()),
                LiteralValue::String(s) => Lit::Str(s.inner().to_string()),
                LiteralValue::Bytes(b) => Lit::Bytes(b.inner().to_vec()),
                LiteralValue::Null => Lit::Null,
            }),
            Expr::Ident(name) => SynKind::Ident(name.clone()),
            Expr::Select(sel) => {
                let operand = self.boxed(&sel.operand)?;
                let select = Syn::new(pos, SynKind::Select(operand, sel.field.clone()));
                if sel.test {
                    SynKind::Call {
                        target: None,
                        name: "has".into(),
                        args: vec![select],
                    }
                } else {
                    return Ok(select);
                }
            }
            Expr::List(list) => {
                if !list.optional_indices.is_empty() {
                    return Err(CompileError::at(
                        pos,
                        "optional list elements are not supported",
                    ));
                }
                SynKind::List(
                    list.elements
                        .iter()
                        .map(|x| self.expr(x))
                        .collect::<Result<_, _>>()?,
                )
            }
            Expr::Call(call) => {
                return self.call(pos, &call.func_name, call.target.as_deref(), &call.args);
            }
            Expr::Map(_) => SynKind::Unsupported("map literals".into()),
            Expr::Struct(_) => SynKind::Unsupported("message literals".into()),
            Expr::Comprehension(_) => SynKind::Unsupported(
                "comprehension macros (all, exists, exists_one, map, filter)".into(),
            ),
            Expr::Unspecified => SynKind::Unsupported("this expression".into()),
        };
        Ok(Syn::new(pos, kind))
    }

    fn call(
        &mut self,
        pos: usize,
        name: &str,
        target: Option<&IdedExpr>,
        args: &[IdedExpr],
    ) -> Result<Syn, CompileError> {
        let binop = match name {
            operators::LOGICAL_AND => Some(BinOp::And),
            operators::LOGICAL_OR => Some(BinOp::Or),
            operators::EQUALS => Some(BinOp::Eq),
            operators::NOT_EQUALS => Some(BinOp::Ne),
            operators::LESS => Some(BinOp::Lt),
            operators::LESS_EQUALS => Some(BinOp::Le),
            operators::GREATER => Some(BinOp::Gt),
            operators::GREATER_EQUALS => Some(BinOp::Ge),
            operators::IN => Some(BinOp::In),
            operators::ADD => Some(BinOp::Add),
            operators::SUBSTRACT => Some(BinOp::Sub),
            operators::MULTIPLY => Some(BinOp::Mul),
            operators::DIVIDE => Some(BinOp::Div),
            operators::MODULO => Some(BinOp::Rem),
            _ => None,
        };
        let kind = match (binop, target, args) {
            (Some(op), None, [a, b]) => SynKind::Binary(op, self.boxed(a)?, self.boxed(b)?),
            (None, None, [a]) if name == operators::LOGICAL_NOT => {
                SynKind::Unary(UnOp::Not, self.boxed(a)?)
            }
            (None, None, [a]) if name == operators::NEGATE => {
                let a = self.expr(a)?;
                match a.kind {
                    SynKind::Lit(Lit::Int(i)) => match i.checked_neg() {
                        Some(n) => SynKind::Lit(Lit::Int(n)),
                        None => return Err(CompileError::at(pos, "integer literal overflows")),
                    },
                    SynKind::Lit(Lit::Double(d)) => SynKind::Lit(Lit::Double(-d)),
                    _ => SynKind::Unary(UnOp::Neg, Box::new(a)),
                }
            }
            (None, None, [m, k]) if name == operators::INDEX => {
                SynKind::Index(self.boxed(m)?, self.boxed(k)?)
            }
            (None, None, [c, a, b]) if name == operators::CONDITIONAL => {
                SynKind::Cond(self.boxed(c)?, self.boxed(a)?, self.boxed(b)?)
            }
            _ if name.starts_with('_')
                || name.starts_with('@')
                || name.starts_with('!')
                || name.starts_with('-') =>
            {
                return Err(CompileError::at(
                    pos,
                    format!("operator {name} is not supported"),
                ));
            }
            _ => SynKind::Call {
                target: match target {
                    Some(t) => Some(self.boxed(t)?),
                    None => None,
                },
                name: name.to_string(),
                args: args
                    .iter()
                    .map(|a| self.expr(a))
                    .collect::<Result<_, _>>()?,
            },
        };
        Ok(Syn::new(pos, kind))
    }
}
