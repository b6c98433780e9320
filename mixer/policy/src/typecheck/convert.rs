//! Literal conversion, type unification and constant folding used by the checker.

use mixer_model::{Value, ValueType};

use super::Typed;
use crate::error::CompileError;
use crate::eval;
use crate::ir::Node;
use crate::syntax::Lit;

pub(crate) fn literal(lit: &Lit, pos: usize) -> Result<Typed, CompileError> {
    let v = match lit {
        Lit::Str(s) => Value::string(s.as_str()),
        Lit::Int(i) => Value::Int64(*i),
        Lit::UInt(u) => Value::Int64(i64::try_from(*u).map_err(|_| {
            CompileError::at(pos, format!("unsigned literal {u} does not fit INT64"))
        })?),
        Lit::Double(d) => Value::Double(*d),
        Lit::Bool(b) => Value::Bool(*b),
        Lit::Bytes(b) => Value::Bytes(b.as_slice().into()),
        Lit::Null => {
            return Err(CompileError::at(
                pos,
                "null is not supported: attributes are typed and test presence with has() or |",
            ));
        }
    };
    let ty = v.value_type();
    Ok(Typed::new(Node::Lit(v), ty))
}

/// Converts `t` to type `want` where Mixer did so implicitly: a string literal where a typed
/// value is expected (`"19ms"`, `"10.0.0.1"`), an integer literal where a double is expected,
/// through `|` operands and conditional branches.
pub(crate) fn coerce(t: Typed, want: ValueType, pos: usize) -> Result<Node, CompileError> {
    if t.ty == want {
        return Ok(t.node);
    }
    let mismatch =
        |ty: ValueType| CompileError::at(pos, format!("expression has type {ty}, expected {want}"));
    match t.node {
        Node::Lit(Value::String(s)) if want != ValueType::StringMap => {
            Value::parse_as(want, &s).map(Node::Lit).ok_or_else(|| {
                CompileError::at(pos, format!("cannot convert {:?} to {want}", s.as_ref()))
            })
        }
        Node::Lit(Value::Int64(i)) if want == ValueType::Double => {
            Ok(Node::Lit(Value::Double(i as f64)))
        }
        Node::Default(items) => {
            let items = items
                .into_iter()
                .map(|n| coerce(Typed::new(n, t.ty), want, pos))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Node::Default(items))
        }
        Node::Cond(c, a, b) => Ok(Node::Cond(
            c,
            Box::new(coerce(Typed::new(*a, t.ty), want, pos)?),
            Box::new(coerce(Typed::new(*b, t.ty), want, pos)?),
        )),
        _ => Err(mismatch(t.ty)),
    }
}

/// Brings operands to one type: the first operand whose type is not STRING sets it (string
/// literals convert to it), else STRING.
pub(crate) fn unify(
    items: Vec<Typed>,
    pos: usize,
    what: &str,
) -> Result<(Vec<Node>, ValueType), CompileError> {
    let target = items
        .iter()
        .map(|t| t.ty)
        .find(|ty| *ty != ValueType::String)
        .unwrap_or(ValueType::String);
    let target = if target == ValueType::Int64 && items.iter().any(|t| t.ty == ValueType::Double) {
        ValueType::Double
    } else {
        target
    };
    let types: Vec<ValueType> = items.iter().map(|t| t.ty).collect();
    let nodes = items
        .into_iter()
        .map(|t| coerce(t, target, pos))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            let listed: Vec<String> = types.iter().map(ToString::to_string).collect();
            CompileError::at(
                pos,
                format!(
                    "{what} have different types ({}): {}",
                    listed.join(", "),
                    e.message
                ),
            )
        })?;
    Ok((nodes, target))
}

/// Evaluates a node whose operands are all literals at compile time.
pub(crate) fn fold(t: Typed, pos: usize) -> Result<Typed, CompileError> {
    let foldable = !matches!(t.node, Node::Lit(_))
        && t.node.children().iter().all(|c| matches!(c, Node::Lit(_)));
    let reads = matches!(
        t.node,
        Node::Attr(_)
            | Node::AttrKey(..)
            | Node::HasAttr(_)
            | Node::AttrDynKey(..)
            | Node::HasKey(..)
    );
    if !foldable || reads {
        return Ok(t);
    }
    match eval::eval_const(&t.node) {
        Ok(v) => Ok(Typed::new(Node::Lit(v), t.ty)),
        Err(e) => Err(CompileError::at(pos, e.to_string())),
    }
}
