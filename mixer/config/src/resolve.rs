//! Name resolution for rule references, as in Istio 1.4: a reference is `name`,
//! `name.namespace`, `name.kind` or `name.kind.namespace`, where `kind` is the generic kind
//! (`handler`, `instance`) or the document's own kind (`denier`, `checknothing`).
//!
//! Unqualified parts are taken from the rule's namespace first; a reference that names no
//! namespace and finds nothing there is then looked up in the default namespace, where
//! shared handlers and instances usually live.

/// One handler or instance document that references may point at.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub name: String,
    pub namespace: String,
    /// The kind as written (`handler`, `denier`).
    pub kind: String,
    /// `Some(index)` into the validated list; `None` when the document had errors.
    pub index: Option<usize>,
    /// Istio's full name of the document it comes from (`name.kind.namespace`).
    pub document: String,
}

/// What a reference resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Resolution {
    /// A valid entry: its index.
    Found(usize),
    /// An entry whose document had errors (already reported) or was dropped: the document's
    /// full name.
    Invalid(String),
    /// Nothing by that name.
    NotFound,
}

/// The handlers or instances of one config, for lookups.
#[derive(Debug)]
pub(crate) struct Table {
    /// `handler` or `instance`.
    generic: &'static str,
    entries: Vec<Entry>,
}

impl Table {
    pub fn new(generic: &'static str) -> Table {
        Table {
            generic,
            entries: Vec::new(),
        }
    }

    pub fn push(&mut self, entry: Entry) {
        self.entries.push(entry);
    }

    fn find(&self, name: &str, kind: Option<&str>, namespace: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| {
            e.name == name
                && e.namespace == namespace
                && kind.is_none_or(|k| k == e.kind || k == self.generic)
        })
    }

    /// Resolves `reference` for a rule in `rule_ns`.
    pub fn resolve(&self, reference: &str, rule_ns: &str, default_ns: &str) -> Resolution {
        let parts: Vec<&str> = reference.splitn(3, '.').collect();
        let mut tries: Vec<(&str, Option<&str>, &str)> = Vec::new();
        match parts.as_slice() {
            [name] => {
                tries.push((name, None, rule_ns));
                tries.push((name, None, default_ns));
            }
            [name, second] => {
                tries.push((name, None, second));
                tries.push((name, Some(second), rule_ns));
                tries.push((name, Some(second), default_ns));
            }
            [name, kind, ns] => tries.push((name, Some(kind), ns)),
            _ => {}
        }
        // A name with dots of its own, unqualified.
        tries.push((reference, None, rule_ns));
        for (name, kind, ns) in tries {
            if let Some(e) = self.find(name, kind, ns) {
                return e.index.map_or_else(
                    || Resolution::Invalid(e.document.clone()),
                    Resolution::Found,
                );
            }
        }
        Resolution::NotFound
    }

    /// Qualified names of entries whose short name is `name` (to suggest when a reference
    /// looked in the wrong namespace).
    pub fn same_name_elsewhere(&self, name: &str) -> Vec<String> {
        self.entries
            .iter()
            .filter(|e| e.name == name)
            .map(|e| format!("{}.{}", e.name, e.namespace))
            .collect()
    }

    /// Names to suggest for a reference that resolved to nothing: short names in the rule's
    /// namespace, qualified names elsewhere.
    pub fn candidates(&self, rule_ns: &str) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| {
                if e.namespace == rule_ns {
                    e.name.clone()
                } else {
                    format!("{}.{}", e.name, e.namespace)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        let mut t = Table::new("handler");
        for (i, (name, ns, kind)) in [
            ("deny", "istio-system", "handler"),
            ("deny", "team", "denier"),
            ("shared", "istio-system", "noop"),
            ("broken", "team", "handler"),
        ]
        .into_iter()
        .enumerate()
        {
            t.push(Entry {
                name: name.into(),
                namespace: ns.into(),
                kind: kind.into(),
                index: (name != "broken").then_some(i),
                document: format!("{name}.{kind}.{ns}"),
            });
        }
        t
    }

    #[test]
    fn resolves_istio_reference_forms() {
        let t = table();
        let r = |s: &str| t.resolve(s, "team", "istio-system");
        assert_eq!(r("deny"), Resolution::Found(1));
        assert_eq!(r("deny.team"), Resolution::Found(1));
        assert_eq!(r("deny.istio-system"), Resolution::Found(0));
        assert_eq!(r("deny.denier"), Resolution::Found(1));
        assert_eq!(r("deny.handler"), Resolution::Found(1));
        assert_eq!(r("deny.handler.istio-system"), Resolution::Found(0));
        assert_eq!(r("deny.denier.istio-system"), Resolution::NotFound);
        assert_eq!(r("shared"), Resolution::Found(2));
        assert_eq!(r("shared.noop"), Resolution::Found(2));
        assert_eq!(
            r("broken"),
            Resolution::Invalid("broken.handler.team".to_string())
        );
        assert_eq!(r("nothing"), Resolution::NotFound);
        assert_eq!(r(""), Resolution::NotFound);
        assert_eq!(
            t.resolve("deny", "other", "istio-system"),
            Resolution::Found(0)
        );
    }
}
