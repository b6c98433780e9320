//! Config errors and warnings: where (file, document, field path) and what.

use std::fmt;

/// One problem found while loading config, or a warning about a config that loads.
///
/// Displayed as `FILE: DOCUMENT: FIELD: MESSAGE`, for example
/// `rules.yaml: rule deny-bob: spec.match: unknown attribute "request.hedaers" (did you mean
/// request.headers?)`. Parts that are unknown (a file-level parse error has no document) are
/// left out.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConfigError {
    /// The file, as named in [`SourceFile::name`](crate::SourceFile::name).
    pub file: String,
    /// The document: `KIND NAME` (`rule deny-bob`), or `document N` (1-based) when it has
    /// no usable kind or name.
    pub document: Option<String>,
    /// The field path inside the document (`spec.actions[0].handler`), or `line N` for a YAML
    /// syntax error; empty when the problem concerns the whole document.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(document) = &self.document {
            write!(f, ": {document}")?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Where a document came from; every error about it carries this.
#[derive(Clone, Debug)]
pub(crate) struct DocRef {
    pub file: String,
    pub document: Option<String>,
    /// Unique among the documents of one validation (in reading order), so that errors can be
    /// traced to the document to drop.
    pub id: usize,
}

impl DocRef {
    pub fn error(&self, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            document: self.document.clone(),
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Collects errors and warnings while validation goes on.
#[derive(Clone, Debug, Default)]
pub(crate) struct Diagnostics {
    pub errors: Vec<ConfigError>,
    /// The [`DocRef::id`] of each error's document, aligned with `errors`.
    pub error_docs: Vec<usize>,
    pub warnings: Vec<ConfigError>,
    /// Documents left out, without errors of their own, because what they needed was dropped:
    /// `(document, full names of what it needed)`.
    pub dependents: Vec<(usize, Vec<String>)>,
}

impl Diagnostics {
    pub fn error(&mut self, doc: &DocRef, field: impl Into<String>, message: impl Into<String>) {
        self.errors.push(doc.error(field, message));
        self.error_docs.push(doc.id);
    }

    /// Records that `doc` is left out because the documents named `needed` were dropped.
    pub fn dependent(&mut self, doc: &DocRef, needed: Vec<String>) {
        self.dependents.push((doc.id, needed));
    }

    pub fn warn(&mut self, doc: &DocRef, field: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(doc.error(field, message));
    }
}

/// ` (did you mean X?)` when one of `candidates` is close to `name`, else empty.
pub(crate) fn did_you_mean<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> String {
    let best = candidates
        .into_iter()
        .map(|c| (mixer_model::edit_distance(name, c), c))
        .filter(|(d, c)| *d > 0 && *d <= (c.len() / 3).max(2))
        .min_by_key(|(d, _)| *d);
    match best {
        Some((_, c)) => format!(" (did you mean {c}?)"),
        None => String::new(),
    }
}

/// Appends `key` to a field path: `spec` + `match` = `spec.match`.
pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Appends an index to a field path: `spec.actions` + 0 = `spec.actions[0]`.
pub(crate) fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_joins_the_known_parts() {
        let e = ConfigError {
            file: "rules.yaml".into(),
            document: Some("rule deny-bob".into()),
            field: "spec.match".into(),
            message: "bad".into(),
        };
        assert_eq!(e.to_string(), "rules.yaml: rule deny-bob: spec.match: bad");
        let e = ConfigError {
            document: None,
            field: String::new(),
            ..e
        };
        assert_eq!(e.to_string(), "rules.yaml: bad");
    }

    #[test]
    fn suggestions() {
        assert_eq!(
            did_you_mean("handlr", ["handler", "rule"]),
            " (did you mean handler?)"
        );
        assert_eq!(did_you_mean("zzzzzzzz", ["handler", "rule"]), "");
        assert_eq!(did_you_mean("rule", ["rule"]), "");
    }
}
