//! `attributemanifest` documents: attributes added to the vocabulary before any expression is
//! compiled.

use mixer_model::{ValueType, Vocabulary};
use serde_json::Value;

use super::Doc;
use crate::document::{as_map, check_keys, opt_string, type_name};
use crate::error::{Diagnostics, did_you_mean, join};

/// Declares a manifest's attributes in `vocabulary`, reporting bad types and conflicts.
pub(crate) fn manifest(doc: &Doc<'_>, vocabulary: &mut Vocabulary, diags: &mut Diagnostics) {
    let raw = doc.raw;
    let Some(spec) = as_map(&raw.spec, "spec", &raw.doc, diags) else {
        return;
    };
    check_keys(
        &spec,
        &["name", "revision", "attributes"],
        "spec",
        &raw.doc,
        diags,
    );
    opt_string(&spec, "name", "spec", &raw.doc, diags);
    if let Some(v) = spec.get("revision")
        && !matches!(v, Value::String(_) | Value::Number(_) | Value::Null)
    {
        diags.error(
            &raw.doc,
            "spec.revision",
            format!("expected a string, found {}", type_name(v)),
        );
    }
    let attributes = match spec.get("attributes") {
        None | Some(Value::Null) => return,
        Some(Value::Object(m)) => m,
        Some(other) => {
            diags.error(
                &raw.doc,
                "spec.attributes",
                format!(
                    "expected a mapping of attribute names, found {}",
                    type_name(other)
                ),
            );
            return;
        }
    };
    for (name, info) in attributes {
        let path = join("spec.attributes", name);
        let info = match info {
            Value::Object(m) => m,
            other => {
                diags.error(
                    &raw.doc,
                    path,
                    format!(
                        "expected a mapping with valueType, found {}",
                        type_name(other)
                    ),
                );
                continue;
            }
        };
        check_keys(info, &["valueType", "description"], &path, &raw.doc, diags);
        let description =
            opt_string(info, "description", &path, &raw.doc, diags).unwrap_or_default();
        let type_path = join(&path, "valueType");
        let value_type = match info.get("valueType") {
            Some(Value::String(t)) => match ValueType::from_manifest_name(t) {
                Some(t) => t,
                None => {
                    let hint = did_you_mean(t, ValueType::ALL.iter().map(|t| t.manifest_name()));
                    diags.error(
                        &raw.doc,
                        type_path,
                        format!("unknown value type {t:?}{hint}"),
                    );
                    continue;
                }
            },
            None | Some(Value::Null) => {
                diags.error(&raw.doc, type_path, "missing");
                continue;
            }
            Some(other) => {
                diags.error(
                    &raw.doc,
                    type_path,
                    format!(
                        "expected a value type such as STRING, found {}",
                        type_name(other)
                    ),
                );
                continue;
            }
        };
        if let Err(e) = vocabulary.declare(name, value_type, &description) {
            let field = match e {
                mixer_model::VocabularyError::TypeConflict { .. } => type_path,
                mixer_model::VocabularyError::BadName(_) => path,
            };
            diags.error(&raw.doc, field, e.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{errors, ok};
    use mixer_model::ValueType;

    const MANIFEST: &str = "kind: attributemanifest\nmetadata: {name: mine}\nspec:\n  name: mine\n  revision: \"1\"\n  attributes:\n    my.tenant: {valueType: STRING, description: who pays}\n    request.path: {valueType: STRING}\n";

    #[test]
    fn manifests_extend_the_vocabulary_before_expressions_compile() {
        // The instance comes first in the file; the manifest still applies to it.
        let yaml = format!(
            "kind: instance\nmetadata: {{name: l}}\nspec: {{compiledTemplate: listentry, params: {{value: my.tenant}}}}\n---\n{MANIFEST}"
        );
        let v = ok(&yaml);
        let vocab = &v.config.vocabulary;
        let id = vocab.lookup("my.tenant").expect("declared");
        assert_eq!(vocab.value_type(id), Some(ValueType::String));
        assert_eq!(
            vocab.info(id).map(|a| a.description.as_str()),
            Some("who pays")
        );
        assert_eq!(v.config.dump()["attributes"]["my.tenant"], "STRING");
    }

    #[test]
    fn conflicts_and_bad_types_are_errors() {
        assert_eq!(
            errors(
                "kind: attributemanifest\nmetadata: {name: m}\nspec:\n  attributes:\n    request.path: {valueType: INT64}\n    my.x: {valueType: STRNG}\n    my.y: {type: BOOL}\n"
            ),
            [
                "c.yaml: attributemanifest m: spec.attributes.request.path.valueType: attribute \"request.path\" is declared as STRING and as INT64",
                "c.yaml: attributemanifest m: spec.attributes.my.x.valueType: unknown value type \"STRNG\" (did you mean STRING?)",
                "c.yaml: attributemanifest m: spec.attributes.my.y.type: unknown field",
                "c.yaml: attributemanifest m: spec.attributes.my.y.valueType: missing",
            ]
        );
    }
}
