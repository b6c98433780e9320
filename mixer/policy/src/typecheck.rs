//! Type checking: lowers the syntax tree to the typed IR against a vocabulary, resolving
//! attribute names, converting string literals where a typed value is expected, compiling
//! regular expressions and folding constants.

use std::sync::Arc;

use mixer_model::{Value, ValueType, Vocabulary};

mod calls;
mod convert;

use crate::Syntax;

use crate::error::CompileError;
use crate::ir::{ArithOp, AttrRef, CmpOp, Node};
use crate::syntax::{BinOp, Syn, SynKind, UnOp};
use convert::literal;
pub(crate) use convert::{coerce, fold, unify};

/// A lowered node with its static type.
#[derive(Clone, Debug)]
pub(crate) struct Typed {
    pub node: Node,
    pub ty: ValueType,
}

impl Typed {
    pub(crate) fn new(node: Node, ty: ValueType) -> Typed {
        Typed { node, ty }
    }
}

/// What a dotted name resolves to.
pub(crate) enum Resolved {
    Attr(AttrRef, ValueType),
    Key(AttrRef, Arc<str>),
}

pub(crate) struct Checker<'v> {
    pub vocab: &'v Vocabulary,
    pub syntax: Syntax,
}

impl Checker<'_> {
    /// Resolves an identifier or a chain of selections to the longest declared attribute name;
    /// `None` when `syn` is not such a chain.
    pub(crate) fn resolve(&self, syn: &Syn) -> Option<Result<Resolved, CompileError>> {
        let segs = syn.dotted_segments()?;
        let pos = syn.chain_start();
        for n in (1..=segs.len()).rev() {
            let name = segs[..n].join(".");
            let Some(id) = self.vocab.lookup(&name) else {
                continue;
            };
            let ty = self.vocab.value_type(id).unwrap_or(ValueType::String);
            let attr = AttrRef {
                id,
                name: name.as_str().into(),
            };
            let rest = &segs[n..];
            return Some(match rest {
                [] => Ok(Resolved::Attr(attr, ty)),
                [key] if ty == ValueType::StringMap => Ok(Resolved::Key(attr, (*key).into())),
                _ if ty == ValueType::StringMap => Err(CompileError::at(
                    pos,
                    format!(
                        "cannot select {:?} from STRING_MAP attribute {name:?} (use {name}[{:?}])",
                        rest.join("."),
                        rest.join(".")
                    ),
                )),
                _ => Err(CompileError::at(
                    pos,
                    format!(
                        "attribute {name:?} of type {ty} has no field {:?}",
                        rest.join(".")
                    ),
                )),
            });
        }
        let full = segs.join(".");
        for n in (1..=segs.len()).rev() {
            let prefix = segs[..n].join(".");
            if let Some(s) = self.vocab.suggest(&prefix) {
                return Some(Err(CompileError::at(
                    pos,
                    format!("unknown attribute {prefix:?} (did you mean {s}?)"),
                )));
            }
        }
        Some(Err(CompileError::at(
            pos,
            format!("unknown attribute {full:?}"),
        )))
    }

    pub(crate) fn check(&self, syn: &Syn) -> Result<Typed, CompileError> {
        let pos = syn.pos;
        match &syn.kind {
            SynKind::Lit(lit) => literal(lit, pos),
            SynKind::Ident(_) | SynKind::Select(..) if syn.dotted_segments().is_some() => {
                match self.resolve(syn) {
                    Some(Ok(Resolved::Attr(a, ty))) => Ok(Typed::new(Node::Attr(a), ty)),
                    Some(Ok(Resolved::Key(a, k))) => Ok(Typed::new(
                        self.key_read(Node::AttrKey(a, k)),
                        ValueType::String,
                    )),
                    Some(Err(e)) => Err(e),
                    None => Err(CompileError::at(pos, "cannot resolve name")),
                }
            }
            SynKind::Select(operand, field) => {
                let m = self.check(operand)?;
                self.expect_type(&m, ValueType::StringMap, operand.pos, "field selection")?;
                let key = Node::Lit(Value::string(field.as_str()));
                Ok(Typed::new(
                    self.key_read(Node::Index(Box::new(m.node), Box::new(key))),
                    ValueType::String,
                ))
            }
            SynKind::Ident(_) => Err(CompileError::at(pos, "cannot resolve name")),
            SynKind::Index(m, k) => self.index(m, k, pos),
            SynKind::Call { target, name, args } => {
                let t = self.call(pos, target.as_deref(), name, args)?;
                fold(t, pos)
            }
            SynKind::Unary(op, a) => {
                let a = self.check(a)?;
                let t = match op {
                    UnOp::Not => {
                        self.expect_type(&a, ValueType::Bool, pos, "operator !")?;
                        Typed::new(Node::Not(Box::new(a.node)), ValueType::Bool)
                    }
                    UnOp::Neg => {
                        if !matches!(
                            a.ty,
                            ValueType::Int64 | ValueType::Double | ValueType::Duration
                        ) {
                            return Err(CompileError::at(
                                pos,
                                format!("operator - cannot negate a {}", a.ty),
                            ));
                        }
                        Typed::new(Node::Neg(Box::new(a.node)), a.ty)
                    }
                };
                fold(t, pos)
            }
            SynKind::Binary(op, a, b) => {
                let t = self.binary(*op, a, b, pos)?;
                fold(t, pos)
            }
            SynKind::Cond(c, a, b) => self.cond(c, a, b, pos),
            SynKind::List(_) => Err(CompileError::at(pos, "a list is only allowed after \"in\"")),
            SynKind::Unsupported(what) => {
                Err(CompileError::at(pos, format!("{what} are not supported")))
            }
        }
    }

    pub(crate) fn expect_type(
        &self,
        t: &Typed,
        want: ValueType,
        pos: usize,
        what: &str,
    ) -> Result<(), CompileError> {
        if t.ty == want {
            Ok(())
        } else {
            Err(CompileError::at(
                pos,
                format!("{what} needs a {want} operand, got {}", t.ty),
            ))
        }
    }

    pub(crate) fn cond(
        &self,
        c: &Syn,
        a: &Syn,
        b: &Syn,
        pos: usize,
    ) -> Result<Typed, CompileError> {
        let c = self.check(c)?;
        self.expect_type(&c, ValueType::Bool, pos, "a conditional")?;
        let (mut nodes, ty) = unify(
            vec![self.check(a)?, self.check(b)?],
            pos,
            "the branches of a conditional",
        )?;
        let (Some(b), Some(a)) = (nodes.pop(), nodes.pop()) else {
            return Err(CompileError::at(pos, "malformed conditional"));
        };
        fold(
            Typed::new(Node::Cond(Box::new(c.node), Box::new(a), Box::new(b)), ty),
            pos,
        )
    }

    fn index(&self, m: &Syn, k: &Syn, pos: usize) -> Result<Typed, CompileError> {
        let key = self.check(k)?;
        if !key.ty.is_stringlike() {
            return Err(CompileError::at(
                k.pos,
                format!("a map key must be a STRING, got {}", key.ty),
            ));
        }
        if let Some(Ok(Resolved::Attr(attr, ty))) = self.resolve(m) {
            if ty != ValueType::StringMap {
                return Err(CompileError::at(
                    pos,
                    format!("cannot index attribute {:?} of type {ty}", attr.name),
                ));
            }
            let node = match key.node {
                Node::Lit(v) => Node::AttrKey(attr, v.as_str().unwrap_or("").into()),
                other => Node::AttrDynKey(attr, Box::new(other)),
            };
            return Ok(Typed::new(self.key_read(node), ValueType::String));
        }
        let map = self.check(m)?;
        self.expect_type(&map, ValueType::StringMap, pos, "indexing")?;
        Ok(Typed::new(
            self.key_read(Node::Index(Box::new(map.node), Box::new(key.node))),
            ValueType::String,
        ))
    }

    /// A map key read, as this language reads an absent key: CEL fails (`no such key`, as
    /// cel-go does in Istio's `CEL` and `COMPAT` modes); CEXL, Istio 1.4's default, reads
    /// `""` (istio/istio release-1.4 `mixer/pkg/il/interpreter`, the `ANLookup` and `NLookup`
    /// instructions its compiler emits for `m["k"]`). Our COMPAT is the default language for
    /// documents without an annotation, which Istio 1.4 read as CEXL, so it reads `""` too.
    fn key_read(&self, node: Node) -> Node {
        match self.syntax {
            Syntax::Cel => node,
            Syntax::Cexl | Syntax::Compat => Node::EmptyIfAbsent(Box::new(node)),
        }
    }

    fn binary(&self, op: BinOp, a: &Syn, b: &Syn, pos: usize) -> Result<Typed, CompileError> {
        let strict = self.syntax == Syntax::Cexl;
        match op {
            BinOp::And | BinOp::Or => {
                let (l, r) = (self.check(a)?, self.check(b)?);
                self.expect_type(
                    &l,
                    ValueType::Bool,
                    a.pos,
                    &format!("operator {}", op.symbol()),
                )?;
                self.expect_type(
                    &r,
                    ValueType::Bool,
                    b.pos,
                    &format!("operator {}", op.symbol()),
                )?;
                let (l, r) = (Box::new(l.node), Box::new(r.node));
                let node = if op == BinOp::And {
                    Node::And(l, r, strict)
                } else {
                    Node::Or(l, r, strict)
                };
                Ok(Typed::new(node, ValueType::Bool))
            }
            BinOp::Default => {
                let mut operands = Vec::new();
                flatten_default(a, &mut operands);
                flatten_default(b, &mut operands);
                let typed = operands
                    .into_iter()
                    .map(|s| self.check(s))
                    .collect::<Result<Vec<_>, _>>()?;
                let (nodes, ty) = unify(typed, pos, "the operands of |")?;
                // In `m["k"] | b` an absent key falls through to `b` (the `TLookup` Istio's
                // compiler emits there), so an operand does not read it as "".
                let nodes = nodes
                    .into_iter()
                    .map(|n| match n {
                        Node::EmptyIfAbsent(inner) => *inner,
                        other => other,
                    })
                    .collect();
                Ok(Typed::new(Node::Default(nodes), ty))
            }
            BinOp::In => self.membership(a, b, pos),
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                let (l, r) = (self.check(a)?, self.check(b)?);
                let (lty, rty) = (l.ty, r.ty);
                let numeric = |t: ValueType| matches!(t, ValueType::Int64 | ValueType::Double);
                let (l, r) = if numeric(l.ty) && numeric(r.ty) {
                    (l.node, r.node)
                } else {
                    let what = format!("the operands of {}", op.symbol());
                    let (mut nodes, _) =
                        unify(vec![l.clone(), r.clone()], pos, &what).map_err(|_| {
                            CompileError::at(
                                pos,
                                format!(
                                    "cannot compare {} with {} using {}",
                                    l.ty,
                                    r.ty,
                                    op.symbol()
                                ),
                            )
                        })?;
                    let (Some(r), Some(l)) = (nodes.pop(), nodes.pop()) else {
                        return Err(CompileError::at(pos, "malformed comparison"));
                    };
                    (l, r)
                };
                let cmp = match op {
                    BinOp::Eq => CmpOp::Eq,
                    BinOp::Ne => CmpOp::Ne,
                    BinOp::Lt => CmpOp::Lt,
                    BinOp::Le => CmpOp::Le,
                    BinOp::Gt => CmpOp::Gt,
                    _ => CmpOp::Ge,
                };
                let ordered = [
                    ValueType::Int64,
                    ValueType::Double,
                    ValueType::String,
                    ValueType::Timestamp,
                    ValueType::Duration,
                ];
                let ty = if lty == ValueType::String { rty } else { lty };
                if !matches!(cmp, CmpOp::Eq | CmpOp::Ne) && !ordered.contains(&ty) {
                    return Err(CompileError::at(
                        pos,
                        format!("operator {} cannot order {ty} values", op.symbol()),
                    ));
                }
                Ok(Typed::new(
                    Node::Cmp(cmp, Box::new(l), Box::new(r)),
                    ValueType::Bool,
                ))
            }
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem => {
                self.arith(op, a, b, pos)
            }
        }
    }

    fn membership(&self, a: &Syn, b: &Syn, pos: usize) -> Result<Typed, CompileError> {
        let elem = self.check(a)?;
        if let SynKind::List(items) = &b.kind {
            let mut typed = vec![elem];
            for item in items {
                typed.push(self.check(item)?);
            }
            let (mut nodes, _) = unify(typed, pos, "the operands of in")?;
            let elem = nodes.remove(0);
            return Ok(Typed::new(
                Node::InList(Box::new(elem), nodes),
                ValueType::Bool,
            ));
        }
        if !elem.ty.is_stringlike() {
            return Err(CompileError::at(
                a.pos,
                format!("the key of \"in\" must be a STRING, got {}", elem.ty),
            ));
        }
        if let Some(Ok(Resolved::Attr(attr, ty))) = self.resolve(b) {
            if ty != ValueType::StringMap {
                return Err(CompileError::at(
                    b.pos,
                    format!("\"in\" needs a STRING_MAP or a list, got {ty}"),
                ));
            }
            return Ok(Typed::new(
                Node::HasKey(attr, Box::new(elem.node)),
                ValueType::Bool,
            ));
        }
        let map = self.check(b)?;
        self.expect_type(&map, ValueType::StringMap, b.pos, "\"in\"")?;
        Ok(Typed::new(
            Node::InMap(Box::new(elem.node), Box::new(map.node)),
            ValueType::Bool,
        ))
    }

    fn arith(&self, op: BinOp, a: &Syn, b: &Syn, pos: usize) -> Result<Typed, CompileError> {
        use ValueType::{Double, Duration, Int64, String, Timestamp};
        let (mut l, mut r) = (self.check(a)?, self.check(b)?);
        // "1s" next to a time value is a duration, as Mixer converted duration literals.
        let (lty, rty) = (l.ty, r.ty);
        for (x, y) in [(&mut l, rty), (&mut r, lty)] {
            if matches!(y, Timestamp | Duration) && x.ty == String {
                *x = Typed::new(coerce(x.clone(), Duration, pos)?, Duration);
            }
            if y == Double && x.ty == Int64 && matches!(x.node, Node::Lit(_)) {
                *x = Typed::new(coerce(x.clone(), Double, pos)?, Double);
            }
        }
        let aop = match op {
            BinOp::Add => ArithOp::Add,
            BinOp::Sub => ArithOp::Sub,
            BinOp::Mul => ArithOp::Mul,
            BinOp::Div => ArithOp::Div,
            _ => ArithOp::Rem,
        };
        let ty = match (aop, l.ty, r.ty) {
            (_, Int64, Int64) => Int64,
            (ArithOp::Add | ArithOp::Sub | ArithOp::Mul | ArithOp::Div, Double, Double) => Double,
            (ArithOp::Add, String, String) => String,
            (ArithOp::Add | ArithOp::Sub, Duration, Duration) => Duration,
            (ArithOp::Add | ArithOp::Sub, Timestamp, Duration) => Timestamp,
            (ArithOp::Add, Duration, Timestamp) => Timestamp,
            (ArithOp::Sub, Timestamp, Timestamp) => Duration,
            _ => {
                return Err(CompileError::at(
                    pos,
                    format!(
                        "operator {} cannot combine {} and {}",
                        op.symbol(),
                        l.ty,
                        r.ty
                    ),
                ));
            }
        };
        Ok(Typed::new(
            Node::Arith(aop, Box::new(l.node), Box::new(r.node)),
            ty,
        ))
    }
}

fn flatten_default<'s>(s: &'s Syn, out: &mut Vec<&'s Syn>) {
    match &s.kind {
        SynKind::Binary(BinOp::Default, a, b) => {
            flatten_default(a, out);
            flatten_default(b, out);
        }
        _ => out.push(s),
    }
}
