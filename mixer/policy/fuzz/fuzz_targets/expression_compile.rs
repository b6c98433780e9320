//! Expressions come from config files, so the compiler sees whatever text an operator (or a
//! typo) produces: in every syntax it must answer with a result or an error, never a panic.
//! What compiles is evaluated over a fixed bag. Recording the attributes read is what the verdict
//! cache keys on, so it must not change the result, and what it records must be true of the bag
//! and within what the expression says it can read.

#![no_main]

use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use mixer_model::{
    AttributeBag, Presence, ReferencedAttributes, StringMap, Value, ValueType, Vocabulary,
};
use mixer_policy::{Expression, Syntax};

const SYNTAXES: [Syntax; 3] = [Syntax::Cel, Syntax::Cexl, Syntax::Compat];

static VOCABULARY: LazyLock<Arc<Vocabulary>> = LazyLock::new(|| Arc::new(Vocabulary::istio()));

/// One attribute of most value types, a map with a few keys, and attributes left absent (every
/// other declared one), so both presence and absence are read.
static BAG: LazyLock<AttributeBag> = LazyLock::new(|| {
    let mut bag = AttributeBag::new(VOCABULARY.clone());
    let values: [(&str, Value); 8] = [
        ("request.method", Value::from("PUT")),
        ("request.url_path", Value::from("/orders/42")),
        ("destination.port", Value::Int64(8443)),
        ("destination.ip", Value::from("fd00::7")),
        ("connection.mtls", Value::Bool(false)),
        ("connection.duration", Value::from("1.5s")),
        ("context.time", Value::from("2024-02-29T12:00:00.5Z")),
        ("source.namespace", Value::from("")),
    ];
    for (name, value) in values {
        bag.set(name, value).expect("fits the standard vocabulary");
    }
    let labels = StringMap::from_pairs([("app", "cart"), ("version", "v2"), ("", "empty key")]);
    bag.set("source.labels", Value::from(labels))
        .expect("a map attribute");
    bag
});

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    for syntax in SYNTAXES {
        let Ok(expression) = Expression::compile(source, syntax, &VOCABULARY) else {
            continue;
        };
        check(&expression);
    }
});

fn check(expression: &Expression) {
    let bag = &*BAG;
    let mut recorded = ReferencedAttributes::new();
    let with = expression.eval(bag, &mut recorded);
    let mut ignoring = ReferencedAttributes::ignoring();
    let without = expression.eval(bag, &mut ignoring);
    // Debug, not ==: NaN is a legitimate result and is never equal to itself.
    assert_eq!(
        format!("{with:?}"),
        format!("{without:?}"),
        "recording changes the result of {expression:?}"
    );
    assert!(ignoring.is_empty(), "an ignoring set recorded reads");

    if let Ok(value) = &with {
        assert_eq!(
            Some(value.value_type()),
            expression.result_type(),
            "{expression:?} gave {value:?}"
        );
    }
    if expression.result_type() == Some(ValueType::Bool) {
        let as_bool = expression.eval_bool(bag, &mut ReferencedAttributes::ignoring());
        assert_eq!(
            format!("{as_bool:?}"),
            format!("{:?}", with.as_ref().map(|v| v.as_bool().expect("a BOOL"))),
            "eval_bool and eval disagree on {expression:?}"
        );
    }

    let readable = expression.attributes();
    for read in recorded.iter() {
        let name = VOCABULARY.name(read.attr);
        assert!(
            readable.contains(&read.attr),
            "{expression:?} read {name}, not among its attributes {readable:?}"
        );
        let value = bag.get_by_name(name);
        let present = match &read.map_key {
            None => value.is_some(),
            Some(key) => {
                let map = value.and_then(Value::as_map);
                let map = map.unwrap_or_else(|| panic!("key {key:?} of {name}, which is no map"));
                map.iter().any(|(k, _)| k == key.as_ref())
            }
        };
        assert_eq!(
            read.presence == Presence::Exact,
            present,
            "{expression:?} recorded {read:?}"
        );
    }
}
