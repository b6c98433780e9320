//! A Mixer v1 Check carries its attributes as indices into two dictionaries (the global one and
//! the message's own words). Whatever the bytes, decoding must not panic. What decodes must come
//! back unchanged after being encoded the way a proxy of the announced dictionary size would
//! encode it, and the report path's partial decoder must refuse exactly what the full one does.
//! The Check method's in-place reader must read nothing prost refuses, and what it reads it
//! must read as prost's decoding of the same bytes.

#![no_main]

use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use mixer_frontends::mixer_v1::{
    GLOBAL_WORD_COUNT, decode_check_in_place, decode_into, decode_keeping, encode,
};
use mixer_model::{AttrId, AttributeBag, Vocabulary};
use mixer_proto::istio::mixer::v1::CheckRequest;
use prost::Message;

// Built once: the vocabulary is read-only, and building it per input would dominate the run.
static VOCABULARY: LazyLock<Arc<Vocabulary>> = LazyLock::new(|| Arc::new(Vocabulary::istio()));

fn lines(bag: &AttributeBag) -> Vec<String> {
    let mut lines: Vec<String> = bag.iter().map(|(k, v)| format!("{k} = {v:?}")).collect();
    lines.sort();
    lines
}

/// What a report keeps: a mix of kept, checked-only and skipped attributes, so that every way
/// through `decode_keeping` is taken.
fn keep(id: Option<AttrId>) -> bool {
    id.is_some_and(|id| id.index() % 2 == 0)
}

fuzz_target!(|data: &[u8]| {
    let mut in_place = AttributeBag::new(VOCABULARY.clone());
    let read = decode_check_in_place(data, &mut in_place);
    let Ok(request) = CheckRequest::decode(data) else {
        assert!(read.is_none(), "read in place, refused by prost");
        return;
    };
    if let Some(read) = read {
        assert!(request.quotas.is_empty(), "a quota request read in place");
        let mut by_prost = AttributeBag::new(VOCABULARY.clone());
        let expected = match &request.attributes {
            Some(a) => decode_into(a, &a.words, &mut by_prost),
            None => Ok(()),
        }
        .map(|()| request.global_word_count);
        assert_eq!(read, expected, "the in-place reader and prost disagree");
        assert_eq!(lines(&in_place), lines(&by_prost));
    }
    // As the Check method: a client announcing a newer dictionary is answered before its
    // attributes are read.
    let client_words = request.global_word_count as usize;
    if client_words > GLOBAL_WORD_COUNT {
        return;
    }
    let Some(attributes) = &request.attributes else {
        return;
    };
    let mut bag = AttributeBag::new(VOCABULARY.clone());
    let decoded = decode_into(attributes, &attributes.words, &mut bag);

    let mut kept = AttributeBag::new(VOCABULARY.clone());
    let kept_result = decode_keeping(attributes, &attributes.words, &mut kept, keep);
    assert_eq!(
        decoded, kept_result,
        "decode_keeping and decode_into disagree"
    );
    if decoded.is_err() {
        return;
    }
    let mut wanted = AttributeBag::new(VOCABULARY.clone());
    for (name, value) in bag.iter().filter(|(name, _)| keep(VOCABULARY.lookup(name))) {
        wanted
            .set(name, value.clone())
            .expect("a decoded value fits its attribute");
    }
    assert_eq!(
        lines(&kept),
        lines(&wanted),
        "decode_keeping kept other values"
    );

    // The response side limits global indices to the client's count; encoding with it puts
    // every word beyond it into the message's dictionary, as such a client would.
    let again = encode(bag.iter(), client_words);
    let mut round = AttributeBag::new(VOCABULARY.clone());
    if let Err(e) = decode_into(&again, &again.words, &mut round) {
        panic!("encoded attributes do not decode: {e}\n{:#?}", lines(&bag));
    }
    assert_eq!(lines(&bag), lines(&round));
});
