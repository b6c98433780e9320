//! Referenced attributes: what a decision read, as Istio's `ReferencedAttributes` reports it.

use std::sync::Arc;

use crate::vocabulary::AttrId;

/// Whether a read attribute (or map key) was there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Presence {
    /// Read and present: the decision depends on its exact value.
    Exact,
    /// Read and absent: the decision depends on it staying absent.
    Absent,
}

/// One read: an attribute, or one key of a map attribute.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reference {
    /// The attribute.
    pub attr: AttrId,
    /// The map key looked up, for a read of one entry of a `STRING_MAP`.
    pub map_key: Option<Arc<str>>,
    /// Present or absent.
    pub presence: Presence,
}

/// The set of reads made while deciding. Recording is a push; [`Self::normalize`] sorts and
/// removes duplicates when the set is needed as a key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReferencedAttributes {
    refs: Vec<Reference>,
    /// Reads are not recorded (reports: nothing is cached or answered from them).
    ignore: bool,
}

impl ReferencedAttributes {
    /// An empty set.
    pub fn new() -> ReferencedAttributes {
        ReferencedAttributes::default()
    }

    /// A set that records nothing, for evaluations whose reads nobody asks for.
    pub fn ignoring() -> ReferencedAttributes {
        ReferencedAttributes {
            refs: Vec::new(),
            ignore: true,
        }
    }

    /// Whether reads are recorded (false for [`Self::ignoring`]), so a caller can skip
    /// building what it would record.
    pub fn is_recording(&self) -> bool {
        !self.ignore
    }

    /// Records a read of a whole attribute.
    pub fn record(&mut self, attr: AttrId, presence: Presence) {
        if self.ignore {
            return;
        }
        self.refs.push(Reference {
            attr,
            map_key: None,
            presence,
        });
    }

    /// Records a read of one key of a map attribute.
    pub fn record_key(&mut self, attr: AttrId, key: Arc<str>, presence: Presence) {
        if self.ignore {
            return;
        }
        self.refs.push(Reference {
            attr,
            map_key: Some(key),
            presence,
        });
    }

    /// Adds every read of `other`.
    pub fn extend(&mut self, other: &ReferencedAttributes) {
        if self.ignore {
            return;
        }
        self.refs.extend(other.refs.iter().cloned());
    }

    /// Keeps only the reads `keep` accepts (a check drops the reads of attributes an
    /// attribute generator bound, whose values follow from its inputs).
    pub fn retain(&mut self, keep: impl FnMut(&Reference) -> bool) {
        self.refs.retain(keep);
    }

    /// Sorts and removes duplicates.
    pub fn normalize(&mut self) {
        self.refs.sort();
        self.refs.dedup();
    }

    /// The reads, in recording order (or sorted after [`Self::normalize`]).
    pub fn iter(&self) -> impl Iterator<Item = &Reference> {
        self.refs.iter()
    }

    /// How `attr` (with `map_key`) was recorded, if it was.
    pub fn find(&self, attr: AttrId, map_key: Option<&str>) -> Option<Presence> {
        self.refs
            .iter()
            .find(|r| r.attr == attr && r.map_key.as_deref() == map_key)
            .map(|r| r.presence)
    }

    /// Number of recorded reads.
    pub fn len(&self) -> usize {
        self.refs.len()
    }

    /// True when nothing was read.
    pub fn is_empty(&self) -> bool {
        self.refs.is_empty()
    }

    /// Forgets every read, keeping the allocation.
    pub fn clear(&mut self) {
        self.refs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_dedups() {
        let mut r = ReferencedAttributes::new();
        r.record(AttrId(3), Presence::Exact);
        r.record_key(AttrId(1), "x".into(), Presence::Absent);
        r.record(AttrId(3), Presence::Exact);
        r.normalize();
        assert_eq!(r.len(), 2);
        assert_eq!(r.find(AttrId(1), Some("x")), Some(Presence::Absent));
        assert_eq!(r.find(AttrId(1), None), None);
        assert_eq!(r.find(AttrId(3), None), Some(Presence::Exact));
    }
}
