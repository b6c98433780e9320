//! The attribute vocabulary: which attributes exist and their types.

use std::collections::HashMap;
use std::sync::Arc;

use crate::value::ValueType;

/// An attribute's index in its [`Vocabulary`]; expressions resolve names to ids at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttrId(pub u32);

impl AttrId {
    /// The id as a slot index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One declared attribute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttributeInfo {
    /// Dotted name, such as `request.headers`.
    pub name: Arc<str>,
    /// Declared type.
    pub value_type: ValueType,
    /// Free text from the manifest.
    pub description: String,
}

/// Why an attribute cannot be added to a vocabulary.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VocabularyError {
    /// The same name was declared with two types.
    #[error("attribute {name:?} is declared as {existing} and as {new}")]
    TypeConflict {
        /// The attribute.
        name: String,
        /// The type it already had.
        existing: ValueType,
        /// The type the new declaration gives.
        new: ValueType,
    },
    /// The name is empty or has characters an expression could not name.
    #[error("attribute name {0:?} is not a dotted identifier")]
    BadName(String),
}

/// A set of declared attributes, indexed by name and by [`AttrId`].
///
/// The default is Istio's standard vocabulary; `attributemanifest` documents extend it.
#[derive(Clone, Debug, Default)]
pub struct Vocabulary {
    attrs: Vec<AttributeInfo>,
    /// Looked up for every attribute a proxy sends: a fast seeded hash (names come from
    /// requests).
    by_name: HashMap<Arc<str>, AttrId, foldhash::fast::RandomState>,
}

impl Vocabulary {
    /// An empty vocabulary.
    pub fn empty() -> Vocabulary {
        Vocabulary::default()
    }

    /// Istio's standard attributes (source.*, destination.*, request.*, response.*,
    /// connection.*, context.*, api.*, plus the check.* and quota.* attributes the proxies report).
    pub fn istio() -> Vocabulary {
        let mut v = Vocabulary::empty();
        for (name, ty) in crate::standard::STANDARD_ATTRIBUTES {
            // The table is fixed and conflict free; a failure here is a bug caught by the tests.
            let _ = v.declare(name, *ty, "");
        }
        v
    }

    /// Adds an attribute; declaring one again with the same type is a no-op.
    pub fn declare(
        &mut self,
        name: &str,
        value_type: ValueType,
        description: &str,
    ) -> Result<AttrId, VocabularyError> {
        if let Some(&id) = self.by_name.get(name) {
            let existing = self.attrs[id.index()].value_type;
            if existing != value_type {
                return Err(VocabularyError::TypeConflict {
                    name: name.to_string(),
                    existing,
                    new: value_type,
                });
            }
            return Ok(id);
        }
        if !is_attribute_name(name) {
            return Err(VocabularyError::BadName(name.to_string()));
        }
        let id = AttrId(u32::try_from(self.attrs.len()).unwrap_or(u32::MAX));
        let name: Arc<str> = name.into();
        self.attrs.push(AttributeInfo {
            name: name.clone(),
            value_type,
            description: description.to_string(),
        });
        self.by_name.insert(name, id);
        Ok(id)
    }

    /// The id of a declared attribute.
    pub fn lookup(&self, name: &str) -> Option<AttrId> {
        self.by_name.get(name).copied()
    }

    /// The declaration for an id from this vocabulary.
    pub fn info(&self, id: AttrId) -> Option<&AttributeInfo> {
        self.attrs.get(id.index())
    }

    /// The name for an id, or `"<unknown>"` for an id from another vocabulary.
    pub fn name(&self, id: AttrId) -> &str {
        self.info(id).map_or("<unknown>", |a| &a.name)
    }

    /// The type for an id.
    pub fn value_type(&self, id: AttrId) -> Option<ValueType> {
        self.info(id).map(|a| a.value_type)
    }

    /// Number of attributes.
    pub fn len(&self) -> usize {
        self.attrs.len()
    }

    /// True when nothing is declared.
    pub fn is_empty(&self) -> bool {
        self.attrs.is_empty()
    }

    /// All declarations with their ids.
    pub fn iter(&self) -> impl Iterator<Item = (AttrId, &AttributeInfo)> {
        self.attrs
            .iter()
            .enumerate()
            .map(|(i, a)| (AttrId(i as u32), a))
    }

    /// The declared name closest to `name`, for "did you mean" hints.
    pub fn suggest(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .map(|a| (edit_distance(name, &a.name), &a.name))
            .filter(|(d, n)| *d <= (n.len() / 3).max(2))
            .min_by_key(|(d, _)| *d)
            .map(|(_, n)| n.as_ref())
    }
}

fn is_attribute_name(name: &str) -> bool {
    !name.is_empty()
        && name.split('.').all(|seg| {
            !seg.is_empty()
                && seg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
}

/// Levenshtein distance, for suggestions.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn istio_vocabulary_has_the_standard_attributes() {
        let v = Vocabulary::istio();
        assert_eq!(
            v.value_type(v.lookup("request.headers").expect("declared")),
            Some(ValueType::StringMap)
        );
        assert_eq!(
            v.value_type(v.lookup("source.ip").expect("declared")),
            Some(ValueType::IpAddress)
        );
        assert_eq!(
            v.value_type(v.lookup("response.duration").expect("declared")),
            Some(ValueType::Duration)
        );
        assert_eq!(v.len(), crate::standard::STANDARD_ATTRIBUTES.len());
    }

    #[test]
    fn declare_detects_conflicts_and_is_idempotent() {
        let mut v = Vocabulary::istio();
        let id = v.lookup("request.path").expect("declared");
        assert_eq!(v.declare("request.path", ValueType::String, ""), Ok(id));
        assert!(matches!(
            v.declare("request.path", ValueType::Int64, ""),
            Err(VocabularyError::TypeConflict { .. })
        ));
        assert!(matches!(
            v.declare("bad name", ValueType::String, ""),
            Err(VocabularyError::BadName(_))
        ));
        let new = v
            .declare("my.custom", ValueType::Bool, "mine")
            .expect("new");
        assert_eq!(v.name(new), "my.custom");
    }

    #[test]
    fn suggests_close_names() {
        let v = Vocabulary::istio();
        assert_eq!(v.suggest("request.hedaers"), Some("request.headers"));
        assert_eq!(v.suggest("completely.different.thing"), None);
    }
}
