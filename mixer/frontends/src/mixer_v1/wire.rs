//! A Mixer v1 `CheckRequest` read where it lies: the words borrowed from the message, the typed
//! maps gathered into short vectors, without the B-trees and strings of the generated message.
//!
//! The reader accepts only what prost decodes, and reads it as prost would: a repeated
//! `attributes` merges, map entries accumulate and the last entry of a key wins, a field
//! repeated inside an entry replaces (scalars) or merges (messages). Whatever it does not take
//! on itself (a group, a malformed field) it refuses, and the caller then leaves the message
//! to prost, which either decodes it or says why not: so the answer to a message never depends
//! on which of the two read it.

use crate::protowire::{FIXED64, Reader, START_GROUP, WireError};

use super::decode::Compressed;

/// What the Check method reads of a `CheckRequest`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct CheckView<'a> {
    /// `attributes`, when sent.
    pub attributes: Option<AttributesView<'a>>,
    pub global_word_count: u32,
    /// Entries of `quotas` on the wire (a key sent twice counts twice); the quota path
    /// reads the generated message.
    pub quotas: usize,
}

/// `CompressedAttributes`: each map in key order, one entry per key.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct AttributesView<'a> {
    pub words: Vec<&'a str>,
    pub strings: Vec<(i32, i32)>,
    pub int64s: Vec<(i32, i64)>,
    pub doubles: Vec<(i32, f64)>,
    pub bools: Vec<(i32, bool)>,
    pub timestamps: Vec<(i32, (i64, i32))>,
    pub durations: Vec<(i32, (i64, i32))>,
    pub bytes: Vec<(i32, &'a [u8])>,
    pub string_maps: Vec<(i32, Vec<(i32, i32)>)>,
}

impl<'a> CheckView<'a> {
    /// Reads an encoded `CheckRequest`; an error leaves it to prost.
    pub fn decode(message: &'a [u8]) -> Result<CheckView<'a>, WireError> {
        let mut view = CheckView::default();
        let mut r = Reader::new(message);
        while let Some((field, wire)) = key(&mut r)? {
            match field {
                1 => attributes(r.len(wire)?, view.attributes.get_or_insert_default())?,
                // uint32, as prost reads it: the low 32 bits of the varint.
                2 => view.global_word_count = r.varint_field(wire)? as u32,
                // Read only by the quota path, but a message prost refuses is refused here.
                3 => {
                    r.string(wire)?;
                }
                4 => {
                    r.len(wire)?;
                    view.quotas += 1;
                }
                _ => r.skip(field, wire, 0)?,
            }
        }
        if let Some(a) = view.attributes.as_mut() {
            a.settle();
        }
        Ok(view)
    }
}

/// The next key, refusing groups: prost counts their depth across messages, and they are
/// never sent, so prost decides on them.
fn key(r: &mut Reader<'_>) -> Result<Option<(u32, u8)>, WireError> {
    match r.key()? {
        Some((_, START_GROUP)) => Err(WireError::Group),
        key => Ok(key),
    }
}

fn attributes<'a>(buf: &'a [u8], into: &mut AttributesView<'a>) -> Result<(), WireError> {
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = key(&mut r)? {
        match field {
            1 => into.words.push(r.string(wire)?),
            2 => into.strings.push(entry(r.len(wire)?, 0, |r, w, v| {
                *v = sint32(r, w)?;
                Ok(())
            })?),
            3 => into.int64s.push(entry(r.len(wire)?, 0, |r, w, v| {
                *v = r.varint_field(w)? as i64;
                Ok(())
            })?),
            4 => into.doubles.push(entry(r.len(wire)?, 0.0, |r, w, v| {
                r.expect(w, FIXED64)?;
                let bits: [u8; 8] = r.take(8)?.try_into().map_err(|_| WireError::Truncated)?;
                *v = f64::from_le_bytes(bits);
                Ok(())
            })?),
            5 => into.bools.push(entry(r.len(wire)?, false, |r, w, v| {
                *v = r.varint_field(w)? != 0;
                Ok(())
            })?),
            6 => into
                .timestamps
                .push(entry(r.len(wire)?, (0, 0), seconds_nanos)?),
            7 => into
                .durations
                .push(entry(r.len(wire)?, (0, 0), seconds_nanos)?),
            8 => into.bytes.push(entry(r.len(wire)?, &[][..], |r, w, v| {
                *v = r.len(w)?;
                Ok(())
            })?),
            9 => into
                .string_maps
                .push(entry(r.len(wire)?, Vec::new(), |r, w, v| {
                    string_map(r.len(w)?, v)
                })?),
            _ => r.skip(field, wire, 0)?,
        }
    }
    Ok(())
}

/// One map entry with a `sint32` key: key 1, value 2 (read into the value so far by
/// `value`), either missing meaning its default.
fn entry<'a, V>(
    buf: &'a [u8],
    default: V,
    value: impl Fn(&mut Reader<'a>, u8, &mut V) -> Result<(), WireError>,
) -> Result<(i32, V), WireError> {
    let (mut k, mut v) = (0, default);
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = key(&mut r)? {
        match field {
            1 => k = sint32(&mut r, wire)?,
            2 => value(&mut r, wire, &mut v)?,
            _ => r.skip(field, wire, 0)?,
        }
    }
    Ok((k, v))
}

/// `sint32`, as prost reads it: the low 32 bits of the varint, zigzag-decoded.
fn sint32(r: &mut Reader<'_>, wire: u8) -> Result<i32, WireError> {
    let n = r.varint_field(wire)? as u32;
    Ok(((n >> 1) as i32) ^ -((n & 1) as i32))
}

/// A `Timestamp` or `Duration` merged into `into`: each field present replaces its part.
fn seconds_nanos(r: &mut Reader<'_>, wire: u8, into: &mut (i64, i32)) -> Result<(), WireError> {
    let mut m = Reader::new(r.len(wire)?);
    while let Some((field, wire)) = key(&mut m)? {
        match field {
            1 => into.0 = m.varint_field(wire)? as i64,
            2 => into.1 = m.varint_field(wire)? as i32,
            _ => m.skip(field, wire, 0)?,
        }
    }
    Ok(())
}

/// A `StringMap` merged into `into`: its entries accumulate.
fn string_map(buf: &[u8], into: &mut Vec<(i32, i32)>) -> Result<(), WireError> {
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = key(&mut r)? {
        match field {
            1 => into.push(entry(r.len(wire)?, 0, |r, w, v| {
                *v = sint32(r, w)?;
                Ok(())
            })?),
            _ => r.skip(field, wire, 0)?,
        }
    }
    Ok(())
}

impl AttributesView<'_> {
    /// Puts every map in key order with the last entry of each key, as prost's B-trees hold
    /// them.
    fn settle(&mut self) {
        last_per_key(&mut self.strings);
        last_per_key(&mut self.int64s);
        last_per_key(&mut self.doubles);
        last_per_key(&mut self.bools);
        last_per_key(&mut self.timestamps);
        last_per_key(&mut self.durations);
        last_per_key(&mut self.bytes);
        for (_, entries) in &mut self.string_maps {
            last_per_key(entries);
        }
        last_per_key(&mut self.string_maps);
    }
}

/// Sorts `entries` by key, keeping of each key the entry that came last.
fn last_per_key<V>(entries: &mut Vec<(i32, V)>) {
    if entries.is_sorted_by(|a, b| a.0 < b.0) {
        return;
    }
    // Stable: entries of one key stay in the order they came in.
    entries.sort_by_key(|e| e.0);
    let mut kept = 0;
    for i in 0..entries.len() {
        if entries
            .get(i + 1)
            .is_some_and(|next| next.0 == entries[i].0)
        {
            continue;
        }
        entries.swap(kept, i);
        kept += 1;
    }
    entries.truncate(kept);
}

impl Compressed for AttributesView<'_> {
    fn strings(&self) -> impl Iterator<Item = (i32, i32)> {
        self.strings.iter().copied()
    }
    fn int64s(&self) -> impl Iterator<Item = (i32, i64)> {
        self.int64s.iter().copied()
    }
    fn doubles(&self) -> impl Iterator<Item = (i32, f64)> {
        self.doubles.iter().copied()
    }
    fn bools(&self) -> impl Iterator<Item = (i32, bool)> {
        self.bools.iter().copied()
    }
    fn timestamps(&self) -> impl Iterator<Item = (i32, (i64, i32))> {
        self.timestamps.iter().copied()
    }
    fn durations(&self) -> impl Iterator<Item = (i32, (i64, i32))> {
        self.durations.iter().copied()
    }
    fn bytes(&self) -> impl Iterator<Item = (i32, &[u8])> {
        self.bytes.iter().copied()
    }
    fn string_maps(
        &self,
    ) -> impl Iterator<Item = (i32, impl ExactSizeIterator<Item = (i32, i32)>)> {
        self.string_maps
            .iter()
            .map(|(k, entries)| (*k, entries.iter().copied()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_per_key_sorts_and_keeps_the_last_of_each_key() {
        let mut entries = vec![(3, 'a'), (1, 'b'), (3, 'c'), (2, 'd'), (1, 'e'), (3, 'f')];
        last_per_key(&mut entries);
        assert_eq!(entries, [(1, 'e'), (2, 'd'), (3, 'f')]);
        let mut sorted = vec![(1, 'a'), (2, 'b')];
        last_per_key(&mut sorted);
        assert_eq!(sorted, [(1, 'a'), (2, 'b')]);
        let mut twice = vec![(1, 'a'), (1, 'b')];
        last_per_key(&mut twice);
        assert_eq!(twice, [(1, 'b')]);
    }
}
