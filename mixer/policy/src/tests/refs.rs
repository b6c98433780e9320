//! Referenced attributes: every read is recorded, nothing unread is.

use mixer_model::Presence::{Absent, Exact};

use super::*;

fn s(
    mut v: Vec<(String, Option<String>, mixer_model::Presence)>,
) -> Vec<(String, Option<String>, mixer_model::Presence)> {
    v.sort();
    v
}

fn r(src: &str) -> Vec<(String, Option<String>, mixer_model::Presence)> {
    let b = bag();
    let out = reads(src, Syntax::Compat, &b);
    for syntax in [Syntax::Cel, Syntax::Cexl] {
        if Expression::compile(src, syntax, &vocab()).is_ok() && syntax != Syntax::Cexl {
            assert_eq!(reads(src, syntax, &b), out, "{src} in {syntax:?}");
        }
    }
    out
}

#[test]
fn plain_attributes() {
    assert_eq!(
        r(r#"request.method == "GET""#),
        s(vec![exact("request.method")])
    );
    assert_eq!(r(r#"request.host == "x""#), s(vec![absent("request.host")]));
    assert_eq!(
        r("request.size + request.size > 0"),
        s(vec![exact("request.size")])
    );
}

#[test]
fn map_keys_are_recorded_per_key() {
    assert_eq!(
        r(r#"request.headers["x-user"] == "alice""#),
        s(vec![key("request.headers", "x-user", Exact)])
    );
    assert_eq!(
        r(r#"request.headers["nope"] == "a""#),
        s(vec![key("request.headers", "nope", Absent)])
    );
    assert_eq!(
        r(r#"request.headers.x_user == "a""#),
        s(vec![key("request.headers", "x_user", Absent)])
    );
    // An absent map records the map's absence, not a key.
    assert_eq!(
        r(r#"source.labels["app"] == "a""#),
        s(vec![absent("source.labels")])
    );
    // A computed key.
    assert_eq!(
        r(r#"request.headers[request.method == "GET" ? "x-user" : "y"] == "a""#),
        s(vec![
            exact("request.method"),
            key("request.headers", "x-user", Exact)
        ])
    );
}

#[test]
fn whole_map_reads() {
    assert_eq!(
        r("size(request.headers) > 0"),
        s(vec![exact("request.headers")])
    );
    assert_eq!(
        r("request.headers == emptyStringMap()"),
        s(vec![exact("request.headers")])
    );
    assert_eq!(
        r(r#"(request.headers | emptyStringMap())["x-user"] == "a""#),
        s(vec![exact("request.headers")])
    );
    assert_eq!(
        r(r#"(source.labels | emptyStringMap())["x"] | "d""#),
        s(vec![absent("source.labels")])
    );
}

#[test]
fn presence_tests() {
    assert_eq!(
        r("has(request.headers.x_missing)"),
        s(vec![key("request.headers", "x_missing", Absent)])
    );
    assert_eq!(
        r(r#""x-user" in request.headers"#),
        s(vec![key("request.headers", "x-user", Exact)])
    );
    assert_eq!(
        r(r#""app" in source.labels"#),
        s(vec![absent("source.labels")])
    );
    assert_eq!(r("has(request.host)"), s(vec![absent("request.host")]));
    assert_eq!(r("has(request.method)"), s(vec![exact("request.method")]));
}

#[test]
fn short_circuits_record_only_what_ran() {
    assert_eq!(
        r(r#"request.method == "POST" && request.path == "/""#),
        s(vec![exact("request.method")])
    );
    assert_eq!(
        r(r#"request.method == "GET" && request.path == "/""#),
        s(vec![exact("request.method"), exact("request.path")])
    );
    assert_eq!(
        r(r#"request.method == "GET" || request.path == "/""#),
        s(vec![exact("request.method")])
    );
    assert_eq!(
        r(r#"request.method == "POST" || request.path == "/""#),
        s(vec![exact("request.method"), exact("request.path")])
    );
    // Commutative: the left errors, so the right is evaluated and both are recorded.
    assert_eq!(
        r(r#"request.host == "x" || request.method == "GET""#),
        s(vec![exact("request.method"), absent("request.host")])
    );
}

#[test]
fn cexl_errors_stop_evaluation() {
    let b = bag();
    assert_eq!(
        reads(
            r#"request.host == "x" || request.method == "GET""#,
            Syntax::Cexl,
            &b
        ),
        s(vec![absent("request.host")])
    );
}

#[test]
fn defaults_stop_at_the_first_success() {
    assert_eq!(
        r(r#"request.method | request.host | "x""#),
        s(vec![exact("request.method")])
    );
    assert_eq!(
        r(r#"request.host | request.method | request.path"#),
        s(vec![exact("request.method"), absent("request.host")])
    );
    assert_eq!(
        r(r#"request.headers["a"] | request.headers["x-user"] | request.path"#),
        s(vec![
            key("request.headers", "a", Absent),
            key("request.headers", "x-user", Exact)
        ])
    );
}

#[test]
fn conditionals_record_only_the_taken_branch() {
    assert_eq!(
        r(r#"connection.mtls ? request.path : request.method"#),
        s(vec![exact("request.path"), exact("connection.mtls")])
    );
    assert_eq!(
        r(r#"conditional(!connection.mtls, request.path, request.method)"#),
        s(vec![exact("request.method"), exact("connection.mtls")])
    );
}

#[test]
fn functions_and_lists_record_their_operands() {
    assert_eq!(
        r(r#"match(request.path, "/api*")"#),
        s(vec![exact("request.path")])
    );
    assert_eq!(
        r(r#"request.path.startsWith(request.method)"#),
        s(vec![exact("request.method"), exact("request.path")])
    );
    assert_eq!(
        r(r#"request.method in ["GET", request.path]"#),
        s(vec![exact("request.method")])
    );
    assert_eq!(
        r(r#"request.method in ["POST", request.path]"#),
        s(vec![exact("request.method"), exact("request.path")])
    );
    assert_eq!(
        r(r#"request.path.matches("^/")"#),
        s(vec![exact("request.path")])
    );
    assert_eq!(
        r(r#"ip("1.2.3.4") == source.ip"#),
        s(vec![exact("source.ip")])
    );
    assert_eq!(r(r#"true"#), s(vec![]));
}

#[test]
fn nothing_is_read_by_constant_parts() {
    assert_eq!(r(r#"false && request.method == "GET""#), s(vec![]));
    assert_eq!(r(r#"true || request.method == "GET""#), s(vec![]));
}
