//! YAML text to documents: each one a generic JSON-like tree with its header (apiVersion,
//! kind, metadata) checked, plus helpers to walk trees and report errors with field paths.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::{Diagnostics, DocRef, did_you_mean, join};
use crate::source::SourceFile;

/// The only apiVersion accepted (it may also be left out).
pub(crate) const API_VERSION: &str = "config.istio.io/v1alpha2";

/// One parsed document with a usable header.
#[derive(Clone, Debug)]
pub(crate) struct RawDoc {
    /// File and label (`rule deny-bob`) for errors.
    pub doc: DocRef,
    /// `kind` as written.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`, or the default one.
    pub namespace: String,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// `spec` (null when absent); for a bare envoyproxy/ratelimit file, the whole file.
    pub spec: Value,
    /// True for a bare envoyproxy/ratelimit file (top level `domain:` and `descriptors:`), read
    /// as a `ratelimitconfig` named after its domain.
    pub envoy_ratelimit: bool,
}

impl RawDoc {
    /// The name Istio gives the resource: `name.kind.namespace`, with the kind as written
    /// (`requestcount.instance.istio-system`, 1.0-style `requestcount.metric.istio-system`,
    /// `deny.handler.istio-system`, `deny.denier.istio-system`). Adapters, metrics and logs
    /// see this name; references in rules may use any of Istio's shorter forms.
    pub fn full_name(&self) -> std::sync::Arc<str> {
        full_name(&self.name, &self.kind, &self.namespace)
    }
}

/// `name.kind.namespace`, Istio's full name of a resource.
pub(crate) fn full_name(name: &str, kind: &str, namespace: &str) -> std::sync::Arc<str> {
    std::sync::Arc::from(format!("{name}.{kind}.{namespace}"))
}

/// Splits `source` into documents and checks each header; documents with unusable headers
/// are reported and dropped.
///
/// Every document, usable or not, takes the next number of `next_id` as its [`DocRef::id`].
pub(crate) fn parse_file(
    source: &SourceFile,
    default_namespace: &str,
    next_id: &mut usize,
    diags: &mut Diagnostics,
) -> Vec<RawDoc> {
    let mut docs = Vec::new();
    let mut number = 0;
    for (first_line, text) in split_documents(&source.text) {
        let parsed: Result<Option<Value>, _> = serde_saphyr::from_str(&text);
        let value = match parsed {
            Ok(None) | Ok(Some(Value::Null)) => continue,
            Ok(Some(v)) => v,
            Err(e) => {
                number += 1;
                let (line, message) = describe_yaml_error(&e);
                let doc = DocRef {
                    file: source.name.clone(),
                    document: Some(format!("document {number}")),
                    id: *next_id,
                };
                *next_id += 1;
                let field =
                    line.map_or_else(String::new, |l| format!("line {}", l + first_line - 1));
                diags.error(&doc, field, message);
                continue;
            }
        };
        number += 1;
        let id = *next_id;
        *next_id += 1;
        if let Some(doc) = header(source, number, id, value, default_namespace, diags) {
            docs.push(doc);
        }
    }
    docs
}

/// `(line, message)` from a YAML error, without the snippet the error renders.
fn describe_yaml_error(e: &serde_saphyr::Error) -> (Option<usize>, String) {
    let line = e
        .location()
        .map(|l| usize::try_from(l.line()).unwrap_or(usize::MAX))
        .filter(|l| *l > 0);
    let text = e.without_snippet().to_string();
    let first = text.lines().next().unwrap_or("invalid YAML").trim();
    let mut message = first.strip_prefix("error: ").unwrap_or(first);
    // Drop the "line N column M: " prefix: the field says where.
    if let Some(rest) = message.strip_prefix("line ")
        && let Some((_, after)) = rest.split_once(": ")
        && rest
            .split_once(": ")
            .is_some_and(|(pos, _)| pos.contains("column"))
    {
        message = after;
    }
    // And a trailing " at line N, column M".
    if let Some((before, after)) = message.rsplit_once(" at line ")
        && after.contains("column")
        && after
            .chars()
            .all(|c| c.is_ascii_digit() || ", column".contains(c))
    {
        message = before;
    }
    (line, format!("invalid YAML: {message}"))
}

/// Splits multi-document YAML at `---` lines. Returns each document's text with the 1-based
/// line number where it starts. Text after `---` on the same line stays in the document.
fn split_documents(text: &str) -> Vec<(usize, String)> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    for (i, line) in text.lines().enumerate() {
        let is_separator = line
            .strip_prefix("---")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']));
        if is_separator {
            docs.push((start, std::mem::take(&mut current)));
            start = i + 1;
            // Keep columns: blank the marker, keep what follows it.
            current.push_str("   ");
            current.push_str(&line[3..]);
            current.push('\n');
        } else if line.trim_end() == "..." {
            current.push('\n');
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    docs.push((start, current));
    docs
}

fn header(
    source: &SourceFile,
    number: usize,
    id: usize,
    value: Value,
    default_namespace: &str,
    diags: &mut Diagnostics,
) -> Option<RawDoc> {
    let mut doc = DocRef {
        file: source.name.clone(),
        document: Some(format!("document {number}")),
        id,
    };
    let Value::Object(mut top) = value else {
        diags.error(
            &doc,
            "",
            format!(
                "a document must be a mapping with kind, metadata and spec, not {}",
                type_name(&value)
            ),
        );
        return None;
    };
    if is_envoy_ratelimit(&top) {
        return envoy_ratelimit(doc, top, default_namespace, diags);
    }
    let kind = match top.get("kind") {
        Some(Value::String(k)) if !k.is_empty() => Some(k.clone()),
        Some(other) if !other.is_null() => {
            diags.error(&doc, "kind", expected_string(other));
            None
        }
        _ => {
            diags.error(&doc, "kind", "missing");
            None
        }
    };
    let metadata = top.remove("metadata").unwrap_or(Value::Null);
    let meta = match &metadata {
        Value::Object(m) => Some(m),
        Value::Null => {
            diags.error(&doc, "metadata", "missing (it needs at least a name)");
            None
        }
        other => {
            diags.error(
                &doc,
                "metadata",
                format!("expected a mapping, found {}", type_name(other)),
            );
            None
        }
    };
    let name = meta.and_then(|m| match m.get("name") {
        Some(Value::String(n)) if !n.is_empty() => Some(n.clone()),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            diags.error(&doc, "metadata.name", "missing");
            None
        }
        Some(other) => {
            diags.error(&doc, "metadata.name", expected_string(other));
            None
        }
    });
    if let (Some(kind), Some(name)) = (&kind, &name) {
        doc.document = Some(format!("{kind} {name}"));
    }
    match top.get("apiVersion") {
        None | Some(Value::Null) => {}
        Some(Value::String(v)) if v == API_VERSION => {}
        Some(other) => {
            let shown = other
                .as_str()
                .map_or_else(|| other.to_string(), str::to_string);
            diags.error(
                &doc,
                "apiVersion",
                format!("unsupported apiVersion {shown:?} (expected {API_VERSION})"),
            );
            return None;
        }
    }
    check_keys(&top, &["apiVersion", "kind", "spec"], "", &doc, diags);
    let mut namespace = default_namespace.to_string();
    let mut annotations = BTreeMap::new();
    if let Some(meta) = meta {
        check_keys(
            meta,
            &[
                "name",
                "namespace",
                "annotations",
                "labels",
                // Set by Kubernetes on objects read back from a cluster; ignored.
                "uid",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "selfLink",
            ],
            "metadata",
            &doc,
            diags,
        );
        match meta.get("namespace") {
            None | Some(Value::Null) => {}
            Some(Value::String(ns)) if !ns.is_empty() => namespace = ns.clone(),
            Some(Value::String(_)) => {}
            Some(other) => diags.error(&doc, "metadata.namespace", expected_string(other)),
        }
        annotations = string_map(meta.get("annotations"), "metadata.annotations", &doc, diags);
        string_map(meta.get("labels"), "metadata.labels", &doc, diags);
    }
    Some(RawDoc {
        doc,
        kind: kind?,
        name: name?,
        namespace,
        annotations,
        spec: top.remove("spec").unwrap_or(Value::Null),
        envoy_ratelimit: false,
    })
}

/// A file as envoyproxy/ratelimit reads it from its runtime directory: `domain` and
/// `descriptors` at the top, no Kubernetes header.
fn is_envoy_ratelimit(top: &Map<String, Value>) -> bool {
    ["kind", "metadata", "spec", "apiVersion"]
        .iter()
        .all(|k| !top.contains_key(*k))
        && (top.contains_key("domain") || top.contains_key("descriptors"))
}

/// A bare envoyproxy/ratelimit file as a `ratelimitconfig` document named after its domain
/// (characters other than letters, digits, `-` and `_` become `_`, so that the name has no
/// dots to be read as a namespace), in the default namespace.
fn envoy_ratelimit(
    mut doc: DocRef,
    top: Map<String, Value>,
    default_namespace: &str,
    diags: &mut Diagnostics,
) -> Option<RawDoc> {
    let domain = match top.get("domain") {
        Some(Value::String(d)) if !d.is_empty() => d.clone(),
        Some(other) if !other.is_null() && !other.is_string() => {
            diags.error(&doc, "domain", expected_string(other));
            return None;
        }
        // envoyproxy/ratelimit: "config file cannot have empty domain".
        _ => {
            diags.error(
                &doc,
                "domain",
                "missing: an envoyproxy/ratelimit config file cannot have an empty domain",
            );
            return None;
        }
    };
    let name: String = domain
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    doc.document = Some(format!("ratelimit domain {domain}"));
    Some(RawDoc {
        doc,
        kind: "ratelimitconfig".to_string(),
        name,
        namespace: default_namespace.to_string(),
        annotations: BTreeMap::new(),
        spec: Value::Object(top),
        envoy_ratelimit: true,
    })
}

fn string_map(
    value: Option<&Value>,
    path: &str,
    doc: &DocRef,
    diags: &mut Diagnostics,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    match value {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                match v {
                    Value::String(s) => {
                        out.insert(k.clone(), s.clone());
                    }
                    other => diags.error(doc, join(path, k), expected_string(other)),
                }
            }
        }
        Some(other) => diags.error(
            doc,
            path,
            format!("expected a mapping, found {}", type_name(other)),
        ),
    }
    out
}

/// Reports every key of `map` not in `allowed` as an unknown field, with a suggestion.
pub(crate) fn check_keys(
    map: &Map<String, Value>,
    allowed: &[&str],
    path: &str,
    doc: &DocRef,
    diags: &mut Diagnostics,
) {
    for key in map.keys() {
        if !allowed.contains(&key.as_str()) {
            let hint = did_you_mean(key, allowed.iter().copied());
            diags.error(doc, join(path, key), format!("unknown field{hint}"));
        }
    }
}

/// `expected a string, found ...`, with a hint for YAML 1.1 booleans (`no`, `y`, `on`...).
pub(crate) fn expected_string(found: &Value) -> String {
    let hint = if found.is_boolean() {
        " (quote it: YAML reads yes/no/y/n/on/off/true/false as booleans)"
    } else {
        ""
    };
    format!("expected a string, found {}{hint}", type_name(found))
}

/// For messages: `a string`, `a mapping`...
pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The spec as a mapping (null counts as empty); reports anything else.
pub(crate) fn as_map<'a>(
    value: &'a Value,
    path: &str,
    doc: &DocRef,
    diags: &mut Diagnostics,
) -> Option<std::borrow::Cow<'a, Map<String, Value>>> {
    match value {
        Value::Object(m) => Some(std::borrow::Cow::Borrowed(m)),
        Value::Null => Some(std::borrow::Cow::Owned(Map::new())),
        other => {
            diags.error(
                doc,
                path,
                format!("expected a mapping, found {}", type_name(other)),
            );
            None
        }
    }
}

/// A block that must be a mapping, borrowed; unlike [`as_map`], null is reported too.
pub(crate) fn mapping<'v>(
    value: &'v Value,
    path: &str,
    doc: &DocRef,
    diags: &mut Diagnostics,
) -> Option<&'v Map<String, Value>> {
    match value {
        Value::Object(m) => Some(m),
        other => {
            diags.error(
                doc,
                path,
                format!("expected a mapping, found {}", type_name(other)),
            );
            None
        }
    }
}

/// The items of an optional list (absent or null: none); reports anything else.
pub(crate) fn list<'v>(
    value: Option<&'v Value>,
    path: &str,
    doc: &DocRef,
    diags: &mut Diagnostics,
) -> &'v [Value] {
    match value {
        None | Some(Value::Null) => &[],
        Some(Value::Array(items)) => items,
        Some(other) => {
            diags.error(
                doc,
                path,
                format!("expected a list, found {}", type_name(other)),
            );
            &[]
        }
    }
}

/// An optional string field; reports non-strings.
pub(crate) fn opt_string(
    map: &Map<String, Value>,
    key: &str,
    path: &str,
    doc: &DocRef,
    diags: &mut Diagnostics,
) -> Option<String> {
    match map.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            diags.error(doc, join(path, key), expected_string(other));
            None
        }
    }
}

/// An expression leaf: a string, or a number or boolean taken as a literal expression.
pub(crate) fn expression_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (Vec<RawDoc>, Diagnostics) {
        let mut diags = Diagnostics::default();
        let docs = parse_file(
            &SourceFile::new("f.yaml", text),
            "istio-system",
            &mut 0,
            &mut diags,
        );
        (docs, diags)
    }

    #[test]
    fn splits_documents_and_reads_headers() {
        let (docs, diags) = parse(
            "---\napiVersion: config.istio.io/v1alpha2\nkind: rule\nmetadata:\n  name: r\n  namespace: ns\n  annotations: {a: b}\nspec: {match: x}\n---\n# nothing\n--- \nkind: handler\nmetadata: {name: h}\n...\n",
        );
        assert!(diags.errors.is_empty(), "{:?}", diags.errors);
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].kind, "rule");
        assert_eq!(docs[0].namespace, "ns");
        assert_eq!(docs[0].annotations.get("a").map(String::as_str), Some("b"));
        assert_eq!(docs[0].doc.document.as_deref(), Some("rule r"));
        assert_eq!(docs[1].namespace, "istio-system");
        assert!(docs[1].spec.is_null());
    }

    #[test]
    fn reports_header_problems() {
        let (docs, diags) = parse(
            "kind: rule\nmetadata: {name: r, nmespace: x}\nspec: {}\nextra: 1\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\nkind: rule\n---\n- a list\n",
        );
        assert_eq!(docs.len(), 1);
        let shown: Vec<String> = diags.errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "f.yaml: rule r: extra: unknown field",
                "f.yaml: rule r: metadata.nmespace: unknown field (did you mean namespace?)",
                "f.yaml: ConfigMap c: apiVersion: unsupported apiVersion \"v1\" (expected config.istio.io/v1alpha2)",
                "f.yaml: document 3: metadata: missing (it needs at least a name)",
                "f.yaml: document 4: a document must be a mapping with kind, metadata and spec, not a list",
            ]
        );
    }

    #[test]
    fn yaml_errors_carry_the_file_line() {
        let (docs, diags) =
            parse("kind: rule\nmetadata: {name: a}\n---\nkind: rule\nmetadata: [1\nspec: 2\n");
        assert_eq!(docs.len(), 1);
        assert_eq!(diags.errors.len(), 1);
        let e = &diags.errors[0];
        assert_eq!(e.document.as_deref(), Some("document 2"));
        assert!(e.field.starts_with("line "), "{e}");
        let line: usize = e.field[5..].parse().expect("number");
        assert!((5..=6).contains(&line), "{e}");
        assert!(e.message.starts_with("invalid YAML: "), "{e}");
    }
}
