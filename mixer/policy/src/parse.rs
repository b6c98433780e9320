//! A hand-written parser for the union of CEL's grammar and Istio Mixer's expression language
//! (CEXL, Go expression syntax): CEL plus Mixer's `|` default operator and backquoted strings.
//!
//! Precedence, loosest first: `?:`, `||`, `&&`, comparisons and `in`, `+ - |`, `* / %`,
//! unary `! -`, then member access, calls and indexing. `|` sits with `+` and `-` as in Go, so
//! `a | b == "x"` is `(a | b) == "x"`.

use crate::error::CompileError;
use crate::syntax::{BinOp, Lit, Syn, SynKind, UnOp};

/// Nesting limit (parentheses, unary operators, calls), to keep recursion bounded.
const MAX_DEPTH: usize = 64;
/// Node limit, to keep the recursive passes over long operator chains bounded.
pub(crate) const MAX_NODES: usize = 2000;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Lit(Lit),
    Punct(&'static str),
    In,
    Eof,
}

struct Lexer<'s> {
    src: &'s str,
    pos: usize,
}

const PUNCTS: [&str; 23] = [
    "&&", "||", "==", "!=", "<=", ">=", "(", ")", "[", "]", "{", "}", ",", ".", "?", ":", "!", "-",
    "+", "*", "/", "%", "|",
];

impl<'s> Lexer<'s> {
    fn rest(&self) -> &'s str {
        self.src.get(self.pos..).unwrap_or("")
    }

    fn next(&mut self) -> Result<(usize, Tok), CompileError> {
        let trimmed = self.rest().trim_start();
        self.pos = self.src.len() - trimmed.len();
        let start = self.pos;
        let Some(c) = trimmed.chars().next() else {
            return Ok((start, Tok::Eof));
        };
        if c == '"' || c == '\'' || c == '`' {
            let (s, len) = lex_string(trimmed, start)?;
            self.pos += len;
            return Ok((start, Tok::Lit(Lit::Str(s))));
        }
        if c.is_ascii_digit() {
            let (lit, len) = lex_number(trimmed, start)?;
            self.pos += len;
            return Ok((start, Tok::Lit(lit)));
        }
        if c.is_alphabetic() || c == '_' {
            let len = trimmed
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(trimmed.len());
            let word = &trimmed[..len];
            self.pos += len;
            return Ok((
                start,
                match word {
                    "true" => Tok::Lit(Lit::Bool(true)),
                    "false" => Tok::Lit(Lit::Bool(false)),
                    "null" => Tok::Lit(Lit::Null),
                    "in" => Tok::In,
                    _ => Tok::Ident(word.to_string()),
                },
            ));
        }
        for p in PUNCTS {
            if trimmed.starts_with(p) {
                self.pos += p.len();
                return Ok((start, Tok::Punct(p)));
            }
        }
        if trimmed.starts_with('<') || trimmed.starts_with('>') {
            let p = if c == '<' { "<" } else { ">" };
            self.pos += 1;
            return Ok((start, Tok::Punct(p)));
        }
        Err(CompileError::at(
            start,
            format!("unexpected character {c:?} at offset {start}"),
        ))
    }
}

fn lex_string(s: &str, start: usize) -> Result<(String, usize), CompileError> {
    let mut chars = s.char_indices();
    let quote = chars.next().map_or('"', |(_, c)| c);
    let mut out = String::new();
    while let Some((i, c)) = chars.next() {
        if c == quote {
            return Ok((out, i + c.len_utf8()));
        }
        if c == '\\' && quote != '`' {
            let Some((j, e)) = chars.next() else { break };
            let simple = match e {
                'n' => Some('\n'),
                't' => Some('\t'),
                'r' => Some('\r'),
                '0' => Some('\0'),
                'a' => Some('\u{7}'),
                'b' => Some('\u{8}'),
                'f' => Some('\u{c}'),
                'v' => Some('\u{b}'),
                '\\' | '"' | '\'' | '`' | '?' => Some(e),
                _ => None,
            };
            if let Some(ch) = simple {
                out.push(ch);
                continue;
            }
            let digits = match e {
                'x' => 2,
                'u' => 4,
                'U' => 8,
                _ => {
                    return Err(CompileError::at(
                        start + j,
                        format!("invalid escape \\{e} in string literal"),
                    ));
                }
            };
            let hex: String = (0..digits)
                .filter_map(|_| chars.next().map(|(_, h)| h))
                .collect();
            let ch = u32::from_str_radix(&hex, 16)
                .ok()
                .filter(|_| hex.len() == digits)
                .and_then(char::from_u32)
                .ok_or_else(|| CompileError::at(start + j, "invalid escape in string literal"))?;
            out.push(ch);
            continue;
        }
        if c == '\n' && quote != '`' {
            break;
        }
        out.push(c);
    }
    Err(CompileError::at(start, "unterminated string literal"))
}

fn lex_number(s: &str, start: usize) -> Result<(Lit, usize), CompileError> {
    let bad = |what: &str| CompileError::at(start, format!("invalid number literal {what:?}"));
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        let len = hex
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(hex.len());
        let text = &hex[..len];
        let v = i64::from_str_radix(text, 16).map_err(|_| bad(text))?;
        return Ok((Lit::Int(v), 2 + len));
    }
    let mut len = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let mut is_float = false;
    let rest = &s[len..];
    if rest.starts_with('.') && rest[1..].starts_with(|c: char| c.is_ascii_digit()) {
        is_float = true;
        len += 1;
        len += s[len..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(s.len() - len);
    }
    let rest = &s[len..];
    if rest.starts_with(['e', 'E']) {
        let mut exp = 1;
        if rest[1..].starts_with(['+', '-']) {
            exp += 1;
        }
        let digits = rest[exp..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len() - exp);
        if digits > 0 {
            is_float = true;
            len += exp + digits;
        }
    }
    let text = &s[..len];
    if is_float {
        let v: f64 = text.parse().map_err(|_| bad(text))?;
        return Ok((Lit::Double(v), len));
    }
    if s[len..].starts_with(['u', 'U']) {
        let v: u64 = text.parse().map_err(|_| bad(text))?;
        return Ok((Lit::UInt(v), len + 1));
    }
    match text.parse::<i64>() {
        Ok(v) => Ok((Lit::Int(v), len)),
        // Too big for INT64: only valid as the operand of a minus (i64::MIN) or after a check.
        Err(_) => Ok((Lit::UInt(text.parse().map_err(|_| bad(text))?), len)),
    }
}

/// Parses `src` in the union grammar.
pub(crate) fn parse(src: &str) -> Result<Syn, CompileError> {
    let mut p = Parser {
        lexer: Lexer { src, pos: 0 },
        tok: Tok::Eof,
        tok_pos: 0,
        depth: 0,
        nodes: 0,
    };
    p.advance()?;
    let e = p.expr()?;
    if p.tok != Tok::Eof {
        return Err(p.unexpected("end of expression"));
    }
    Ok(e)
}

struct Parser<'s> {
    lexer: Lexer<'s>,
    tok: Tok,
    tok_pos: usize,
    depth: usize,
    nodes: usize,
}

impl Parser<'_> {
    fn advance(&mut self) -> Result<(), CompileError> {
        let (pos, tok) = self.lexer.next()?;
        self.tok = tok;
        self.tok_pos = pos;
        Ok(())
    }

    fn unexpected(&self, wanted: &str) -> CompileError {
        let found = match &self.tok {
            Tok::Ident(s) => format!("identifier {s}"),
            Tok::Lit(l) => format!("literal {l:?}"),
            Tok::Punct(p) => format!("{p:?}"),
            Tok::In => "\"in\"".to_string(),
            Tok::Eof => "end of input".to_string(),
        };
        CompileError::at(
            self.tok_pos,
            format!(
                "expected {wanted}, found {found} at offset {}",
                self.tok_pos
            ),
        )
    }

    fn eat(&mut self, p: &str) -> Result<bool, CompileError> {
        if matches!(self.tok, Tok::Punct(q) if q == p) {
            self.advance()?;
            return Ok(true);
        }
        Ok(false)
    }

    fn expect(&mut self, p: &str) -> Result<(), CompileError> {
        if self.eat(p)? {
            Ok(())
        } else {
            Err(self.unexpected(&format!("{p:?}")))
        }
    }

    fn node(&mut self, pos: usize, kind: SynKind) -> Result<Syn, CompileError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(CompileError::at(pos, "expression is too large"));
        }
        Ok(Syn::new(pos, kind))
    }

    fn enter(&mut self) -> Result<(), CompileError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(CompileError::at(
                self.tok_pos,
                "expression is nested too deeply",
            ));
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<Syn, CompileError> {
        self.enter()?;
        let start = self.tok_pos;
        let cond = self.binary(0)?;
        let out = if self.eat("?")? {
            let then = self.expr()?;
            self.expect(":")?;
            let other = self.expr()?;
            self.node(
                start,
                SynKind::Cond(Box::new(cond), Box::new(then), Box::new(other)),
            )?
        } else {
            cond
        };
        self.depth -= 1;
        Ok(out)
    }

    fn binop(&self) -> Option<(BinOp, u8)> {
        Some(match &self.tok {
            Tok::In => (BinOp::In, 3),
            Tok::Punct(p) => match *p {
                "||" => (BinOp::Or, 1),
                "&&" => (BinOp::And, 2),
                "==" => (BinOp::Eq, 3),
                "!=" => (BinOp::Ne, 3),
                "<" => (BinOp::Lt, 3),
                "<=" => (BinOp::Le, 3),
                ">" => (BinOp::Gt, 3),
                ">=" => (BinOp::Ge, 3),
                "+" => (BinOp::Add, 4),
                "-" => (BinOp::Sub, 4),
                "|" => (BinOp::Default, 4),
                "*" => (BinOp::Mul, 5),
                "/" => (BinOp::Div, 5),
                "%" => (BinOp::Rem, 5),
                _ => return None,
            },
            _ => return None,
        })
    }

    /// Precedence climbing; all binary operators are left-associative.
    fn binary(&mut self, min: u8) -> Result<Syn, CompileError> {
        let mut lhs = self.unary()?;
        while let Some((op, prec)) = self.binop() {
            if prec <= min {
                break;
            }
            let pos = self.tok_pos;
            self.advance()?;
            let rhs = self.binary(prec)?;
            lhs = self.node(pos, SynKind::Binary(op, Box::new(lhs), Box::new(rhs)))?;
        }
        Ok(lhs)
    }

    fn unary(&mut self) -> Result<Syn, CompileError> {
        let pos = self.tok_pos;
        let op = match self.tok {
            Tok::Punct("!") => UnOp::Not,
            Tok::Punct("-") => UnOp::Neg,
            _ => return self.postfix(),
        };
        self.advance()?;
        self.enter()?;
        // Fold a minus into a number literal so that i64::MIN is writable.
        let operand = if op == UnOp::Neg
            && matches!(
                self.tok,
                Tok::Lit(Lit::Int(_) | Lit::UInt(_) | Lit::Double(_))
            ) {
            self.postfix()?
        } else {
            self.unary()?
        };
        self.depth -= 1;
        match (op, &operand.kind) {
            (UnOp::Neg, SynKind::Lit(Lit::Int(i))) => {
                let v = i
                    .checked_neg()
                    .ok_or_else(|| CompileError::at(pos, "integer literal overflows"))?;
                self.node(pos, SynKind::Lit(Lit::Int(v)))
            }
            (UnOp::Neg, SynKind::Lit(Lit::UInt(u))) if *u == 1u64 << 63 => {
                self.node(pos, SynKind::Lit(Lit::Int(i64::MIN)))
            }
            (UnOp::Neg, SynKind::Lit(Lit::Double(d))) => {
                self.node(pos, SynKind::Lit(Lit::Double(-d)))
            }
            _ => self.node(pos, SynKind::Unary(op, Box::new(operand))),
        }
    }

    fn postfix(&mut self) -> Result<Syn, CompileError> {
        let mut e = self.primary()?;
        loop {
            let pos = self.tok_pos;
            if self.eat(".")? {
                let Tok::Ident(name) = self.tok.clone() else {
                    return Err(self.unexpected("a field or method name after \".\""));
                };
                self.advance()?;
                if self.eat("(")? {
                    let args = self.args(")")?;
                    e = self.node(
                        pos,
                        SynKind::Call {
                            target: Some(Box::new(e)),
                            name,
                            args,
                        },
                    )?;
                } else {
                    e = self.node(pos, SynKind::Select(Box::new(e), name))?;
                }
            } else if self.eat("[")? {
                self.enter()?;
                let index = self.expr()?;
                self.depth -= 1;
                self.expect("]")?;
                e = self.node(pos, SynKind::Index(Box::new(e), Box::new(index)))?;
            } else {
                return Ok(e);
            }
        }
    }

    fn args(&mut self, close: &str) -> Result<Vec<Syn>, CompileError> {
        self.enter()?;
        let mut args = Vec::new();
        if !self.eat(close)? {
            loop {
                args.push(self.expr()?);
                if self.eat(close)? {
                    break;
                }
                self.expect(",")?;
                // CEL allows a trailing comma in lists.
                if self.eat(close)? {
                    break;
                }
            }
        }
        self.depth -= 1;
        Ok(args)
    }

    fn primary(&mut self) -> Result<Syn, CompileError> {
        let pos = self.tok_pos;
        match self.tok.clone() {
            Tok::Lit(l) => {
                self.advance()?;
                self.node(pos, SynKind::Lit(l))
            }
            Tok::Ident(name) => {
                self.advance()?;
                if self.eat("(")? {
                    let args = self.args(")")?;
                    return self.node(
                        pos,
                        SynKind::Call {
                            target: None,
                            name,
                            args,
                        },
                    );
                }
                self.node(pos, SynKind::Ident(name))
            }
            Tok::Punct("(") => {
                self.advance()?;
                let e = self.expr()?;
                self.expect(")")?;
                Ok(e)
            }
            Tok::Punct("[") => {
                self.advance()?;
                let items = self.args("]")?;
                self.node(pos, SynKind::List(items))
            }
            Tok::Punct("{") => Err(CompileError::at(pos, "map literals are not supported")),
            _ => Err(self.unexpected("an operand")),
        }
    }
}
