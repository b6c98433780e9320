//! `STRING_MAP` values: headers, labels, claims.

use std::fmt;
use std::ops::Range;

/// A string-to-string map with O(log n) lookup, built once per request.
///
/// Entries are kept sorted by key; when a key repeats, the first value given wins (later ones
/// are dropped, as for a header sent twice where only one value is kept).
///
/// Keys and values share one text buffer: a request's headers are then two allocations,
/// not two per header, which is most of what building a bag used to cost.
#[derive(Clone, Default)]
pub struct StringMap {
    /// Every key and value, each key followed by its value.
    text: String,
    /// Sorted by key.
    entries: Vec<Entry>,
}

/// Where one entry lies in the text: the key in `start..split`, the value in `split..end`.
#[derive(Clone, Copy, Debug)]
struct Entry {
    start: usize,
    split: usize,
    end: usize,
}

impl Entry {
    fn key(self) -> Range<usize> {
        self.start..self.split
    }

    fn value(self) -> Range<usize> {
        self.split..self.end
    }
}

impl StringMap {
    /// An empty map.
    pub fn new() -> StringMap {
        StringMap::default()
    }

    /// Builds a map from pairs in any order.
    pub fn from_pairs<K, V, I>(pairs: I) -> StringMap
    where
        K: AsRef<str>,
        V: AsRef<str>,
        I: IntoIterator<Item = (K, V)>,
    {
        let pairs = pairs.into_iter();
        let hint = pairs.size_hint().0;
        // Headers run to a few dozen bytes each; one guess saves most regrowing.
        let mut builder = StringMapBuilder::with_capacity(hint, hint * 32);
        for (k, v) in pairs {
            builder.push(&[k.as_ref()], v.as_ref());
        }
        builder.build()
    }

    /// The value for `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        // Compared as bytes (the same order as `str`'s): slicing the text as `str` checked
        // char boundaries at every step of the search.
        let text = self.text.as_bytes();
        self.entries
            .binary_search_by(|e| text[e.key()].cmp(key.as_bytes()))
            .ok()
            .map(|i| &self.text[self.entries[i].value()])
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
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|e| (&self.text[e.key()], &self.text[e.value()]))
    }
}

/// A [`StringMap`] made entry by entry, a key written in as many pieces as it comes in
/// (`request.headers` `[` `x-user` `]` in a decision record): no string is made for a key
/// alone. Entries may come in any order; as in [`StringMap::from_pairs`], the first of equal
/// keys wins.
#[derive(Default)]
pub struct StringMapBuilder {
    map: StringMap,
}

impl StringMapBuilder {
    /// A builder with room for `entries` entries of `text` bytes in all.
    pub fn with_capacity(entries: usize, text: usize) -> StringMapBuilder {
        StringMapBuilder {
            map: StringMap {
                text: String::with_capacity(text),
                entries: Vec::with_capacity(entries),
            },
        }
    }

    /// Adds the entry whose key is `key`'s pieces joined.
    // Inlined: `from_pairs` calls it for every header of every request, with one piece; a
    // call per entry cost about 40 instructions a header more than the loop it replaced.
    #[inline]
    pub fn push(&mut self, key: &[&str], value: &str) {
        let text = &mut self.map.text;
        let start = text.len();
        for part in key {
            text.push_str(part);
        }
        let split = text.len();
        text.push_str(value);
        self.map.entries.push(Entry {
            start,
            split,
            end: text.len(),
        });
    }

    /// Whether no entry was added.
    pub fn is_empty(&self) -> bool {
        self.map.entries.is_empty()
    }

    /// The map.
    pub fn build(self) -> StringMap {
        let StringMap { text, mut entries } = self.map;
        // A stable sort keeps the first of equal keys first, so dedup keeps it.
        entries.sort_by(|a, b| text[a.key()].cmp(&text[b.key()]));
        entries.dedup_by(|later, earlier| text[later.key()] == text[earlier.key()]);
        StringMap { text, entries }
    }
}

// Two maps built from the same pairs in another order lay their text out differently, so
// equality is of the entries, not of the buffers.
impl PartialEq for StringMap {
    fn eq(&self, other: &StringMap) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for StringMap {}

impl fmt::Debug for StringMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
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
        assert_eq!(m.get("a"), Some("1"));
        assert_eq!(m.get("b"), Some("2"));
        assert_eq!(m.get("c"), None);
        assert_eq!(m.to_string(), r#"{"a": "1", "b": "2"}"#);
    }

    proptest::proptest! {
        #[test]
        fn agrees_with_a_first_wins_ordered_map(
            pairs in proptest::collection::vec(("[a-c]{0,3}", ".{0,4}"), 0..40),
            probes in proptest::collection::vec("[a-c]{0,3}", 0..10),
        ) {
            let m = StringMap::from_pairs(pairs.iter().map(|(k, v)| (k, v)));
            let mut model = std::collections::BTreeMap::new();
            for (k, v) in &pairs {
                model.entry(k.as_str()).or_insert(v.as_str());
            }
            proptest::prop_assert!(m.iter().eq(model.iter().map(|(k, v)| (*k, *v))));
            for k in pairs.iter().map(|(k, _)| k).chain(&probes) {
                proptest::prop_assert_eq!(m.get(k), model.get(k.as_str()).copied());
            }
            // Built from its own entries in reverse order, it is the same map.
            let entries: Vec<_> = m.iter().collect();
            proptest::prop_assert_eq!(&StringMap::from_pairs(entries.into_iter().rev()), &m);
            // Keys written in pieces make the same map as keys written whole.
            let mut pieces = StringMapBuilder::default();
            for (k, v) in &pairs {
                let (head, tail) = k.split_at(k.len() / 2);
                pieces.push(&[head, "", tail], v);
            }
            proptest::prop_assert_eq!(pieces.is_empty(), pairs.is_empty());
            proptest::prop_assert_eq!(&pieces.build(), &m);
        }
    }
}
