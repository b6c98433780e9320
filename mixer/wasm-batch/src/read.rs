//! The plugin's side: a batch read in place, allocating nothing. A batch that does not
//! follow the layout reads as fewer instances or fields, never as a panic.

use crate::case::{self, MAP};
use crate::text;

/// A batch's three lists, borrowed.
#[derive(Clone, Copy)]
pub struct BatchRef<'a> {
    lists: Lists<'a>,
    words: &'a [u32],
}

/// What an instance, a field or a value reads from: the batch's text, bytes and words.
#[derive(Clone, Copy)]
struct Lists<'a> {
    text: &'a str,
    bytes: &'a [u8],
}

impl<'a> Lists<'a> {
    fn text(self, w: &[u32]) -> &'a str {
        range(w).and_then(|r| self.text.get(r)).unwrap_or("")
    }

    fn bytes(self, w: &[u32]) -> &'a [u8] {
        range(w).and_then(|r| self.bytes.get(r)).unwrap_or(&[])
    }
}

/// The byte range of a (start, length) pair at the front of `w`.
fn range(w: &[u32]) -> Option<std::ops::Range<usize>> {
    let start = *w.first()? as usize;
    Some(start..start.checked_add(*w.get(1)? as usize)?)
}

/// The words at `at..at + size` of `w`, where `size` is the word at `at`.
fn sized(w: &[u32], at: usize) -> Option<&[u32]> {
    let size = *w.get(at)? as usize;
    if size == 0 {
        return None;
    }
    w.get(at..at.checked_add(size)?)
}

impl<'a> BatchRef<'a> {
    /// Reads a batch from its lists; its text must be UTF-8, as the mixer sends it.
    pub fn new(text: &'a [u8], bytes: &'a [u8], words: &'a [u32]) -> Result<Self, String> {
        let text = std::str::from_utf8(text).map_err(|e| format!("batch text: {e}"))?;
        Ok(BatchRef::with_text(text, bytes, words))
    }

    /// Reads a batch whose text is already known to be UTF-8.
    pub fn with_text(text: &'a str, bytes: &'a [u8], words: &'a [u32]) -> Self {
        BatchRef {
            lists: Lists { text, bytes },
            words,
        }
    }

    /// How many instances the batch holds.
    pub fn len(&self) -> usize {
        self.words.first().map_or(0, |&n| n as usize)
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its instances, in order.
    pub fn iter(&self) -> Instances<'a> {
        Instances {
            lists: self.lists,
            words: self.words,
            at: 1,
            left: self.len(),
        }
    }
}

impl<'a> IntoIterator for BatchRef<'a> {
    type Item = InstanceRef<'a>;
    type IntoIter = Instances<'a>;

    fn into_iter(self) -> Instances<'a> {
        self.iter()
    }
}

/// The instances of a batch, in order.
pub struct Instances<'a> {
    lists: Lists<'a>,
    words: &'a [u32],
    at: usize,
    left: usize,
}

impl<'a> Iterator for Instances<'a> {
    type Item = InstanceRef<'a>;

    fn next(&mut self) -> Option<InstanceRef<'a>> {
        if self.left == 0 {
            return None;
        }
        let Some(words) = sized(self.words, self.at) else {
            self.left = 0;
            return None;
        };
        self.at += words.len();
        self.left -= 1;
        Some(InstanceRef {
            lists: self.lists,
            words,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left))
    }
}

/// One instance of a batch.
#[derive(Clone, Copy)]
pub struct InstanceRef<'a> {
    lists: Lists<'a>,
    words: &'a [u32],
}

impl<'a> InstanceRef<'a> {
    /// Fully qualified (`name.namespace`).
    pub fn name(&self) -> &'a str {
        self.lists.text(self.words.get(1..).unwrap_or(&[]))
    }

    /// Its template, as the index of its case in the WIT's `template` (authorization = 0).
    pub fn template_case(&self) -> Option<u32> {
        self.words.get(3).copied()
    }

    /// Its fields, by template name (`value`, `dimensions`); fields whose expression found
    /// nothing are left out.
    pub fn fields(&self) -> impl Iterator<Item = (&'a str, FieldRef<'a>)> + 'a {
        let (lists, words) = (self.lists, self.words);
        let count = words.get(4).map_or(0, |&n| n as usize);
        let mut at = 5;
        (0..count).map_while(move |_| {
            let field = sized(words, at)?;
            at += field.len();
            Some((
                lists.text(&field[1..]),
                FieldRef::read(lists, field.get(3..)?)?,
            ))
        })
    }

    /// A field, by its template name.
    pub fn field(&self, name: &str) -> Option<FieldRef<'a>> {
        self.fields()
            .find(|(n, _)| text::eq(n, name))
            .map(|(_, v)| v)
    }

    /// A single-valued field.
    pub fn value(&self, name: &str) -> Option<ValueRef<'a>> {
        match self.field(name)? {
            FieldRef::Single(v) => Some(v),
            FieldRef::Map(_) => None,
        }
    }

    /// One entry of a map field (`dimensions`, `variables`).
    pub fn map_entry(&self, field: &str, key: &str) -> Option<ValueRef<'a>> {
        match self.field(field)? {
            FieldRef::Map(map) => map.get(key),
            FieldRef::Single(_) => None,
        }
    }
}

/// A field's value: one value, or a map.
#[derive(Clone, Copy)]
pub enum FieldRef<'a> {
    /// A field of one value (`value`).
    Single(ValueRef<'a>),
    /// A map field (`dimensions`).
    Map(MapRef<'a>),
}

impl<'a> FieldRef<'a> {
    fn read(lists: Lists<'a>, w: &'a [u32]) -> Option<FieldRef<'a>> {
        if *w.first()? == MAP {
            return Some(FieldRef::Map(MapRef {
                lists,
                count: *w.get(1)? as usize,
                words: w.get(2..)?,
            }));
        }
        ValueRef::read(lists, w).map(|(v, _)| FieldRef::Single(v))
    }
}

/// A map field's entries.
#[derive(Clone, Copy)]
pub struct MapRef<'a> {
    lists: Lists<'a>,
    count: usize,
    words: &'a [u32],
}

impl<'a> MapRef<'a> {
    /// The entries, in the order of the instance's config.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, ValueRef<'a>)> + 'a {
        let (lists, words) = (self.lists, self.words);
        let mut at = 0;
        (0..self.count).map_while(move |_| {
            let key = lists.text(words.get(at..)?);
            let (value, used) = ValueRef::read(lists, words.get(at + 2..)?)?;
            at += 2 + used;
            Some((key, value))
        })
    }

    /// The value at `key`.
    pub fn get(&self, key: &str) -> Option<ValueRef<'a>> {
        self.iter().find(|(k, _)| text::eq(k, key)).map(|(_, v)| v)
    }
}

/// A typed value, borrowed from the batch: the cases of the WIT's `value`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ValueRef<'a> {
    /// A string.
    String(&'a str),
    /// A signed 64-bit integer.
    Int64(i64),
    /// A 64-bit float.
    Double(f64),
    /// A boolean.
    Boolean(bool),
    /// Nanoseconds since the Unix epoch.
    Timestamp(i64),
    /// Nanoseconds.
    Duration(i64),
    /// Raw bytes.
    Bytes(&'a [u8]),
    /// 4 or 16 bytes.
    IpAddress(&'a [u8]),
    /// An e-mail address.
    EmailAddress(&'a str),
    /// A URI.
    Uri(&'a str),
    /// A DNS name.
    DnsName(&'a str),
    /// A string map.
    StringMap(StringMapRef<'a>),
}

impl<'a> ValueRef<'a> {
    /// The value at the front of `w`, and how many words it takes.
    fn read(lists: Lists<'a>, w: &'a [u32]) -> Option<(ValueRef<'a>, usize)> {
        let payload = w.get(1..)?;
        let wide = || Some(u64::from(*payload.first()?) | u64::from(*payload.get(1)?) << 32);
        let text = move || {
            payload.get(1)?;
            Some(lists.text(payload))
        };
        let bytes = move || {
            payload.get(1)?;
            Some(lists.bytes(payload))
        };
        // Reinterpreting the two words' bits is the layout's intent.
        let value = match w[0] {
            case::STRING => ValueRef::String(text()?),
            case::INT64 => ValueRef::Int64(wide()? as i64),
            case::DOUBLE => ValueRef::Double(f64::from_bits(wide()?)),
            case::BOOLEAN => ValueRef::Boolean(*payload.first()? != 0),
            case::TIMESTAMP => ValueRef::Timestamp(wide()? as i64),
            case::DURATION => ValueRef::Duration(wide()? as i64),
            case::BYTES => ValueRef::Bytes(bytes()?),
            case::IP_ADDRESS => ValueRef::IpAddress(bytes()?),
            case::EMAIL_ADDRESS => ValueRef::EmailAddress(text()?),
            case::URI => ValueRef::Uri(text()?),
            case::DNS_NAME => ValueRef::DnsName(text()?),
            case::STRING_MAP => {
                let count = *payload.first()? as usize;
                let words = payload.get(1..1 + count.checked_mul(4)?)?;
                return Some((
                    ValueRef::StringMap(StringMapRef { lists, words }),
                    2 + words.len(),
                ));
            }
            _ => return None,
        };
        let used = match value {
            ValueRef::Boolean(_) => 2,
            _ => 3,
        };
        Some((value, used))
    }

    /// The value as text: strings as they are, numbers and the rest formatted.
    pub fn to_text(&self) -> String {
        match self {
            ValueRef::String(s)
            | ValueRef::EmailAddress(s)
            | ValueRef::Uri(s)
            | ValueRef::DnsName(s) => (*s).to_string(),
            ValueRef::Int64(n) | ValueRef::Timestamp(n) | ValueRef::Duration(n) => n.to_string(),
            ValueRef::Double(d) => d.to_string(),
            ValueRef::Boolean(b) => b.to_string(),
            ValueRef::Bytes(b) | ValueRef::IpAddress(b) => format!("{b:?}"),
            ValueRef::StringMap(m) => format!("{:?}", m.iter().collect::<Vec<_>>()),
        }
    }

    /// The text of a string-like value (string, e-mail address, URI, DNS name).
    pub fn as_str(&self) -> Option<&'a str> {
        match self {
            ValueRef::String(s)
            | ValueRef::EmailAddress(s)
            | ValueRef::Uri(s)
            | ValueRef::DnsName(s) => Some(s),
            _ => None,
        }
    }
}

/// A string map value (`request.headers`, `source.labels`), borrowed from the batch.
#[derive(Clone, Copy)]
pub struct StringMapRef<'a> {
    lists: Lists<'a>,
    /// Four words a pair: the key's and the value's text ranges.
    words: &'a [u32],
}

impl<'a> StringMapRef<'a> {
    /// The pairs, in the map's order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let lists = self.lists;
        self.words
            .chunks_exact(4)
            .map(move |p| (lists.text(&p[..2]), lists.text(&p[2..])))
    }

    /// The value at `key`.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.iter().find(|(k, _)| text::eq(k, key)).map(|(_, v)| v)
    }
}

impl std::fmt::Debug for StringMapRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl PartialEq for StringMapRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}
