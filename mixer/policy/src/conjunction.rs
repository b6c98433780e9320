//! A match that is nothing but `attr == literal` tests joined by `&&` (what a
//! `ratelimitconfig` descriptor compiles to) decided by comparing values, without walking the
//! expression tree: the rate limit path evaluates one such match per counted descriptor.
//!
//! The answer is exactly the tree's, reads included: when every attribute (and map key) read
//! is present, neither `&&` can see an error, so CEXL's strict and CEL's commutative `&&`
//! agree with a left-to-right walk that stops at the first false test. When a read is absent
//! (or a map attribute holds something else), the tree decides instead, so that its error
//! (or CEL's absorption of it) and the absent read it records stay as they are.

use std::sync::Arc;

use mixer_model::{AttrId, Bag, Presence, ReferencedAttributes, Value};

use crate::ir::{CmpOp, Node};

/// One `attr == literal` (or `attr["key"] == literal`) test.
#[derive(Debug)]
struct Test {
    attr: AttrId,
    key: Option<Arc<str>>,
    literal: Value,
}

/// The tests of an all-equality conjunction, in the order the tree evaluates them.
#[derive(Debug)]
pub(crate) struct Conjunction {
    tests: Box<[Test]>,
}

impl Conjunction {
    /// `Some` when `node` is one equality test or a `&&` of them, and nothing else.
    pub(crate) fn of(node: &Node) -> Option<Conjunction> {
        let mut tests = Vec::new();
        collect(node, &mut tests).then(|| Conjunction {
            tests: tests.into_boxed_slice(),
        })
    }

    /// The match's value, recording what the tree would have read; `None` when the tree must
    /// decide (some read absent, or a map attribute that is not a map).
    pub(crate) fn decide(&self, bag: &dyn Bag, refs: &mut ReferencedAttributes) -> Option<bool> {
        // Decided before anything is recorded, so that a fallback to the tree records
        // nothing twice.
        let (mut read, mut holds_all) = (self.tests.len(), true);
        for (i, test) in self.tests.iter().enumerate() {
            let value = bag.get(test.attr)?;
            let holds = match &test.key {
                None => *value == test.literal,
                Some(key) => Some(value.as_map()?.get(key)?) == test.literal.as_str(),
            };
            if !holds {
                (read, holds_all) = (i + 1, false);
                break;
            }
        }
        if refs.is_recording() {
            for test in &self.tests[..read] {
                match &test.key {
                    None => refs.record(test.attr, Presence::Exact),
                    Some(key) => refs.record_key(test.attr, Arc::clone(key), Presence::Exact),
                }
            }
        }
        Some(holds_all)
    }
}

/// Appends `node`'s tests in evaluation order; false when some part is not such a test.
fn collect(node: &Node, out: &mut Vec<Test>) -> bool {
    match node {
        Node::And(l, r, _) => collect(l, out) && collect(r, out),
        Node::Cmp(CmpOp::Eq, a, b) => {
            // A literal on either side reads nothing, so the order of the two is no matter.
            let (read, literal) = match (a.as_ref(), b.as_ref()) {
                (read, Node::Lit(v)) | (Node::Lit(v), read) => (read, v),
                _ => return false,
            };
            let (attr, key) = match read {
                Node::Attr(at) => (at.id, None),
                // A key's value is a string: only a string literal can equal it.
                Node::AttrKey(at, k) if literal.as_str().is_some() => (at.id, Some(Arc::clone(k))),
                // Present, the key reads as with `AttrKey`; absent, the tree decides.
                Node::EmptyIfAbsent(inner) if literal.as_str().is_some() => match inner.as_ref() {
                    Node::AttrKey(at, k) => (at.id, Some(Arc::clone(k))),
                    _ => return false,
                },
                _ => return false,
            };
            out.push(Test {
                attr,
                key,
                literal: literal.clone(),
            });
            true
        }
        _ => false,
    }
}
