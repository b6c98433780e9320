use proptest::prelude::*;

use super::*;
use crate::parse::parse;
use crate::syntax::{BinOp, Lit, SynKind};

#[test]
fn default_operator_binds_tighter_than_comparison() {
    let e = parse(r#"a | b == "x""#).expect("parses");
    let SynKind::Binary(BinOp::Eq, lhs, _) = e.kind else {
        panic!("{e:?}")
    };
    assert!(matches!(lhs.kind, SynKind::Binary(BinOp::Default, ..)));
}

#[test]
fn precedence_and_associativity() {
    let e = parse("a || b && c").expect("parses");
    assert!(matches!(e.kind, SynKind::Binary(BinOp::Or, _, _)));
    let e = parse("1 + 2 * 3 == 7 ? x : y").expect("parses");
    assert!(matches!(e.kind, SynKind::Cond(..)));
    let e = parse("1 - 2 - 3").expect("parses");
    let SynKind::Binary(BinOp::Sub, lhs, _) = e.kind else {
        panic!()
    };
    assert!(matches!(lhs.kind, SynKind::Binary(BinOp::Sub, ..)));
}

#[test]
fn literals_and_escapes() {
    let lit = |s: &str| match parse(s).expect("parses").kind {
        SynKind::Lit(l) => l,
        other => panic!("{other:?}"),
    };
    assert_eq!(lit(r#""a\"b\n""#), Lit::Str("a\"b\n".into()));
    assert_eq!(lit(r"'it\'s'"), Lit::Str("it's".into()));
    assert_eq!(lit(r"`raw\n`"), Lit::Str("raw\\n".into()));
    assert_eq!(lit(r#""\u00e9\x41""#), Lit::Str("éA".into()));
    assert_eq!(lit("42"), Lit::Int(42));
    assert_eq!(lit("-9223372036854775808"), Lit::Int(i64::MIN));
    assert_eq!(lit("7u"), Lit::UInt(7));
    assert_eq!(lit("0x1F"), Lit::Int(31));
    assert_eq!(lit("1.5e3"), Lit::Double(1500.0));
    assert_eq!(lit("true"), Lit::Bool(true));
    assert_eq!(lit("null"), Lit::Null);
}

#[test]
fn postfix_forms() {
    let e = parse(r#"request.headers["x"].startsWith("a")"#).expect("parses");
    let SynKind::Call {
        target: Some(t),
        name,
        args,
    } = e.kind
    else {
        panic!()
    };
    assert_eq!(name, "startsWith");
    assert_eq!(args.len(), 1);
    assert!(matches!(t.kind, SynKind::Index(..)));
    let e = parse("x in [1, 2, 3,]").expect("parses");
    assert!(matches!(e.kind, SynKind::Binary(BinOp::In, ..)));
}

#[test]
fn syntax_errors_have_positions_and_clear_messages() {
    let e = parse("a ==").expect_err("incomplete");
    assert_eq!(e.offset, Some(4));
    assert!(e.message.contains("expected an operand"), "{}", e.message);
    let e = parse(r#""open"#).expect_err("unterminated");
    assert_eq!(e.message, "unterminated string literal");
    let e = parse("a & b").expect_err("bad char");
    assert!(
        e.message.contains("unexpected character '&'"),
        "{}",
        e.message
    );
    let e = parse("(a").expect_err("unclosed");
    assert!(e.message.contains("expected \")\""), "{}", e.message);
    let e = parse("a b").expect_err("trailing");
    assert!(e.message.contains("end of expression"), "{}", e.message);
    let e = parse("{}").expect_err("map literal");
    assert!(e.message.contains("map literals are not supported"));
    let deep = "(".repeat(500) + "a" + &")".repeat(500);
    assert!(
        parse(&deep)
            .expect_err("deep")
            .message
            .contains("nested too deeply")
    );
    let long = vec!["a"; 5000].join(" + ");
    assert!(
        parse(&long)
            .expect_err("long")
            .message
            .contains("too large")
    );
}

#[test]
fn cel_syntax_errors_are_compile_errors() {
    let msg = compile_err("request.path ==", Syntax::Cel);
    assert!(msg.starts_with("syntax error"), "{msg}");
    let msg = compile_err(r#"request.path | "x""#, Syntax::Cel);
    assert!(msg.starts_with("syntax error"), "{msg}");
}

/// Deep CEL is parsed on a stack of its own, or refused, never overflowing the caller's:
/// tokio's blocking threads, where reloads run, have 2 MiB (the fuzz target found 64 levels
/// of parentheses overflowing 8 MiB in an unoptimised build, which aborts the process).
#[test]
fn deep_cel_never_overflows_the_callers_stack() {
    let on_2_mib = |src: String| {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                Expression::compile(&src, Syntax::Cel, &vocab())
                    .map(|_| ())
                    .map_err(|e| e.message)
            })
            .expect("a thread")
            .join()
            .expect("no panic")
    };
    for (open, close) in [("(", ")"), ("[", "]"), ("{1: ", "}"), ("size(", ")")] {
        let nested = |n: usize| open.repeat(n) + "1" + &close.repeat(n);
        for n in [1, 8, 9, 40, 64] {
            let answer = on_2_mib(nested(n));
            assert!(
                answer
                    .as_ref()
                    .err()
                    .is_none_or(|e| !e.contains("nested too deeply")),
                "{open} x{n}: {answer:?}"
            );
        }
        let too_deep = on_2_mib(nested(65)).expect_err("65 levels");
        assert!(too_deep.contains("nested too deeply"), "{too_deep}");
    }
    let conditionals = "true ? 1 : ".repeat(70) + "2";
    assert!(
        on_2_mib(conditionals)
            .expect_err("70 conditionals")
            .contains("nested too deeply")
    );
    // Brackets in a string are text: not nesting.
    let quoted = format!("request.path == \"{}\"", "(".repeat(200));
    assert_eq!(on_2_mib(quoted), Ok(()));
}

#[test]
fn annotation_values() {
    assert_eq!(Syntax::from_annotation("cel"), Some(Syntax::Cel));
    assert_eq!(Syntax::from_annotation("CEXL"), Some(Syntax::Cexl));
    assert_eq!(Syntax::from_annotation("Compat"), Some(Syntax::Compat));
    assert_eq!(Syntax::from_annotation("go"), None);
    assert_eq!(Syntax::default(), Syntax::Compat);
}

proptest! {
    #[test]
    fn parser_never_panics(s in ".{0,64}") {
        let _ = parse(&s);
        for syntax in ALL {
            let _ = crate::Expression::compile(&s, syntax, &vocab());
        }
    }

    #[test]
    fn parser_never_panics_on_expression_like_input(s in r#"[a-z.\[\]()"'|&!=<>+*/%?:, 0-9-]{0,48}"#) {
        let _ = parse(&s);
        for syntax in ALL {
            let _ = crate::Expression::compile(&s, syntax, &vocab());
        }
    }
}
