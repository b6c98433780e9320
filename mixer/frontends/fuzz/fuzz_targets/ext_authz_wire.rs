//! The ext_authz method reads `CheckRequest`s from their bytes. Whatever the bytes, it must
//! not panic; whatever the generated decoder accepts, it must accept too and map to the same
//! attributes.

#![no_main]

use std::sync::Arc;

use envoy_types::pb::envoy::service::auth::v3::CheckRequest;
use libfuzzer_sys::fuzz_target;
use mixer_frontends::ext_authz::{fill_bag, fill_bag_from_wire};
use mixer_model::{AttributeBag, Timestamp, Vocabulary};
use prost::Message;

const NOW: Timestamp = Timestamp(1_700_000_000_000_000_000);

fn lines(bag: &AttributeBag) -> Vec<String> {
    let mut lines: Vec<String> = bag.iter().map(|(k, v)| format!("{k} = {v:?}")).collect();
    lines.sort();
    lines
}

fuzz_target!(|data: &[u8]| {
    let vocabulary = Arc::new(Vocabulary::istio());
    let mut read = AttributeBag::new(vocabulary.clone());
    let ours = fill_bag_from_wire(&mut read, data, NOW);
    let Ok(request) = CheckRequest::decode(data) else {
        return;
    };
    assert!(ours.is_ok(), "prost decodes what the wire reader refused: {ours:?}");
    // Header names that differ only in case meet in one lower-cased key; which value wins
    // then depends on the decoded map's iteration order, so only lower-case names compare.
    let headers = request
        .attributes
        .as_ref()
        .and_then(|a| a.request.as_ref())
        .and_then(|r| r.http.as_ref())
        .map(|h| &h.headers);
    if headers.is_some_and(|h| h.keys().any(|k| k.bytes().any(|b| b.is_ascii_uppercase()))) {
        return;
    }
    let mut decoded = AttributeBag::new(vocabulary);
    fill_bag(&mut decoded, &request, NOW);
    assert_eq!(lines(&read), lines(&decoded));
});
