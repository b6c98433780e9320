//! Attribute bags: the attributes of one request.

use std::sync::Arc;

use crate::value::{Value, ValueType};
use crate::vocabulary::{AttrId, Vocabulary};

/// Read access to a request's attributes. Expressions read bags only through this trait.
/// `Send + Sync` so that a check can hold a bag across the awaits of its handler calls.
pub trait Bag: Send + Sync {
    /// The value of a declared attribute, if the request carries it.
    fn get(&self, id: AttrId) -> Option<&Value>;
}

/// Why a value cannot go into a bag.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BagError {
    /// The value's type is not the declared one and text conversion did not help.
    #[error("attribute {name:?} is declared {declared} but got a {got} value")]
    WrongType {
        /// The attribute.
        name: String,
        /// Its declared type.
        declared: ValueType,
        /// The type given.
        got: ValueType,
    },
}

/// The standard bag: one slot per declared attribute (an O(1) lookup), plus a side list for
/// attributes a protocol sends that the vocabulary does not declare.
///
/// Two allocations (the slots, and which of them are filled), built against the vocabulary of
/// the config snapshot that will evaluate it. [`AttributeBag::clear`] lets a caller reuse it.
#[derive(Clone, Debug)]
pub struct AttributeBag {
    vocabulary: Arc<Vocabulary>,
    slots: Vec<Option<Value>>,
    undeclared: Vec<(Arc<str>, Value)>,
    /// The slots holding a value: [`AttributeBag::clear`] empties only these (a record
    /// fills a few dozen of a vocabulary's hundreds).
    present: Vec<AttrId>,
}

impl AttributeBag {
    /// An empty bag for `vocabulary`.
    pub fn new(vocabulary: Arc<Vocabulary>) -> AttributeBag {
        let slots = vec![None; vocabulary.len()];
        AttributeBag {
            vocabulary,
            slots,
            undeclared: Vec::new(),
            // Room for a typical request's attributes without growing.
            present: Vec::with_capacity(32),
        }
    }

    /// The vocabulary the bag was built for.
    pub fn vocabulary(&self) -> &Arc<Vocabulary> {
        &self.vocabulary
    }

    /// Sets a declared attribute by id. The caller guarantees the type; see [`Self::set`].
    pub fn set_id(&mut self, id: AttrId, value: Value) {
        if let Some(slot) = self.slots.get_mut(id.index()) {
            if slot.is_none() {
                self.present.push(id);
            }
            *slot = Some(value);
        }
    }

    /// Sets an attribute by name. A declared attribute must have its declared type; a string
    /// is converted when it parses as that type (`"10.0.0.1"` for an IP address). Undeclared
    /// attributes are kept aside, untyped, so nothing a proxy sent is lost.
    pub fn set(&mut self, name: &str, value: Value) -> Result<(), BagError> {
        let Some(id) = self.vocabulary.lookup(name) else {
            match self.undeclared.iter_mut().find(|(n, _)| n.as_ref() == name) {
                Some(entry) => entry.1 = value,
                None => self.undeclared.push((name.into(), value)),
            }
            return Ok(());
        };
        self.set_declared(id, name, value)
    }

    /// [`Self::set`] for a declared attribute whose id the caller looked up (`name` is its
    /// name, for the error).
    pub fn set_declared(&mut self, id: AttrId, name: &str, value: Value) -> Result<(), BagError> {
        let declared = self.vocabulary.value_type(id).unwrap_or(ValueType::String);
        let got = value.value_type();
        let value = if got == declared {
            value
        } else {
            let converted = match (&value, declared) {
                (Value::Int64(i), ValueType::Double) => Some(Value::Double(*i as f64)),
                _ => value.as_str().and_then(|s| Value::parse_as(declared, s)),
            };
            converted.ok_or_else(|| wrong_type(name, declared, got))?
        };
        self.set_id(id, value);
        Ok(())
    }

    /// Whether [`Self::set_declared`] would take a value of type `got` (with its text, for a
    /// string-like one) for attribute `id`, without building the value: for attributes a
    /// caller checks but does not keep.
    pub fn check_declared(
        &self,
        id: AttrId,
        name: &str,
        got: ValueType,
        text: Option<&str>,
    ) -> Result<(), BagError> {
        let declared = self.vocabulary.value_type(id).unwrap_or(ValueType::String);
        let fits = got == declared
            || (got == ValueType::Int64 && declared == ValueType::Double)
            || text.is_some_and(|s| Value::parse_as(declared, s).is_some());
        if fits {
            Ok(())
        } else {
            Err(wrong_type(name, declared, got))
        }
    }

    /// The value of an attribute by name, declared or not.
    pub fn get_by_name(&self, name: &str) -> Option<&Value> {
        match self.vocabulary.lookup(name) {
            Some(id) => self.get(id),
            None => self
                .undeclared
                .iter()
                .find(|(n, _)| n.as_ref() == name)
                .map(|(_, v)| v),
        }
    }

    /// Number of attributes present (declared and undeclared).
    pub fn len(&self) -> usize {
        self.present.len() + self.undeclared.len()
    }

    /// True when no attribute is present.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every value, keeping the allocation.
    pub fn clear(&mut self) {
        for id in self.present.drain(..) {
            if let Some(slot) = self.slots.get_mut(id.index()) {
                *slot = None;
            }
        }
        self.undeclared.clear();
    }

    /// Present attributes as (name, value), declared ones first in vocabulary order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        let declared = self.slots.iter().enumerate().filter_map(|(i, v)| {
            v.as_ref()
                .map(|v| (self.vocabulary.name(AttrId(i as u32)), v))
        });
        declared.chain(self.undeclared.iter().map(|(n, v)| (n.as_ref(), v)))
    }
}

fn wrong_type(name: &str, declared: ValueType, got: ValueType) -> BagError {
    BagError::WrongType {
        name: name.to_string(),
        declared,
        got,
    }
}

impl Bag for AttributeBag {
    fn get(&self, id: AttrId) -> Option<&Value> {
        self.slots.get(id.index()).and_then(Option::as_ref)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_converts_strings_and_rejects_wrong_types() {
        let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
        bag.set("source.ip", Value::from("10.1.2.3"))
            .expect("converts");
        assert_eq!(
            bag.get_by_name("source.ip"),
            Some(&Value::IpAddress("10.1.2.3".parse().expect("ip")))
        );
        let err = bag
            .set("request.size", Value::from("big"))
            .expect_err("not an int");
        assert!(err.to_string().contains("request.size"));
        bag.set("x.custom", Value::Int64(3))
            .expect("undeclared kept");
        assert_eq!(bag.get_by_name("x.custom"), Some(&Value::Int64(3)));
        assert_eq!(bag.len(), 2);
        let names: Vec<&str> = bag.iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["source.ip", "x.custom"]);
        bag.clear();
        assert!(bag.is_empty());
        // Checking without setting answers as setting would.
        let vocabulary = bag.vocabulary().clone();
        let id = |name: &str| vocabulary.lookup(name).expect("declared");
        let check = |name: &str, got, text| bag.check_declared(id(name), name, got, text);
        assert_eq!(
            check("source.ip", ValueType::String, Some("10.1.2.3")),
            Ok(())
        );
        assert_eq!(
            check("request.size", ValueType::String, Some("big")),
            Err(err)
        );
        assert!(check("request.size", ValueType::Bool, None).is_err());
        assert_eq!(check("request.headers", ValueType::StringMap, None), Ok(()));
        assert!(bag.is_empty());
        assert_eq!(bag.get_by_name("source.ip"), None);
    }
}
