//! The all-equality shortcut of `eval_bool` against the tree it stands for: the same answer,
//! the same error and the same reads, on any bag.

use proptest::prelude::*;

use super::*;

/// Equality tests over present and absent attributes, map keys and a map the bag may lack,
/// each with a literal from a set small enough that tests hold as often as they fail.
const TESTS: [&str; 12] = [
    r#"request.method == "GET""#,
    r#"request.method == "POST""#,
    r#""GET" == request.method"#,
    "request.size == 100",
    "request.size == 7",
    "connection.mtls == true",
    r#"request.headers["x-user"] == "alice""#,
    r#"request.headers["x-user"] == "bob""#,
    r#""alice" == request.headers["x-user"]"#,
    r#"request.headers["x-other"] == "alice""#,
    r#"source.labels["app"] == "web""#,
    r#"request.host == "h""#,
];

/// A bag holding each attribute the tests read (or not), with values the literals name.
fn any_bag() -> impl Strategy<Value = AttributeBag> {
    (
        proptest::option::of(prop_oneof![Just("GET"), Just("POST")]),
        proptest::option::of(prop_oneof![Just(100i64), Just(7)]),
        proptest::option::of(any::<bool>()),
        proptest::option::of(proptest::option::of(prop_oneof![
            Just("alice"),
            Just("bob")
        ])),
        proptest::option::of(prop_oneof![Just("web"), Just("db")]),
        proptest::option::of(Just("h")),
    )
        .prop_map(|(method, size, mtls, user, app, host)| {
            let mut b = AttributeBag::new(vocab());
            let mut set = |name: &str, v: Value| b.set(name, v).expect("declared");
            if let Some(m) = method {
                set("request.method", Value::from(m));
            }
            if let Some(s) = size {
                set("request.size", Value::Int64(s));
            }
            if let Some(t) = mtls {
                set("connection.mtls", Value::Bool(t));
            }
            // Some(None): the headers without `x-user`.
            if let Some(user) = user {
                let pairs: Vec<(&str, &str)> = user.map(|u| ("x-user", u)).into_iter().collect();
                set("request.headers", Value::from(StringMap::from_pairs(pairs)));
            }
            if let Some(app) = app {
                set(
                    "source.labels",
                    Value::from(StringMap::from_pairs([("app", app)])),
                );
            }
            if let Some(h) = host {
                set("request.host", Value::from(h));
            }
            b
        })
}

proptest! {
    #[test]
    fn decides_as_the_tree_does(
        picks in proptest::collection::vec(0..TESTS.len(), 1..5),
        bag in any_bag(),
        recording in any::<bool>(),
    ) {
        let src = picks.iter().map(|&i| TESTS[i]).collect::<Vec<_>>().join(" && ");
        for syntax in ALL {
            let e = compile(&src, syntax);
            prop_assert!(e.inner.conjunction.is_some(), "{src} ({syntax:?}) takes the shortcut");
            let fresh = || if recording {
                ReferencedAttributes::new()
            } else {
                ReferencedAttributes::ignoring()
            };
            let (mut fast, mut tree) = (fresh(), fresh());
            let got = e.eval_bool(&bag, &mut fast);
            let want = crate::eval::eval_bool(&e.inner.node, &bag, &mut tree);
            prop_assert_eq!(got, want, "{} ({:?})", src, syntax);
            prop_assert_eq!(fast, tree, "reads of {} ({:?})", src, syntax);
        }
    }
}

#[test]
fn other_matches_take_the_tree() {
    for src in [
        r#"request.method != "GET""#,
        r#"request.method == "GET" || request.size == 7"#,
        r#"request.method == "GET" && request.size > 7"#,
        r#"request.method == request.path"#,
        r#"request.headers["x-user"].startsWith("a")"#,
        "true",
    ] {
        for syntax in ALL {
            if let Ok(e) = Expression::compile(src, syntax, &vocab()) {
                assert!(e.inner.conjunction.is_none(), "{src} ({syntax:?})");
            }
        }
    }
}
