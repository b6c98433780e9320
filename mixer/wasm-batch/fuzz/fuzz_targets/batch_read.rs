//! Any lists, read through every accessor a plugin has: a batch the reader cannot follow
//! reads as fewer instances, fields or entries, never as a panic or an endless loop.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mixer_wasm_batch::{BatchRef, FieldRef, ValueRef};

fn touch(v: ValueRef<'_>) -> usize {
    match v {
        ValueRef::StringMap(m) => m.iter().count() + usize::from(m.get("a").is_some()),
        other => other.to_text().len() + usize::from(other.as_str().is_some()),
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte splits the rest between the text and the bytes; what follows them
    // is the words.
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let text_len = (usize::from(split) * rest.len() / 512).min(rest.len());
    let (text, rest) = rest.split_at(text_len);
    let (bytes, rest) = rest.split_at(rest.len().min(16));
    let words: Vec<u32> = rest
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    let Ok(batch) = BatchRef::new(text, bytes, &words) else {
        return;
    };
    let mut seen = 0usize;
    for instance in batch.iter() {
        seen += instance.name().len() + instance.template_case().map_or(0, |t| t as usize);
        for (name, field) in instance.fields() {
            seen += name.len();
            match field {
                FieldRef::Single(v) => seen += touch(v),
                FieldRef::Map(m) => {
                    for (k, v) in m.iter() {
                        seen += k.len() + touch(v);
                    }
                    seen += m.get("destination").map_or(0, touch);
                }
            }
        }
        seen += instance.value("value").map_or(0, touch);
        seen += instance.map_entry("dimensions", "destination").map_or(0, touch);
    }
    std::hint::black_box(seen);
});
