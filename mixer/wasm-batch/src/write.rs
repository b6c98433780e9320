//! The mixer's side: instances, fields and values, written in order.

use std::collections::HashMap;

use crate::case;

/// A batch being written. Each string is written to the text once per address: the
/// instances of one rule share their name, field names and map keys, so a batch of 500
/// carries those once, and finding them costs a hash of two words rather than of the
/// text. Equal text at another address (a value from each request) is written again,
/// which costs a copy of a few bytes. The `'a` keeps every string written alive, and so
/// its address its own, until the batch is finished.
pub struct Writer<'a> {
    written: HashMap<(usize, usize), [u32; 2], foldhash::fast::RandomState>,
    text: Vec<u8>,
    bytes: Vec<u8>,
    words: Vec<u32>,
    count: u32,
    strings: std::marker::PhantomData<&'a str>,
}

/// Where a size is to be filled in: see [`Writer::end`].
#[must_use]
pub struct Mark(usize);

/// A finished batch: the WIT record's three lists.
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    /// The strings' UTF-8, end to end.
    pub text: Vec<u8>,
    /// The byte strings' bytes.
    pub bytes: Vec<u8>,
    /// The instance count, then the instances.
    pub words: Vec<u32>,
}

/// A length or offset as the layout carries it. A batch of 4 GiB cannot be built in the
/// memory a plugin may have, so saturating never names real data.
fn word(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl Default for Writer<'_> {
    fn default() -> Self {
        Writer {
            written: HashMap::default(),
            text: Vec::new(),
            bytes: Vec::new(),
            // The instance count, filled in by `finish`.
            words: vec![0],
            count: 0,
            strings: std::marker::PhantomData,
        }
    }
}

impl<'a> Writer<'a> {
    /// Starts an instance of `fields` fields; its template is the index of its case in the
    /// WIT's `template`. Write the fields, then [`Writer::end`] it.
    pub fn instance(&mut self, name: &'a str, template: u32, fields: usize) -> Mark {
        self.count = self.count.saturating_add(1);
        let mark = self.begin();
        self.string(name);
        self.words.push(template);
        self.words.push(word(fields));
        mark
    }

    /// Starts a field; write one value, or a [`Writer::map`] and its entries, then
    /// [`Writer::end`] it.
    pub fn field(&mut self, name: &'a str) -> Mark {
        let mark = self.begin();
        self.string(name);
        mark
    }

    /// Fills in the size of the instance or field begun at `mark`.
    pub fn end(&mut self, mark: Mark) {
        self.words[mark.0] = word(self.words.len() - mark.0);
    }

    /// Starts a map field's `entries` entries: each a [`Writer::key`], then a value.
    pub fn map(&mut self, entries: usize) {
        self.words.push(case::MAP);
        self.words.push(word(entries));
    }

    /// A map entry's key.
    pub fn key(&mut self, key: &'a str) {
        self.string(key);
    }

    /// A string-like value: `case` is [`case::STRING`], `EMAIL_ADDRESS`, `URI` or
    /// `DNS_NAME`.
    pub fn text(&mut self, case: u32, s: &'a str) {
        self.words.push(case);
        self.string(s);
    }

    /// A 64-bit value: `case` is [`case::INT64`], `DOUBLE` (its bits), `TIMESTAMP` or
    /// `DURATION`.
    pub fn wide(&mut self, case: u32, n: u64) {
        // Truncations by intent: the low word, then the high one.
        self.words
            .extend_from_slice(&[case, n as u32, (n >> 32) as u32]);
    }

    /// A boolean.
    pub fn boolean(&mut self, b: bool) {
        self.words.extend_from_slice(&[case::BOOLEAN, u32::from(b)]);
    }

    /// A byte string: `case` is [`case::BYTES`] or `IP_ADDRESS`.
    pub fn bytes(&mut self, case: u32, b: &[u8]) {
        self.words
            .extend_from_slice(&[case, word(self.bytes.len()), word(b.len())]);
        self.bytes.extend_from_slice(b);
    }

    /// A string map.
    pub fn string_map(&mut self, pairs: impl ExactSizeIterator<Item = (&'a str, &'a str)>) {
        self.words.push(case::STRING_MAP);
        self.words.push(word(pairs.len()));
        for (k, v) in pairs {
            self.string(k);
            self.string(v);
        }
    }

    /// The batch, its instance count filled in.
    pub fn finish(mut self) -> Packed {
        self.words[0] = self.count;
        Packed {
            text: self.text,
            bytes: self.bytes,
            words: self.words,
        }
    }

    fn begin(&mut self) -> Mark {
        self.words.push(0);
        Mark(self.words.len() - 1)
    }

    fn string(&mut self, s: &'a str) {
        let key = (s.as_ptr() as usize, s.len());
        let range = match self.written.get(&key) {
            Some(&range) => range,
            None => {
                let range = [word(self.text.len()), word(s.len())];
                self.text.extend_from_slice(s.as_bytes());
                self.written.insert(key, range);
                range
            }
        };
        self.words.extend_from_slice(&range);
    }
}
