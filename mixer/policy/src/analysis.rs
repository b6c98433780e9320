//! Static analyses over the IR: absence risks, equality constraints, attributes read.

use std::sync::Arc;

use mixer_model::{AttrId, Value};

use crate::ir::{CmpOp, Node};

/// `attr` (or `attr[key]`) known to be present.
type Fact = (AttrId, Option<Arc<str>>);

fn guarded(guard: &[Fact], id: AttrId, key: Option<&str>) -> bool {
    guard.iter().any(|(g, k)| {
        *g == id && (k.is_none() && key.is_none() || k.as_deref() == key && key.is_some())
    })
}

/// Facts that hold when `node` evaluates to `truth`.
fn facts(node: &Node, truth: bool, out: &mut Vec<Fact>) {
    match (node, truth) {
        (Node::HasAttr(a), true) => out.push((a.id, None)),
        (Node::HasKey(a, k), true) => {
            if let Node::Lit(Value::String(k)) = k.as_ref() {
                out.push((a.id, Some(Arc::clone(k))));
            }
            out.push((a.id, None));
        }
        (Node::Not(x), _) => facts(x, !truth, out),
        (Node::And(l, r, _), true) | (Node::Or(l, r, _), false) => {
            facts(l, truth, out);
            facts(r, truth, out);
        }
        _ => {}
    }
}

fn with_facts(guard: &[Fact], node: &Node, truth: bool) -> Vec<Fact> {
    let mut g = guard.to_vec();
    facts(node, truth, &mut g);
    g
}

pub(crate) fn risks(node: &Node, guard: &[Fact], out: &mut Vec<String>) {
    match node {
        Node::Attr(a) => {
            if !guarded(guard, a.id, None) {
                out.push(a.name.to_string());
            }
        }
        Node::AttrKey(a, k) => {
            if !guarded(guard, a.id, Some(k)) {
                out.push(format!("{}[{k}]", a.name));
            }
        }
        Node::AttrDynKey(a, k) => {
            risks(k, guard, out);
            out.push(format!("{}[...]", a.name));
        }
        // Only the map can be missing: an absent key reads "".
        Node::EmptyIfAbsent(read) => match read.as_ref() {
            Node::AttrKey(a, _) | Node::AttrDynKey(a, _) => {
                for c in read.children() {
                    risks(c, guard, out);
                }
                if !guarded(guard, a.id, None) {
                    out.push(a.name.to_string());
                }
            }
            other => {
                for c in other.children() {
                    risks(c, guard, out);
                }
            }
        },
        Node::HasAttr(_) => {}
        Node::HasKey(_, k) => risks(k, guard, out),
        Node::Default(items) => {
            if let Some(last) = items.last() {
                risks(last, guard, out);
            }
        }
        Node::And(l, r, strict) | Node::Or(l, r, strict) => {
            let is_and = matches!(node, Node::And(..));
            // Under CEL's commutative semantics the right side can rescue the left.
            let lg = if *strict {
                guard.to_vec()
            } else {
                with_facts(guard, r, is_and)
            };
            risks(l, &lg, out);
            risks(r, &with_facts(guard, l, is_and), out);
        }
        Node::Cond(c, a, b) => {
            risks(c, guard, out);
            risks(a, &with_facts(guard, c, true), out);
            risks(b, &with_facts(guard, c, false), out);
        }
        other => {
            for c in other.children() {
                risks(c, guard, out);
            }
        }
    }
}

/// Top-level conjunctive `attr == literal` tests.
pub(crate) fn constraints(node: &Node, out: &mut Vec<(AttrId, Option<Arc<str>>, Value)>) {
    match node {
        Node::And(l, r, _) => {
            constraints(l, out);
            constraints(r, out);
        }
        Node::Cmp(CmpOp::Eq, a, b) => {
            for (x, y) in [(a, b), (b, a)] {
                match (x.as_ref(), y.as_ref()) {
                    (Node::Attr(at), Node::Lit(v)) => {
                        out.push((at.id, None, v.clone()));
                        return;
                    }
                    (Node::AttrKey(at, k), Node::Lit(v)) => {
                        out.push((at.id, Some(Arc::clone(k)), v.clone()));
                        return;
                    }
                    // Reading "" for an absent key, `m["k"] == ""` holds without the key:
                    // not a test the index can answer by the key's value.
                    (Node::EmptyIfAbsent(read), Node::Lit(v))
                        if v.as_str().is_some_and(|s| !s.is_empty()) =>
                    {
                        if let Node::AttrKey(at, k) = read.as_ref() {
                            out.push((at.id, Some(Arc::clone(k)), v.clone()));
                            return;
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

pub(crate) fn attributes(node: &Node, out: &mut Vec<AttrId>) {
    match node {
        Node::Attr(a) | Node::AttrKey(a, _) | Node::HasAttr(a) => out.push(a.id),
        Node::AttrDynKey(a, _) | Node::HasKey(a, _) => out.push(a.id),
        _ => {}
    }
    for c in node.children() {
        attributes(c, out);
    }
}
