//! `Syntax::Cel`: parse with the `cel` crate's parser and lower its AST to our syntax tree.

use cel::common::ast::{Expr, IdedExpr, LiteralValue, SourceInfo, operators};

use crate::error::CompileError;
use crate::parse::MAX_NODES;
use crate::syntax::{BinOp, Lit, Syn, SynKind, UnOp};

/// Deepest CEL nesting accepted (brackets and conditionals), as `parse.rs` for Mixer's own
/// syntaxes.
const MAX_DEPTH: usize = 64;

/// Nesting past which the `cel` crate's parser runs on a thread of its own with
/// [`PARSER_STACK`]: it recurses through about ten grammar rules per level, with frames of
/// over 100 KiB a level in an unoptimised build, so 64 levels overflowed an 8 MiB stack
/// (found by the `expression_compile` fuzz target) and far fewer a 2 MiB one (tokio's
/// blocking threads, where reloads run). A stack overflow aborts the process: a config typo
/// must not.
const INLINE_DEPTH: usize = 8;

/// The stack of the parser's own thread (reserved, committed only as it is used).
const PARSER_STACK: usize = 64 << 20;

/// Parses CEL source with the `cel` crate.
pub(crate) fn parse(src: &str) -> Result<Syn, CompileError> {
    let (depth, brackets) = nesting(src);
    if depth > MAX_DEPTH || brackets > MAX_DEPTH * 6 {
        return Err(CompileError::new(
            format!("expression nested too deeply (at most {MAX_DEPTH} levels)"),
            None,
        ));
    }
    let run =
        || std::panic::catch_unwind(|| cel::parser::Parser::new().parse_with_source_info(src));
    let parsed = if brackets <= INLINE_DEPTH {
        run()
    } else {
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("cel-parser".into())
                .stack_size(PARSER_STACK)
                .spawn_scoped(scope, run)
                .map_err(|e| CompileError::new(format!("cannot start the CEL parser: {e}"), None))
                .map(|handle| handle.join().unwrap_or_else(Err))
        })?
    };
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

/// How deeply `src` nests as the CEL parser recurses: open brackets plus conditionals (each
/// `?` nests its branches). The first figure skips quoted text, as the parser does; the
/// second counts every bracket, quoted or not, so that text this scan took for a string
/// but the parser does not can never hide nesting from the choice of stack.
fn nesting(src: &str) -> (usize, usize) {
    let bytes = src.as_bytes();
    let (mut depth, mut deepest, mut conditionals) = (0usize, 0usize, 0usize);
    let (mut all, mut all_deepest) = (0usize, 0usize);
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'(' | b'[' | b'{' => {
                all += 1;
                all_deepest = all_deepest.max(all + conditionals);
            }
            b')' | b']' | b'}' => all = all.saturating_sub(1),
            _ => {}
        }
        match b {
            b'"' | b'\'' => {
                let raw = i > 0 && matches!(bytes[i - 1], b'r' | b'R');
                let triple = bytes[i..].starts_with(&[b, b, b]);
                let quote_len = if triple { 3 } else { 1 };
                let mut j = i + quote_len;
                while j < bytes.len() {
                    if !raw && bytes[j] == b'\\' {
                        j += 2;
                        continue;
                    }
                    if bytes[j] == b && (!triple || bytes[j..].starts_with(&[b, b, b])) {
                        break;
                    }
                    // Brackets inside the quotes still count for the second figure.
                    match bytes[j] {
                        b'(' | b'[' | b'{' => {
                            all += 1;
                            all_deepest = all_deepest.max(all + conditionals);
                        }
                        b')' | b']' | b'}' => all = all.saturating_sub(1),
                        _ => {}
                    }
                    j += 1;
                }
                i = j + quote_len;
                continue;
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth + conditionals);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b'?' => {
                conditionals += 1;
                deepest = deepest.max(depth + conditionals);
                all_deepest = all_deepest.max(all + conditionals);
            }
            _ => {}
        }
        i += 1;
    }
    (deepest, all_deepest)
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
