use mixer_model::{Duration, ValueType};

use super::*;
use crate::Expression;

#[test]
fn unknown_attribute_with_and_without_suggestion() {
    for syntax in ALL {
        assert_eq!(
            compile_err(r#"request.hedaers["x"] == "y""#, syntax),
            r#"unknown attribute "request.hedaers" (did you mean request.headers?)"#
        );
        assert_eq!(
            compile_err("completely.different.thing", syntax),
            r#"unknown attribute "completely.different.thing""#
        );
    }
    let e = Expression::compile("request.path == nope.nope.nope", Syntax::Compat, &vocab())
        .expect_err("unknown");
    assert_eq!(e.offset, Some(16));
}

#[test]
fn longest_declared_prefix_wins() {
    for syntax in ALL {
        assert_eq!(
            compile("destination.service.host", syntax).attributes(),
            vec![id("destination.service.host")]
        );
        assert_eq!(
            compile("destination.service", syntax).attributes(),
            vec![id("destination.service")]
        );
    }
    assert_eq!(eval("has(request.headers.content)"), Value::Bool(false));
}

#[test]
fn field_access_on_non_maps_is_an_error() {
    let msg = compile_err("request.path.foo", Syntax::Compat);
    assert_eq!(
        msg,
        r#"attribute "request.path" of type STRING has no field "foo""#
    );
    let msg = compile_err("request.headers.a.b", Syntax::Compat);
    assert!(msg.contains(r#"use request.headers["a.b"]"#), "{msg}");
}

#[test]
fn expected_types() {
    let v = vocab();
    let e = Expression::compile_expecting("request.path", Syntax::Compat, &v, ValueType::Bool)
        .expect_err("not bool");
    assert_eq!(e.message, "expression has type STRING, expected BOOL");
    let d = Expression::compile_expecting(r#""19ms""#, Syntax::Compat, &v, ValueType::Duration)
        .expect("duration");
    let mut refs = ReferencedAttributes::new();
    assert_eq!(
        d.eval(&bag(), &mut refs).expect("eval"),
        Value::Duration(Duration(19_000_000))
    );
    let d = Expression::compile_expecting(
        r#"response.duration | "5s""#,
        Syntax::Compat,
        &v,
        ValueType::Duration,
    )
    .expect("default");
    assert_eq!(d.result_type(), Some(ValueType::Duration));
    let e = Expression::compile_expecting(r#""soon""#, Syntax::Compat, &v, ValueType::Duration)
        .expect_err("bad");
    assert_eq!(e.message, r#"cannot convert "soon" to DURATION"#);
    let ip = Expression::compile_expecting(r#""10.0.0.1""#, Syntax::Cel, &v, ValueType::IpAddress)
        .expect("ip");
    assert_eq!(ip.result_type(), Some(ValueType::IpAddress));
    let x =
        Expression::compile_expecting("2", Syntax::Compat, &v, ValueType::Double).expect("double");
    assert_eq!(x.eval(&bag(), &mut refs).expect("eval"), Value::Double(2.0));
}

#[test]
fn default_operands_must_agree() {
    let msg = compile_err("request.size | request.path", Syntax::Compat);
    assert!(
        msg.contains("the operands of | have different types (INT64, STRING)"),
        "{msg}"
    );
    assert_eq!(
        compile(r#"source.ip | "1.2.3.4""#, Syntax::Compat).result_type(),
        Some(ValueType::IpAddress)
    );
    let msg = compile_err(r#"source.ip | "not an ip""#, Syntax::Compat);
    assert!(
        msg.contains(r#"cannot convert "not an ip" to IP_ADDRESS"#),
        "{msg}"
    );
}

#[test]
fn typed_literals_convert_or_fail() {
    for syntax in ALL {
        compile(r#"source.ip == "10.0.0.1""#, syntax);
        compile(r#"response.duration > "10ms""#, syntax);
        assert!(compile_err(r#"source.ip == "10.0.0.300""#, syntax).contains("cannot compare"));
        assert!(
            compile_err(r#"ip("300.1.1.1") == source.ip"#, syntax)
                .contains(r#"cannot convert "300.1.1.1" to IP_ADDRESS"#)
        );
        assert!(
            compile_err(r#"timestamp("yesterday") < request.time"#, syntax).contains("TIMESTAMP")
        );
        assert!(compile_err(r#"email("nobody")"#, syntax).contains("EMAIL_ADDRESS"));
    }
}

#[test]
fn operator_type_errors() {
    for syntax in ALL {
        assert!(
            compile_err("request.path && true", syntax)
                .contains("operator && needs a BOOL operand, got STRING")
        );
        assert!(compile_err("!request.size", syntax).contains("operator ! needs a BOOL"));
        assert!(
            compile_err("request.size + request.path", syntax)
                .contains("cannot combine INT64 and STRING")
        );
        assert!(
            compile_err("request.headers < request.headers", syntax)
                .contains("cannot order STRING_MAP")
        );
        assert!(
            compile_err("request.size == request.path", syntax)
                .contains("cannot compare INT64 with STRING")
        );
        assert!(compile_err("request.path[\"x\"]", syntax).contains("cannot index"));
        assert!(compile_err("request.headers[1]", syntax).contains("map key must be a STRING"));
        assert!(compile_err("request.size ? 1 : 2", syntax).contains("BOOL"));
        assert!(compile_err("connection.mtls ? 1 : \"x\"", syntax).contains("different types"));
        assert!(compile_err("nosuchfn(1)", syntax).contains("unknown function nosuchfn()"));
        assert!(
            compile_err("request.path.frobnicate()", syntax)
                .contains("unknown method frobnicate()")
        );
        assert!(compile_err("match(request.path)", syntax).contains("takes 2 argument(s)"));
    }
    assert!(compile_err("null", Syntax::Cel).contains("null is not supported"));
    assert!(compile_err("[1, 2]", Syntax::Compat).contains("only allowed after"));
}

#[test]
fn regexes_are_checked_at_compile_time() {
    for syntax in ALL {
        assert!(
            compile_err(r#"matches(request.path, "(")"#, syntax)
                .contains("invalid regular expression")
        );
        assert!(
            compile_err("request.path.matches(request.host)", syntax)
                .contains("must be a string literal")
        );
    }
}

#[test]
fn unsupported_cel_features_are_rejected_clearly() {
    assert!(compile_err("[1, 2].all(x, x > 0)", Syntax::Cel).contains("comprehension macros"));
    assert!(
        compile_err("{'a': 1}['a'] == 1", Syntax::Cel).contains("map literals are not supported")
    );
}

#[test]
fn expression_is_send_sync_clone_debug() {
    fn assert_traits<T: Send + Sync + Clone + std::fmt::Debug>() {}
    assert_traits::<Expression>();
    let e = compile("request.path", Syntax::Compat);
    assert_eq!(e.source(), "request.path");
    assert!(format!("{e:?}").contains("request.path"));
    assert_eq!(e.syntax(), Syntax::Compat);
}

#[test]
fn cel_errors_carry_offsets() {
    let e = Expression::compile("request.path == nope.nope.nope", Syntax::Cel, &vocab())
        .expect_err("unknown");
    assert_eq!(e.offset, Some(16));
    let e = Expression::compile("request.path == ", Syntax::Cel, &vocab()).expect_err("syntax");
    assert!(e.offset.is_some());
}

#[test]
fn cexl_and_compat_agree_on_mixer_configs() {
    // Expressions taken from Istio 1.4 sample configs.
    let samples = [
        r#"destination.labels["app"] == "ratings" && source.labels["version"] == "v3""#,
        r#"(request.useragent | "") == "Mozilla""#,
        r#"match(request.headers["user-agent"] | "", "Mozilla*")"#,
        r#"request.auth.claims["iss"] | "" == "testing@secure.istio.io""#,
        r#"context.protocol == "http" || context.protocol == "grpc""#,
        r#"(destination.service.host | "unknown") == "details.default.svc.cluster.local""#,
        r#"conditional((context.reporter.kind | "inbound") == "outbound", "client", "server") == "server""#,
    ];
    for src in samples {
        for syntax in [Syntax::Cexl, Syntax::Compat] {
            let e = compile(src, syntax);
            assert_eq!(e.result_type(), Some(ValueType::Bool), "{src}");
            let mut refs = ReferencedAttributes::new();
            let _ = e.eval(&bag(), &mut refs);
        }
    }
}
