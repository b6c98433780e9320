use super::*;
use crate::EqualityConstraint;

fn risks(src: &str) -> Vec<String> {
    compile(src, Syntax::Compat).absent_failure_risks()
}

fn cel_risks(src: &str) -> Vec<String> {
    compile(src, Syntax::Cel).absent_failure_risks()
}

#[test]
fn absent_failure_risks() {
    assert_eq!(risks(r#"request.method == "GET""#), vec!["request.method"]);
    // An absent key reads "" (Istio's CEXL): only the map itself can be missing.
    assert_eq!(
        risks(r#"request.headers["x-user"] == "a""#),
        vec!["request.headers"]
    );
    assert_eq!(
        cel_risks(r#"request.headers["x-user"] == "a""#),
        vec!["request.headers[x-user]"]
    );
    assert!(risks(r#"request.method | "GET""#).is_empty());
    assert!(risks(r#"request.headers["x"] | "" == "a""#).is_empty());
    assert_eq!(
        risks(r#"request.host | request.method"#),
        vec!["request.method"]
    );
    assert!(risks(r#"has(request.headers.x) && request.headers.x == "y""#).is_empty());
    assert!(risks(r#""x" in request.headers && request.headers["x"] == "y""#).is_empty());
    assert!(risks(r#"request.headers["x"] == "y" && has(request.headers.x)"#).is_empty());
    assert!(risks(r#"!has(source.ip) || source.ip == "1.2.3.4""#).is_empty());
    assert!(risks(r#"has(source.ip) ? source.ip == "1.2.3.4" : true"#).is_empty());
    assert_eq!(
        risks(r#"has(source.ip) ? true : source.ip == "1.2.3.4""#),
        vec!["source.ip"]
    );
    assert!(risks(r#"has(request.headers) && request.headers["x"] == "y""#).is_empty());
    assert_eq!(
        cel_risks(r#"has(request.headers) && request.headers["x"] == "y""#),
        vec!["request.headers[x]"]
    );
    assert_eq!(
        risks(r#"request.path == "/" && request.method == "GET" && request.path != "/x""#),
        vec!["request.path", "request.method"]
    );
    assert!(risks("true").is_empty());
    // CEXL has no commutative rescue.
    let e = compile(
        r#"request.headers["x"] == "y" && has(request.headers.x)"#,
        Syntax::Cexl,
    );
    assert_eq!(e.absent_failure_risks(), vec!["request.headers"]);
}

#[test]
fn equality_constraints() {
    let e = compile(
        r#"request.method == "GET" && request.headers["x"] == "y" && request.size > 3"#,
        Syntax::Compat,
    );
    assert_eq!(
        e.equality_constraints(),
        vec![
            EqualityConstraint {
                attr: id("request.method"),
                map_key: None,
                value: Value::from("GET")
            },
            EqualityConstraint {
                attr: id("request.headers"),
                map_key: Some("x".into()),
                value: Value::from("y")
            },
        ]
    );
    let e = compile(r#""10.0.0.1" == source.ip"#, Syntax::Cel);
    assert_eq!(
        e.equality_constraints(),
        vec![EqualityConstraint {
            attr: id("source.ip"),
            map_key: None,
            value: Value::IpAddress("10.0.0.1".parse().expect("ip")),
        }]
    );
    assert!(
        compile(
            r#"request.method == "GET" || request.path == "/""#,
            Syntax::Compat
        )
        .equality_constraints()
        .is_empty()
    );
    assert!(
        compile(r#"request.method != "GET""#, Syntax::Compat)
            .equality_constraints()
            .is_empty()
    );
    assert!(
        compile(r#"request.method | "x" == "GET""#, Syntax::Compat)
            .equality_constraints()
            .is_empty()
    );
}

#[test]
fn attributes_lists_every_readable_attribute() {
    let e = compile(
        r#"connection.mtls ? request.headers["a"] : request.path | request.method"#,
        Syntax::Compat,
    );
    let mut want = vec![
        id("connection.mtls"),
        id("request.headers"),
        id("request.path"),
        id("request.method"),
    ];
    want.sort();
    assert_eq!(e.attributes(), want);
}
