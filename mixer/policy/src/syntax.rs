//! The surface syntax tree both front ends (the CEL parser and the union-grammar parser)
//! produce. It is untyped; `check` turns it into the typed IR.

/// A literal as written.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Lit {
    Str(String),
    Int(i64),
    UInt(u64),
    Double(f64),
    Bool(bool),
    Bytes(Vec<u8>),
    Null,
}

/// Unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnOp {
    Not,
    Neg,
}

/// Binary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    /// Mixer's `|`: first operand that evaluates wins.
    Default,
}

impl BinOp {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "||",
            BinOp::And => "&&",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::In => "in",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Default => "|",
        }
    }
}

/// A node with the byte offset where it starts.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Syn {
    pub pos: usize,
    pub kind: SynKind,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum SynKind {
    Lit(Lit),
    Ident(String),
    Select(Box<Syn>, String),
    Index(Box<Syn>, Box<Syn>),
    Call {
        target: Option<Box<Syn>>,
        name: String,
        args: Vec<Syn>,
    },
    Unary(UnOp, Box<Syn>),
    Binary(BinOp, Box<Syn>, Box<Syn>),
    Cond(Box<Syn>, Box<Syn>, Box<Syn>),
    List(Vec<Syn>),
    /// Something the grammar accepts but this implementation does not (map literals,
    /// comprehension macros); the text says what.
    Unsupported(String),
}

impl Syn {
    pub(crate) fn new(pos: usize, kind: SynKind) -> Syn {
        Syn { pos, kind }
    }

    /// The dotted name an identifier or a chain of selections on one spells.
    pub(crate) fn dotted_segments(&self) -> Option<Vec<&str>> {
        let mut segments = Vec::new();
        let mut cur = self;
        loop {
            match &cur.kind {
                SynKind::Ident(name) => {
                    segments.push(name.as_str());
                    segments.reverse();
                    return Some(segments);
                }
                SynKind::Select(operand, field) => {
                    segments.push(field.as_str());
                    cur = operand;
                }
                _ => return None,
            }
        }
    }

    /// Where the leftmost operand of a chain of selections starts.
    pub(crate) fn chain_start(&self) -> usize {
        match &self.kind {
            SynKind::Select(operand, _) => operand.chain_start().min(self.pos),
            _ => self.pos,
        }
    }

    /// The string literal, if this node is one.
    pub(crate) fn as_str_lit(&self) -> Option<&str> {
        match &self.kind {
            SynKind::Lit(Lit::Str(s)) => Some(s),
            _ => None,
        }
    }
}
