//! Validation never panics, whatever the input: it returns errors.

use std::sync::Arc;

use mixer_adapter_api::AdapterRegistry;
use mixer_config::{ConfigOptions, SourceFile, validate};
use proptest::prelude::*;

const VALID: &str = r#"kind: handler
metadata: {name: d}
spec: {compiledAdapter: denier, params: {status: {code: 7}}, failPolicy: OPEN}
---
kind: noop
metadata: {name: nop}
---
kind: instance
metadata: {name: a}
spec:
  compiledTemplate: authorization
  params: {subject: {user: source.principal | "", properties: {ns: source.namespace | ""}}}
---
kind: attributemanifest
metadata: {name: m}
spec: {attributes: {my.x: {valueType: STRING}}}
---
kind: rule
metadata: {name: r, annotations: {policy.istio.io/lang: CEXL}}
spec:
  match: match(request.headers["user-agent"] | "", "curl*") && source.namespace == "bad"
  actions: [{handler: nop.noop, instances: [a]}]
  requestHeaderOperations: [{name: x-user, values: [source.principal | ""]}]
"#;

fn registry() -> AdapterRegistry {
    let mut r = AdapterRegistry::new();
    r.register(Arc::new(mixer_adapter_denier::Denier));
    r.register(Arc::new(mixer_adapter_noop::Noop));
    r
}

fn run(text: String) {
    let _ = validate(
        &[SourceFile::new("f.yaml", text)],
        &registry(),
        &ConfigOptions::default(),
    );
}

#[test]
fn the_base_config_is_valid() {
    let v = validate(
        &[SourceFile::new("f.yaml", VALID)],
        &registry(),
        &ConfigOptions::default(),
    );
    assert!(v.is_ok(), "{v:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_text(text in "\\PC{0,200}") {
        run(text);
    }

    #[test]
    fn mutated_config(pos in 0usize..VALID.len(), len in 0usize..12, insert in "[-:{}\\[\\]\"' a-z|.\n]{0,6}") {
        let mut text = VALID.to_string();
        let start = (0..=pos).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        let mut end = (start + len).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.replace_range(start..end, &insert);
        run(text);
    }
}
