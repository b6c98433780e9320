//! Rule index: finds the rules whose match can be true without evaluating every match.
//!
//! A rule whose match is a conjunction containing `attribute == literal` (or
//! `map["key"] == literal`) can only match requests carrying that literal. Such rules are
//! filed under one of their literals; a request looks its own value up once per indexed
//! attribute and evaluates only the rules filed under it, plus the rules that could not be
//! indexed. Cost then grows with the rules that share the request's literals, not with all rules.
//!
//! The lookup reads the indexed attribute, so it is recorded as referenced: a request with
//! another value there would have other candidate rules.
//!
//! When the indexed attribute (or map key) is absent, a filed rule's match would fail to
//! evaluate or be false; either way it cannot match. Rules that deny on a failed match
//! (`matchErrorPolicy: DENY`) are still evaluated then, so the outcome is exactly that of
//! evaluating every rule; for the others the failure is not counted, because it never happens.

use std::collections::HashMap;
use std::sync::Arc;

use mixer_model::{AttrId, Bag, Presence, ReferencedAttributes, Value};
use mixer_policy::EqualityConstraint;

/// Literal kinds that hash with the same equality as [`Value`]'s.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    Str(Arc<str>),
    Int(i64),
    Bool(bool),
}

impl Key {
    fn of(value: &Value) -> Option<Key> {
        match value {
            Value::String(s) => Some(Key::Str(s.clone())),
            Value::Int64(i) => Some(Key::Int(*i)),
            Value::Bool(b) => Some(Key::Bool(*b)),
            _ => None,
        }
    }
}

/// The rules filed under each literal, one map per kind, so that a request's text is looked
/// up where it lies (a header's value inside its map) without being copied into a key.
#[derive(Debug, Default)]
struct Filed {
    strings: HashMap<Arc<str>, Vec<u32>>,
    ints: HashMap<i64, Vec<u32>>,
    bools: HashMap<bool, Vec<u32>>,
}

impl Filed {
    fn entry(&mut self, key: Key) -> &mut Vec<u32> {
        match key {
            Key::Str(s) => self.strings.entry(s).or_default(),
            Key::Int(i) => self.ints.entry(i).or_default(),
            Key::Bool(b) => self.bools.entry(b).or_default(),
        }
    }

    /// The rules filed under what the request carries.
    fn get(&self, found: Found<'_>) -> Option<&Vec<u32>> {
        match found {
            Found::Text(s) => self.strings.get(s),
            Found::Value(Value::String(s)) => self.strings.get(s),
            Found::Value(Value::Int64(i)) => self.ints.get(i),
            Found::Value(Value::Bool(b)) => self.bools.get(b),
            Found::Value(_) => None,
        }
    }
}

/// A request's value at an indexed attribute (or map key).
#[derive(Clone, Copy)]
enum Found<'a> {
    Value(&'a Value),
    Text(&'a str),
}

#[derive(Debug)]
struct Group {
    attr: AttrId,
    map_key: Option<Arc<str>>,
    by_value: Filed,
    /// Rules filed here that must be evaluated when the attribute is absent.
    when_absent: Vec<u32>,
}

/// Rules filed by the literals their matches require.
#[derive(Debug, Default)]
pub struct RuleIndex {
    groups: Vec<Group>,
    unindexed: Vec<u32>,
    rules: usize,
}

impl RuleIndex {
    /// Builds the index from each rule's equality constraints (in rule order) and whether a
    /// failed match of that rule denies (then it is evaluated even when its literal's
    /// attribute is absent).
    pub fn build(constraints: &[Vec<EqualityConstraint>], deny_on_error: &[bool]) -> RuleIndex {
        // File each rule under its most selective literal: the (attribute, key) whose literals
        // differ most across rules, so that a request's lookup yields few candidates (one rule
        // per service beats one bucket holding every rule that tests the method).
        let mut distinct: HashMap<(AttrId, Option<Arc<str>>), std::collections::HashSet<Key>> =
            HashMap::new();
        for rule in constraints {
            for c in rule {
                if let Some(k) = Key::of(&c.value) {
                    distinct
                        .entry((c.attr, c.map_key.clone()))
                        .or_default()
                        .insert(k);
                }
            }
        }
        let selectivity = |c: &EqualityConstraint| {
            distinct
                .get(&(c.attr, c.map_key.clone()))
                .map_or(0, std::collections::HashSet::len)
        };
        let mut index = RuleIndex {
            rules: constraints.len(),
            ..RuleIndex::default()
        };
        for (i, rule) in constraints.iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            let best = rule
                .iter()
                .filter_map(|c| Key::of(&c.value).map(|k| (c, k)))
                .max_by_key(|(c, _)| selectivity(c));
            let Some((c, key)) = best else {
                index.unindexed.push(i);
                continue;
            };
            let group = match index
                .groups
                .iter_mut()
                .position(|g| g.attr == c.attr && g.map_key == c.map_key)
            {
                Some(g) => &mut index.groups[g],
                None => {
                    index.groups.push(Group {
                        attr: c.attr,
                        map_key: c.map_key.clone(),
                        by_value: Filed::default(),
                        when_absent: Vec::new(),
                    });
                    let last = index.groups.len() - 1;
                    &mut index.groups[last]
                }
            };
            group.by_value.entry(key).push(i);
            if deny_on_error.get(i as usize).copied().unwrap_or(false) {
                group.when_absent.push(i);
            }
        }
        index
    }

    /// Number of rules the index was built over.
    pub fn len(&self) -> usize {
        self.rules
    }

    /// True when built over no rules.
    pub fn is_empty(&self) -> bool {
        self.rules == 0
    }

    /// Number of rules filed under a literal.
    pub fn indexed(&self) -> usize {
        self.rules - self.unindexed.len()
    }

    /// Writes into `out`, in rule order, the rules whose match may be true for `bag`,
    /// recording the attributes the lookup read.
    pub fn candidates(&self, bag: &dyn Bag, refs: &mut ReferencedAttributes, out: &mut Vec<u32>) {
        out.clear();
        out.extend_from_slice(&self.unindexed);
        for group in &self.groups {
            let value = bag.get(group.attr);
            let looked_up = match (&group.map_key, value) {
                (None, Some(v)) => {
                    refs.record(group.attr, Presence::Exact);
                    Some(Found::Value(v))
                }
                (None, None) => {
                    refs.record(group.attr, Presence::Absent);
                    None
                }
                (Some(key), Some(Value::StringMap(map))) => match map.get(key) {
                    Some(v) => {
                        refs.record_key(group.attr, key.clone(), Presence::Exact);
                        Some(Found::Text(v))
                    }
                    None => {
                        refs.record_key(group.attr, key.clone(), Presence::Absent);
                        None
                    }
                },
                (Some(_), Some(_)) => {
                    refs.record(group.attr, Presence::Exact);
                    None
                }
                (Some(_), None) => {
                    refs.record(group.attr, Presence::Absent);
                    None
                }
            };
            let Some(found) = looked_up else {
                out.extend_from_slice(&group.when_absent);
                continue;
            };
            if let Some(rules) = group.by_value.get(found) {
                out.extend_from_slice(rules);
            }
        }
        out.sort_unstable();
        out.dedup();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mixer_model::{AttributeBag, StringMap, Vocabulary};

    fn eq(attr: AttrId, key: Option<&str>, value: &str) -> EqualityConstraint {
        EqualityConstraint {
            attr,
            map_key: key.map(Arc::from),
            value: Value::from(value),
        }
    }

    #[test]
    fn finds_only_rules_with_the_requests_literals() {
        let vocabulary = Arc::new(Vocabulary::istio());
        let method = vocabulary.lookup("request.method").expect("declared");
        let headers = vocabulary.lookup("request.headers").expect("declared");
        let index = RuleIndex::build(
            &[
                vec![eq(method, None, "GET")],
                vec![eq(method, None, "POST")],
                vec![],
                vec![eq(headers, Some("x-user"), "bob")],
                vec![eq(method, None, "GET"), eq(headers, Some("x-user"), "amy")],
                vec![eq(method, None, "PUT")],
            ],
            &[false, false, false, false, false, true],
        );
        assert_eq!(index.len(), 6);
        assert_eq!(index.indexed(), 5);

        let mut bag = AttributeBag::new(vocabulary.clone());
        bag.set("request.method", Value::from("GET")).expect("set");
        bag.set(
            "request.headers",
            StringMap::from_pairs([("x-user", "bob")]).into(),
        )
        .expect("set");
        let mut refs = ReferencedAttributes::new();
        let mut out = Vec::new();
        index.candidates(&bag, &mut refs, &mut out);
        assert_eq!(out, [0, 2, 3, 4]);
        assert_eq!(refs.find(method, None), Some(Presence::Exact));
        assert_eq!(refs.find(headers, Some("x-user")), Some(Presence::Exact));

        let empty = AttributeBag::new(vocabulary);
        refs.clear();
        index.candidates(&empty, &mut refs, &mut out);
        assert_eq!(
            out,
            [2, 5],
            "the deny-on-error rule is evaluated when method is absent"
        );
        assert_eq!(refs.find(method, None), Some(Presence::Absent));
        assert_eq!(refs.find(headers, None), Some(Presence::Absent));
    }
}
