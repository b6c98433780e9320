//! Unit tests, grouped by concern.

mod analysis;
mod conjunction;
mod eval;
mod parse;
mod refs;
mod typecheck;

use std::sync::Arc;

use mixer_model::{
    AttrId, AttributeBag, Presence, ReferencedAttributes, StringMap, Value, Vocabulary,
};

use crate::{Expression, Syntax};

pub(crate) const ALL: [Syntax; 3] = [Syntax::Cel, Syntax::Cexl, Syntax::Compat];

pub(crate) fn vocab() -> Arc<Vocabulary> {
    Arc::new(Vocabulary::istio())
}

pub(crate) fn id(name: &str) -> AttrId {
    vocab().lookup(name).expect("declared")
}

/// A bag with a GET to /api/v1 from 10.0.0.1, two request headers and a few others.
pub(crate) fn bag() -> AttributeBag {
    let mut b = AttributeBag::new(vocab());
    let pairs: [(&str, Value); 8] = [
        ("request.method", Value::from("GET")),
        ("request.path", Value::from("/api/v1")),
        ("source.ip", Value::from("10.0.0.1")),
        ("request.size", Value::Int64(100)),
        ("response.duration", Value::from("19ms")),
        ("request.time", Value::from("2020-01-01T00:00:00Z")),
        (
            "destination.service.host",
            Value::from("svc.ns.svc.cluster.local"),
        ),
        ("connection.mtls", Value::Bool(true)),
    ];
    for (k, v) in pairs {
        b.set(k, v).expect("valid");
    }
    let headers = StringMap::from_pairs([("x-user", "alice"), ("content-type", "text/html")]);
    b.set("request.headers", Value::from(headers)).expect("map");
    b
}

pub(crate) fn compile(src: &str, syntax: Syntax) -> Expression {
    match Expression::compile(src, syntax, &vocab()) {
        Ok(e) => e,
        Err(e) => panic!("{src} ({syntax:?}) should compile: {e}"),
    }
}

pub(crate) fn compile_err(src: &str, syntax: Syntax) -> String {
    match Expression::compile(src, syntax, &vocab()) {
        Ok(e) => panic!("{src} ({syntax:?}) should not compile, got {e:?}"),
        Err(e) => e.message,
    }
}

/// Evaluates in `syntax` against `bag()`.
pub(crate) fn eval_in(src: &str, syntax: Syntax) -> Result<Value, crate::EvalError> {
    let mut refs = ReferencedAttributes::new();
    compile(src, syntax).eval(&bag(), &mut refs)
}

/// Evaluates in COMPAT against `bag()`.
pub(crate) fn eval(src: &str) -> Value {
    match eval_in(src, Syntax::Compat) {
        Ok(v) => v,
        Err(e) => panic!("{src} should evaluate: {e}"),
    }
}

/// The reads of evaluating `src` against `b`, sorted.
pub(crate) fn reads(
    src: &str,
    syntax: Syntax,
    b: &AttributeBag,
) -> Vec<(String, Option<String>, Presence)> {
    let mut refs = ReferencedAttributes::new();
    let _ = compile(src, syntax).eval(b, &mut refs);
    refs.normalize();
    let v = vocab();
    let mut out: Vec<_> = refs
        .iter()
        .map(|r| {
            (
                v.name(r.attr).to_string(),
                r.map_key.as_deref().map(str::to_string),
                r.presence,
            )
        })
        .collect();
    out.sort();
    out
}

pub(crate) fn exact(name: &str) -> (String, Option<String>, Presence) {
    (name.to_string(), None, Presence::Exact)
}

pub(crate) fn absent(name: &str) -> (String, Option<String>, Presence) {
    (name.to_string(), None, Presence::Absent)
}

pub(crate) fn key(name: &str, k: &str, p: Presence) -> (String, Option<String>, Presence) {
    (name.to_string(), Some(k.to_string()), p)
}
