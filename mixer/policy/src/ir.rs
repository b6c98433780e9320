//! The typed intermediate representation both syntaxes compile to and the evaluator runs.

use std::sync::Arc;

use mixer_model::{AttrId, Value, ValueType};
use regex::Regex;

/// An attribute reference resolved at compile time.
#[derive(Clone, Debug)]
pub(crate) struct AttrRef {
    pub id: AttrId,
    pub name: Arc<str>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

/// How `match(s, pattern)` matches a literal glob.
#[derive(Clone, Debug)]
pub(crate) enum Glob {
    Prefix(Arc<str>),
    Suffix(Arc<str>),
    Exact(Arc<str>),
}

impl Glob {
    pub(crate) fn new(pattern: &str) -> Glob {
        if let Some(p) = pattern.strip_suffix('*') {
            Glob::Prefix(p.into())
        } else if let Some(s) = pattern.strip_prefix('*') {
            Glob::Suffix(s.into())
        } else {
            Glob::Exact(pattern.into())
        }
    }

    pub(crate) fn matches(&self, s: &str) -> bool {
        match self {
            Glob::Prefix(p) => s.starts_with(p.as_ref()),
            Glob::Suffix(p) => s.ends_with(p.as_ref()),
            Glob::Exact(p) => s == p.as_ref(),
        }
    }
}

/// Built-in functions that take evaluated arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Func {
    /// Convert a string to the given type (`ip`, `timestamp`, `duration`, `email`, ...).
    Parse(ValueType),
    /// `match(s, glob)` with a run-time pattern.
    Glob,
    StartsWith,
    EndsWith,
    Contains,
    ToLower,
    Reverse,
    Size,
    ToInt,
    ToDouble,
    ToString,
}

#[derive(Clone, Debug)]
pub(crate) enum Node {
    Lit(Value),
    /// A whole attribute.
    Attr(AttrRef),
    /// A literal key of a `STRING_MAP` attribute.
    AttrKey(AttrRef, Arc<str>),
    /// A computed key of a `STRING_MAP` attribute.
    AttrDynKey(AttrRef, Box<Node>),
    /// Index of a computed map.
    Index(Box<Node>, Box<Node>),
    /// A map key read (`AttrKey`, `AttrDynKey` or `Index`) outside a `|` chain, in the
    /// languages where an absent key reads as `""`, as Istio 1.4's default language (CEXL)
    /// reads it. An absent map is still an error; inside `a | b` an absent key falls through
    /// to the next operand.
    EmptyIfAbsent(Box<Node>),
    /// `has(attr)`: presence of an attribute.
    HasAttr(AttrRef),
    /// `has(m.k)`, `"k" in m` on a map attribute: key presence, false when the map is absent.
    HasKey(AttrRef, Box<Node>),
    /// `"k" in m` on a computed map.
    InMap(Box<Node>, Box<Node>),
    /// `x in [a, b]`.
    InList(Box<Node>, Vec<Node>),
    Not(Box<Node>),
    Neg(Box<Node>),
    /// `&&`; `strict` means CEXL's left-to-right error propagation, otherwise CEL's
    /// commutative error semantics.
    And(Box<Node>, Box<Node>, bool),
    Or(Box<Node>, Box<Node>, bool),
    /// Mixer's `a | b | c`.
    Default(Vec<Node>),
    Cond(Box<Node>, Box<Node>, Box<Node>),
    Cmp(CmpOp, Box<Node>, Box<Node>),
    Arith(ArithOp, Box<Node>, Box<Node>),
    Call(Func, Vec<Node>),
    /// `match(s, "glob")` with a literal pattern.
    GlobLit(Glob, Box<Node>),
    /// A regular expression compiled at load time, applied to the string operand.
    Regex(Arc<Regex>, Box<Node>),
}

impl Node {
    pub(crate) fn children(&self) -> Vec<&Node> {
        match self {
            Node::Lit(_) | Node::Attr(_) | Node::AttrKey(..) | Node::HasAttr(_) => vec![],
            Node::AttrDynKey(_, k) | Node::HasKey(_, k) => vec![k],
            Node::Not(a)
            | Node::Neg(a)
            | Node::EmptyIfAbsent(a)
            | Node::GlobLit(_, a)
            | Node::Regex(_, a) => vec![a],
            Node::Index(a, b)
            | Node::InMap(a, b)
            | Node::And(a, b, _)
            | Node::Or(a, b, _)
            | Node::Cmp(_, a, b)
            | Node::Arith(_, a, b) => vec![a, b],
            Node::InList(a, items) => std::iter::once(a.as_ref()).chain(items.iter()).collect(),
            Node::Default(items) | Node::Call(_, items) => items.iter().collect(),
            Node::Cond(c, a, b) => vec![c, a, b],
        }
    }
}
