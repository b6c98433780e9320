use mixer_model::{Duration, Timestamp};

use super::*;
use crate::EvalErrorKind;

fn t(src: &str) {
    for syntax in ALL {
        assert_eq!(
            eval_in(src, syntax).ok(),
            Some(Value::Bool(true)),
            "{src} in {syntax:?}"
        );
    }
}

fn t_cel(src: &str) {
    for syntax in [Syntax::Cel, Syntax::Compat] {
        assert_eq!(
            eval_in(src, syntax).ok(),
            Some(Value::Bool(true)),
            "{src} in {syntax:?}"
        );
    }
}

fn t_mixer(src: &str) {
    for syntax in [Syntax::Cexl, Syntax::Compat] {
        assert_eq!(
            eval_in(src, syntax).ok(),
            Some(Value::Bool(true)),
            "{src} in {syntax:?}"
        );
    }
}

#[test]
fn comparisons_and_typed_equality() {
    t(r#"request.method == "GET""#);
    t(r#"request.method != "POST""#);
    t(r#"source.ip == "10.0.0.1""#);
    t(r#"source.ip == ip("::ffff:10.0.0.1")"#);
    t(r#"source.ip != ip("10.0.0.2")"#);
    t(r#"dnsName("SVC.example.com.") == dnsName("svc.example.com")"#);
    t(r#"email("bob@EXAMPLE.com") == email("bob@example.com")"#);
    t(r#"uri("HTTP://Example.com/a") == uri("http://example.com/a")"#);
    t("request.size > 99 && request.size >= 100 && request.size < 101 && request.size <= 100");
    t("request.size == 100.0 && 1.5 > 1");
    t(r#""abc" < "abd""#);
    t(r#"response.duration > "10ms" && response.duration < duration("1s")"#);
    t(r#"request.time > timestamp("2019-12-31T23:59:59Z")"#);
    t(r#"request.headers == request.headers"#);
}

#[test]
fn arithmetic() {
    assert_eq!(eval("request.size + 1"), Value::Int64(101));
    assert_eq!(eval("request.size - 1 * 2"), Value::Int64(98));
    assert_eq!(eval("request.size / 3"), Value::Int64(33));
    assert_eq!(eval("request.size % 7"), Value::Int64(2));
    assert_eq!(eval("-request.size"), Value::Int64(-100));
    assert_eq!(eval("1.5 * 2.0"), Value::Double(3.0));
    assert_eq!(
        eval(r#"request.method + "/" + request.path"#),
        Value::from("GET//api/v1")
    );
    assert_eq!(
        eval(r#"response.duration + "1ms""#),
        Value::Duration(Duration(20_000_000))
    );
    assert_eq!(
        eval(r#"-response.duration"#),
        Value::Duration(Duration(-19_000_000))
    );
    let t0 = Timestamp::parse_rfc3339("2020-01-01T00:00:00Z").expect("ts");
    assert_eq!(
        eval(r#"request.time + duration("1s")"#),
        Value::Timestamp(Timestamp(t0.0 + 1_000_000_000))
    );
    assert_eq!(
        eval(r#"request.time - request.time"#),
        Value::Duration(Duration(0))
    );
    let big = compile("request.size * 9223372036854775807", Syntax::Compat);
    let err = big
        .eval(&bag(), &mut ReferencedAttributes::new())
        .expect_err("overflow");
    assert_eq!(err.kind(), &EvalErrorKind::Overflow);
    let div = compile("request.size / (request.size - 100)", Syntax::Compat);
    let err = div
        .eval(&bag(), &mut ReferencedAttributes::new())
        .expect_err("div0");
    assert_eq!(err.kind(), &EvalErrorKind::DivideByZero);
    assert_eq!(err.to_string(), "division by zero");
    assert!(compile_err("1 / 0", Syntax::Compat).contains("division by zero"));
}

#[test]
fn logic_and_conditionals() {
    t("connection.mtls && !false");
    t("false || connection.mtls");
    t(r#"(connection.mtls ? request.path : "x") == "/api/v1""#);
    t(r#"conditional(false, "a", request.method) == "GET""#);
    t_mixer(r#"conditionalString(true, "a", "b") == "a""#);
    t(r#"request.method in ["POST", "GET"]"#);
    t(r#"!(request.method in ["POST"])"#);
    t(r#""x-user" in request.headers"#);
    t(r#"!("nope" in request.headers)"#);
    t(r#"has(request.headers.x_missing) == false"#);
    t("has(request.method) && !has(request.host)");
}

#[test]
fn cel_error_semantics_are_commutative_cexl_strict() {
    // request.host is absent: the left side errors.
    for syntax in [Syntax::Cel, Syntax::Compat] {
        assert_eq!(
            eval_in(r#"request.host == "x" || true"#, syntax).ok(),
            Some(Value::Bool(true))
        );
        assert_eq!(
            eval_in(r#"request.host == "x" && false"#, syntax).ok(),
            Some(Value::Bool(false))
        );
        assert!(eval_in(r#"request.host == "x" && true"#, syntax).is_err());
    }
    assert!(eval_in(r#"request.host == "x" || true"#, Syntax::Cexl).is_err());
    assert!(eval_in(r#"request.host == "x" && false"#, Syntax::Cexl).is_err());
    for syntax in ALL {
        assert_eq!(
            eval_in(r#"false && request.host == "x""#, syntax).ok(),
            Some(Value::Bool(false))
        );
        assert_eq!(
            eval_in(r#"true || request.host == "x""#, syntax).ok(),
            Some(Value::Bool(true))
        );
    }
}

#[test]
fn defaults() {
    assert_eq!(eval(r#"request.host | "none""#), Value::from("none"));
    assert_eq!(eval(r#"request.method | "none""#), Value::from("GET"));
    assert_eq!(
        eval(r#"request.headers["nope"] | request.headers["x-user"] | "anon""#),
        Value::from("alice")
    );
    assert_eq!(
        eval(r#"request.host | request.referer | "z""#),
        Value::from("z")
    );
    assert_eq!(
        eval(r#"source.ip | ip("0.0.0.0") == "10.0.0.1""#),
        Value::Bool(true)
    );
    assert_eq!(
        eval(r#"origin.ip | "1.2.3.4""#),
        Value::IpAddress("1.2.3.4".parse().expect("ip"))
    );
    assert_eq!(
        eval(r#"(request.headers | emptyStringMap())["x-user"]"#),
        Value::from("alice")
    );
    assert!(eval_in("request.host | request.referer", Syntax::Compat).is_err());
}

#[test]
fn map_access_and_errors() {
    assert_eq!(eval(r#"request.headers["x-user"]"#), Value::from("alice"));
    assert!(
        compile_err(r#"request.headers.x_user | "n""#, Syntax::Cel).starts_with("syntax error")
    );
    assert_eq!(eval(r#"request.headers.x_user | "n""#), Value::from("n"));
    // Istio's default language (CEXL) reads an absent key as "", and so does COMPAT, the
    // default here; CEL fails, as cel-go does.
    assert_eq!(
        eval_in(r#"request.headers["x-admin"]"#, Syntax::Compat).expect("empty"),
        Value::from("")
    );
    assert_eq!(
        eval_in(r#"request.headers["x-admin"]"#, Syntax::Cexl).expect("empty"),
        Value::from("")
    );
    assert_eq!(
        eval_in(r#"request.headers.x_admin"#, Syntax::Compat).expect("empty"),
        Value::from("")
    );
    assert_eq!(
        eval_in(r#"request.headers["x-admin"] | "nobody""#, Syntax::Compat).expect("default"),
        Value::from("nobody")
    );
    assert_eq!(
        eval_in(r#"request.headers["x-admin"] != "yes""#, Syntax::Compat).expect("compares"),
        Value::Bool(true)
    );
    // The map itself absent is still an error.
    let err = eval_in(r#"source.labels["version"]"#, Syntax::Compat).expect_err("no map");
    assert_eq!(err.to_string(), r#"attribute "source.labels" is absent"#);
    let err = eval_in(r#"request.headers["x-admin"]"#, Syntax::Cel).expect_err("missing");
    assert_eq!(
        err.to_string(),
        r#"attribute "request.headers" has no key "x-admin""#
    );
    assert!(err.is_absence());
    let err = eval_in("source.labels", Syntax::Cel).expect_err("absent");
    assert_eq!(err.to_string(), r#"attribute "source.labels" is absent"#);
    assert_eq!(
        eval(r#"request.headers[request.method == "GET" ? "x-user" : "y"]"#),
        Value::from("alice")
    );
    assert_eq!(eval(r#"size(request.headers)"#), Value::Int64(2));
    assert!(eval_in(r#"emptyStringMap()["k"]"#, Syntax::Cel).is_err());
    assert_eq!(
        eval_in(r#"emptyStringMap()["k"]"#, Syntax::Compat).expect("empty"),
        Value::from("")
    );
}

#[test]
fn mixer_functions() {
    t(r#"match(request.path, "/api/*")"#);
    t(r#"match(destination.service.host, "*.cluster.local")"#);
    t(r#"match(request.method, "GET")"#);
    t(r#"!match(request.path, "/admin*")"#);
    t(r#"match(request.path, request.path)"#);
    t_mixer(r#""^/api/v[0-9]+$".matches(request.path)"#);
    t(r#"request.path.startsWith("/api") && request.path.endsWith("v1")"#);
    t(r#"toLower("ABC") == "abc" && toLower(request.method) == "get""#);
    t(r#"reverse(request.method) == "TEG""#);
    t(r#"emptyStringMap() == emptyStringMap()"#);
    t_mixer(r#"ip(request.headers["missing"] | "1.1.1.1") == ip("1.1.1.1")"#);
    let err = eval_in(
        r#"ip(request.headers["x-user"]) == source.ip"#,
        Syntax::Compat,
    )
    .expect_err("conversion");
    assert_eq!(err.to_string(), r#"cannot convert "alice" to IP_ADDRESS"#);
}

#[test]
fn cel_functions() {
    t_cel(r#"request.path.matches("^/api/")"#);
    t(r#"matches(request.path, "v1$")"#);
    t(r#"request.path.contains("pi/v")"#);
    t(r#"size(request.path) == 7 && request.path.size() == 7"#);
    t(r#"int("42") == 42 && int(2.9) == 2 && int(request.size) == 100"#);
    t(r#"double(request.size) == 100.0 && double("1.5") == 1.5"#);
    t(r#"string(request.size) == "100" && string(source.ip) == "10.0.0.1""#);
    t(r#"int(request.time) == 1577836800"#);
    t(r#"dyn(request.size) == 100"#);
    t(r#"duration("1m") == duration("60s")"#);
    t("7u == 7");
    assert!(eval_in(r#"int(request.method) == 1"#, Syntax::Cel).is_err());
}

#[test]
fn matches_receiver_order_per_syntax() {
    // CEL order: the argument is the pattern.
    assert_eq!(
        eval_in(r#"request.path.matches("^/api")"#, Syntax::Cel).ok(),
        Some(Value::Bool(true))
    );
    // Mixer order: the receiver is the pattern.
    assert_eq!(
        eval_in(r#""^/api".matches(request.path)"#, Syntax::Cexl).ok(),
        Some(Value::Bool(true))
    );
    assert_eq!(
        eval_in(r#""^/api".matches(request.path)"#, Syntax::Compat).ok(),
        Some(Value::Bool(true))
    );
    // COMPAT with two literals uses CEL order: "^/api" does not match the pattern "/api".
    assert_eq!(
        eval_in(r#""abc".matches("b")"#, Syntax::Compat).ok(),
        Some(Value::Bool(true))
    );
    assert_eq!(
        eval_in(r#""abc".matches("b")"#, Syntax::Cexl).ok(),
        Some(Value::Bool(false))
    );
    assert_eq!(
        eval_in(r#""/api/x".matches("^/api")"#, Syntax::Compat).ok(),
        Some(Value::Bool(true))
    );
    // In CEL, a non-literal pattern is rejected.
    assert!(
        compile_err(r#""^/api".matches(request.path)"#, Syntax::Cel)
            .contains("must be a string literal")
    );
}

#[test]
fn results_are_typed_values() {
    assert_eq!(
        eval("source.ip"),
        Value::IpAddress("10.0.0.1".parse().expect("ip"))
    );
    assert_eq!(eval("connection.mtls"), Value::Bool(true));
    assert_eq!(eval(r#""a" + 'b'"#), Value::from("ab"));
    let mut refs = ReferencedAttributes::new();
    let e = compile("request.size", Syntax::Compat);
    assert!(e.eval_bool(&bag(), &mut refs).is_err());
}
