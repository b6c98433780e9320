//! Validation never panics, whatever the input: it returns errors.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile, validate};
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
    fn mutated_adapter_descriptor(pos in 0usize..4096, byte in any::<u8>(), cut in any::<bool>()) {
        let mut set = mixer_proto::testdata::FILE_DESCRIPTOR_SET.to_vec();
        let pos = pos % set.len();
        if cut {
            set.truncate(pos);
        } else {
            set[pos] = byte;
        }
        run(with_adapter(&STANDARD.encode(set), "{backend: {host: h, port: 1}, mode: DENY}"));
    }

    #[test]
    fn arbitrary_typed_params(params in "[-:{}\\[\\]\"' a-zA-Z0-9_,.]{0,40}") {
        let config = STANDARD.encode(mixer_proto::testdata::FILE_DESCRIPTOR_SET);
        run(with_adapter(&config, &params));
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

/// An `adapter` document with `config` and a remote handler of it with `params` (YAML flow).
fn with_adapter(config: &str, params: &str) -> String {
    format!(
        "kind: adapter\nmetadata: {{name: a}}\nspec: {{templates: [listentry], config: '{config}'}}\n---\nkind: handler\nmetadata: {{name: h}}\nspec:\n  adapter: a\n  connection: {{address: 'x:1'}}\n  params: {params}\n"
    )
}
