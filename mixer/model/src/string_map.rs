//! `STRING_MAP` values: headers, labels, claims.

use std::fmt;
use std::sync::Arc;

/// A string-to-string map with O(log n) lookup, built once per request.
///
/// Entries are kept sorted by key; when a key repeats, the first value given wins (later ones
/// are dropped, as for a header sent twice where only one value is kept).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StringMap {
    entries: Vec<(Arc<str>, Arc<str>)>,
}

impl StringMap {
    /// An empty map.
    pub fn new() -> StringMap {
        StringMap::default()
    }

    /// Builds a map from pairs in any order.
    pub fn from_pairs<K, V, I>(pairs: I) -> StringMap
    where
        K: Into<Arc<str>>,
        V: Into<Arc<str>>,
        I: IntoIterator<Item = (K, V)>,
    {
        let mut entries: Vec<(Arc<str>, Arc<str>)> = pairs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        // A stable sort keeps the first of equal keys first, so dedup keeps it.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries.dedup_by(|later, earlier| later.0 == earlier.0);
        StringMap { entries }
    }

    /// The value for `key`.
    pub fn get(&self, key: &str) -> Option<&Arc<str>> {
        self.entries
            .binary_search_by(|(k, _)| k.as_ref().cmp(key))
            .ok()
            .map(|i| &self.entries[i].1)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
    }
}

impl fmt::Display for StringMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (k, v)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k:?}: {v:?}")?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_and_first_value_wins() {
        let m = StringMap::from_pairs([("b", "2"), ("a", "1"), ("b", "3")]);
        assert_eq!(m.len(), 2);
        assert_eq!(m.get("a").map(|v| v.as_ref()), Some("1"));
        assert_eq!(m.get("b").map(|v| v.as_ref()), Some("2"));
        assert_eq!(m.get("c"), None);
        assert_eq!(m.to_string(), r#"{"a": "1", "b": "2"}"#);
    }

    proptest::proptest! {
        #[test]
        fn every_key_is_found(keys in proptest::collection::vec("[a-z]{0,4}", 0..50)) {
            let m = StringMap::from_pairs(keys.iter().map(|k| (k.as_str(), "v")));
            for k in &keys {
                proptest::prop_assert!(m.get(k).is_some());
            }
        }
    }
}
