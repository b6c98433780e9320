//! The attributes the ext_authz mapping sets, by index, with their ids in the vocabulary at
//! hand looked up once per vocabulary and thread instead of by name for every check.

use std::cell::RefCell;
use std::sync::Arc;

use mixer_model::{AttrId, AttributeBag, Value, Vocabulary};

macro_rules! attributes {
    ($($index:ident = $name:expr,)*) => {
        /// Every attribute the mapping sets, in index order.
        const NAMES: &[&str] = &[$($name,)*];
        attributes!(@consts 0usize, $($index,)*);
    };
    (@consts $n:expr, $index:ident, $($rest:ident,)*) => {
        pub(crate) const $index: usize = $n;
        attributes!(@consts $n + 1usize, $($rest,)*);
    };
    (@consts $n:expr,) => {};
}

attributes! {
    CONTEXT_TIME = "context.time",
    CONTEXT_PROTOCOL = "context.protocol",
    CONTEXT_EXTENSIONS = "context.extensions",
    CONTEXT_METADATA = super::METADATA_ATTRIBUTE,
    CONTEXT_ROUTE_METADATA = super::ROUTE_METADATA_ATTRIBUTE,
    CONNECTION_MTLS = "connection.mtls",
    CONNECTION_SNI = "connection.requested_server_name",
    SOURCE_IP = "source.ip",
    SOURCE_PORT = "source.port",
    SOURCE_PRINCIPAL = "source.principal",
    SOURCE_NAMESPACE = "source.namespace",
    SOURCE_SERVICE = "source.service",
    SOURCE_LABELS = "source.labels",
    DESTINATION_IP = "destination.ip",
    DESTINATION_PORT = "destination.port",
    DESTINATION_PRINCIPAL = "destination.principal",
    DESTINATION_NAMESPACE = "destination.namespace",
    DESTINATION_SERVICE = "destination.service",
    DESTINATION_LABELS = "destination.labels",
    DESTINATION_SERVICE_HOST = "destination.service.host",
    REQUEST_TIME = "request.time",
    REQUEST_ID = "request.id",
    REQUEST_METHOD = "request.method",
    REQUEST_PATH = "request.path",
    REQUEST_URL_PATH = "request.url_path",
    REQUEST_QUERY_PARAMS = "request.query_params",
    REQUEST_HOST = "request.host",
    REQUEST_SCHEME = "request.scheme",
    REQUEST_SIZE = "request.size",
    REQUEST_USERAGENT = "request.useragent",
    REQUEST_REFERER = "request.referer",
    REQUEST_HEADERS = "request.headers",
}

/// The ids of [`NAMES`] in one vocabulary; `None` for a name it does not declare.
struct Ids {
    vocabulary: Arc<Vocabulary>,
    ids: Vec<Option<AttrId>>,
}

thread_local! {
    /// The ids for the vocabulary this thread filled a bag for last: a vocabulary lives as
    /// long as its config, so nearly every check finds them here.
    static IDS: RefCell<Option<Ids>> = const { RefCell::new(None) };
}

/// Runs `fill` with a setter for `bag`: `set(INDEX, value)` sets the attribute at `INDEX`
/// of [`NAMES`].
pub(crate) fn with_setter<R>(
    bag: &mut AttributeBag,
    fill: impl FnOnce(&mut dyn FnMut(usize, Value)) -> R,
) -> R {
    IDS.with_borrow_mut(|cache| {
        // The vocabulary is cloned only when it changed, not for every check.
        let ids = match cache {
            Some(ids) if Arc::ptr_eq(&ids.vocabulary, bag.vocabulary()) => ids,
            _ => {
                let vocabulary = bag.vocabulary().clone();
                cache.insert(Ids {
                    ids: NAMES.iter().map(|name| vocabulary.lookup(name)).collect(),
                    vocabulary,
                })
            }
        };
        let mut set = |index: usize, value: Value| {
            let name = NAMES[index];
            // Values come from what the proxy (and so the client) sent; one that does not
            // fit the declared type is left out rather than failing the whole check.
            let _ = match ids.ids[index] {
                Some(id) => bag.set_declared(id, name, value),
                None => bag.set(name, value),
            };
        };
        fill(&mut set)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_name_their_attributes_and_set_them() {
        assert_eq!(NAMES[CONTEXT_TIME], "context.time");
        assert_eq!(NAMES[REQUEST_HEADERS], "request.headers");
        assert_eq!(NAMES.len(), REQUEST_HEADERS + 1);
        let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
        with_setter(&mut bag, |set| {
            set(SOURCE_PORT, Value::Int64(8080));
            // Undeclared in the standard vocabulary: kept aside by name.
            set(CONTEXT_METADATA, Value::from("m"));
        });
        assert_eq!(bag.get_by_name("source.port"), Some(&Value::Int64(8080)));
        assert_eq!(
            bag.get_by_name(super::super::METADATA_ATTRIBUTE),
            Some(&Value::from("m"))
        );
    }
}
