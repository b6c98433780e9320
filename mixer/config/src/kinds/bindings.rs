//! An attribute generator instance's `attributeBindings`: which request attributes the
//! handler's outputs (`$out.<field>`) fill, each an expression type-checked at load.

use std::sync::Arc;

use mixer_model::{FieldKind, Template, ValueType, Vocabulary};
use serde_json::{Map, Value};

use super::Doc;
use crate::document::{expression_text, type_name};
use crate::error::{Diagnostics, did_you_mean, join};
use crate::expr::Expression;
use crate::model::AttributeBinding;

/// What `$out.` becomes before parsing: `$` is not an identifier character, and the binding
/// is compiled against [`outputs_vocabulary`] alone, so the rewritten name can only ever
/// reach an output, never a request attribute of the same spelling.
const OUT_PREFIX: &str = "out.";

/// The vocabulary a binding's expression is compiled against: one attribute `out.<field>`
/// per output of `template`, whose id is the field's position in [`Template::outputs`]
/// (which is how the runtime's output bag is indexed).
pub fn outputs_vocabulary(template: Template) -> Vocabulary {
    let mut vocabulary = Vocabulary::empty();
    for field in template.outputs() {
        let ty = match field.kind {
            FieldKind::Value(Some(t)) | FieldKind::Map(Some(t)) => t,
            FieldKind::Value(None) | FieldKind::Map(None) => ValueType::String,
        };
        // Output names are fixed snake-case identifiers: declaring them cannot fail.
        let _ = vocabulary.declare(&format!("{OUT_PREFIX}{}", field.name), ty, "");
    }
    vocabulary
}

/// Validates the attribute bindings of an instance of `template`, found at `path`
/// (`spec.attributeBindings`, or a legacy document's `spec.attribute_bindings`).
pub(crate) fn bindings(
    doc: &Doc<'_>,
    template: Template,
    value: &Value,
    path: &str,
    vocabulary: &Vocabulary,
    diags: &mut Diagnostics,
) -> Vec<AttributeBinding> {
    let raw = &doc.raw.doc;
    let map: &Map<String, Value> = match value {
        Value::Null => return Vec::new(),
        Value::Object(m) => m,
        other => {
            diags.error(
                raw,
                path,
                format!(
                    "expected a mapping of attributes to expressions over $out, found {}",
                    type_name(other)
                ),
            );
            return Vec::new();
        }
    };
    if template.outputs().is_empty() {
        diags.error(
            raw,
            path,
            format!(
                "template {template} produces no attributes (attributeBindings are for attribute generator templates: {})",
                generator_names()
            ),
        );
        return Vec::new();
    }
    let outputs = outputs_vocabulary(template);
    let mut out = Vec::with_capacity(map.len());
    for (name, expr) in map {
        let here = join(path, name);
        let Some(attr) = vocabulary.lookup(name) else {
            let hint = vocabulary
                .suggest(name)
                .map(|s| format!(" (did you mean {s}?)"))
                .unwrap_or_default();
            diags.error(raw, here, format!("unknown attribute {name:?}{hint}"));
            continue;
        };
        let Some(ty) = vocabulary.value_type(attr) else {
            continue;
        };
        let Some(text) = expression_text(expr) else {
            diags.error(
                raw,
                here,
                format!("expected an expression, found {}", type_name(expr)),
            );
            continue;
        };
        let rewritten = match rewrite_out(&text, template) {
            Ok(r) => r,
            Err(message) => {
                diags.error(raw, here, message);
                continue;
            }
        };
        match Expression::compile_expecting(&rewritten, doc.syntax, &outputs, ty) {
            Ok(compiled) => out.push(AttributeBinding {
                attr,
                name: Arc::from(name.as_str()),
                source: Arc::from(text.as_str()),
                expr: compiled,
            }),
            Err(e) => {
                let message = e.message.replace(OUT_PREFIX, "$out.");
                diags.error(raw, here, format!("attribute {name} ({ty}): {message}"));
            }
        }
    }
    out
}

fn generator_names() -> String {
    let names: Vec<&str> = Template::ALL
        .iter()
        .filter(|t| !t.outputs().is_empty())
        .map(|t| t.name())
        .collect();
    names.join(", ")
}

/// `text` with every `$out.<field>` outside string literals spelled `out.<field>`, each
/// field checked against `template`'s outputs.
fn rewrite_out(text: &str, template: Template) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut quote: Option<char> = None;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if let Some(q) = quote {
            out.push(c);
            if c == '\\' {
                if let Some((_, escaped)) = chars.next() {
                    out.push(escaped);
                }
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' | '`' => {
                quote = Some(c);
                out.push(c);
            }
            '$' => {
                let rest = &text[i + 1..];
                let Some(after) = rest.strip_prefix("out.") else {
                    return Err(format!(
                        "only $out.<field> may follow `$` (outputs of template {template}: {})",
                        output_names(template)
                    ));
                };
                let field: String = after
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if template.output(&field).is_none() {
                    let hint = did_you_mean(&field, template.outputs().iter().map(|f| f.name));
                    return Err(format!(
                        "unknown output $out.{field} of template {template}{hint} (outputs: {})",
                        output_names(template)
                    ));
                }
                out.push_str(OUT_PREFIX);
                out.push_str(&field);
                // Skip `out.` and the field name: all ASCII, one char each.
                for _ in 0.."out.".len() + field.len() {
                    chars.next();
                }
            }
            _ => out.push(c),
        }
    }
    Ok(out)
}

fn output_names(template: Template) -> String {
    let names: Vec<&str> = template.outputs().iter().map(|f| f.name).collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_is_rewritten_outside_string_literals_only() {
        assert_eq!(
            rewrite_out(
                r#"$out.source_pod_uid | "$out.x" | '$out.y'"#,
                Template::Kubernetes
            ),
            Ok(r#"out.source_pod_uid | "$out.x" | '$out.y'"#.to_string())
        );
        let e = rewrite_out("$out.source_pod_nme", Template::Kubernetes).unwrap_err();
        assert!(
            e.contains("unknown output $out.source_pod_nme of template kubernetes (did you mean source_pod_name?)"),
            "{e}"
        );
        assert!(rewrite_out("$in.x", Template::Jwt).is_err());
    }
}
