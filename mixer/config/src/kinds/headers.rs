//! A rule's `requestHeaderOperations` and `responseHeaderOperations`.

use mixer_model::{HeaderOp, ValueType, Vocabulary};
use serde_json::Value;

use super::{Doc, compile_leaf, parse_enum};
use crate::document::{as_map, check_keys, list, opt_string};
use crate::error::{Diagnostics, index, join};
use crate::model::HeaderOperationConfig;

/// Validates the header operations under `spec.KEY`, their values compiled against
/// `vocabulary`.
pub(crate) fn header_ops(
    doc: &Doc<'_>,
    vocabulary: &Vocabulary,
    spec: &serde_json::Map<String, Value>,
    key: &str,
    diags: &mut Diagnostics,
) -> Vec<HeaderOperationConfig> {
    let path = join("spec", key);
    let mut out = Vec::new();
    let items = list(spec.get(key), &path, &doc.raw.doc, diags);
    for (i, item) in items.iter().enumerate() {
        let here = index(&path, i);
        let Some(map) = as_map(item, &here, &doc.raw.doc, diags) else {
            continue;
        };
        check_keys(
            &map,
            &["name", "values", "operation"],
            &here,
            &doc.raw.doc,
            diags,
        );
        let name = opt_string(&map, "name", &here, &doc.raw.doc, diags);
        let name_ok = name.as_deref().is_some_and(is_header_name);
        if !name_ok && !matches!(map.get("name"), Some(v) if !v.is_string() && !v.is_null()) {
            let message = match &name {
                None => "missing".to_string(),
                Some(n) => format!("{n:?} is not a valid header name"),
            };
            diags.error(&doc.raw.doc, join(&here, "name"), message);
        }
        let operation = parse_enum(
            doc,
            map.get("operation"),
            &join(&here, "operation"),
            &[
                ("REPLACE", HeaderOp::Replace),
                ("APPEND", HeaderOp::Append),
                ("REMOVE", HeaderOp::Remove),
            ],
            diags,
        );
        let bad_operation =
            map.get("operation").is_some_and(|v| !v.is_null()) && operation.is_none();
        let operation = operation.unwrap_or(HeaderOp::Replace);
        let values_path = join(&here, "values");
        let raw_values = list(map.get("values"), &values_path, &doc.raw.doc, diags);
        if !bad_operation {
            if operation == HeaderOp::Remove && !raw_values.is_empty() {
                diags.error(&doc.raw.doc, &values_path, "REMOVE takes no values");
            } else if operation != HeaderOp::Remove
                && raw_values.is_empty()
                && map
                    .get("values")
                    .is_none_or(|v| v.is_array() || v.is_null())
            {
                diags.error(
                    &doc.raw.doc,
                    &values_path,
                    "needs at least one value expression",
                );
            }
        }
        let mut values = Vec::new();
        for (j, v) in raw_values.iter().enumerate() {
            let vpath = index(&values_path, j);
            if let Some(e) =
                compile_leaf(doc, v, &vpath, Some(ValueType::String), vocabulary, diags)
            {
                values.push(e);
            }
        }
        if let Some(name) = name.filter(|_| name_ok) {
            out.push(HeaderOperationConfig {
                name,
                values,
                operation,
            });
        }
    }
    out
}

/// RFC 7230 token characters.
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
}
