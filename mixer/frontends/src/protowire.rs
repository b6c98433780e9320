//! Protobuf's wire format read in place and written directly, for the front ends that read
//! their requests where they lie and write their answers straight to the frame instead of
//! going through generated messages. The readers keep to prost's rules; the writers write
//! what prost would, byte for byte (fields in number order, defaults left out).

use std::fmt;

/// Why an encoded message could not be read.
#[derive(Debug, PartialEq)]
pub enum WireError {
    /// A varint longer than ten bytes, or cut off by the end of its message.
    Varint,
    /// A length, or a fixed-size field, that runs past the end of its message.
    Truncated,
    /// A field number of 0, or a wire type that does not exist.
    Key,
    /// A known field sent with another wire type than its type has.
    WireType {
        /// The field's number.
        field: u32,
        /// The wire type it came with.
        wire: u8,
    },
    /// A string field that is not UTF-8.
    Utf8 {
        /// The field's number.
        field: u32,
    },
    /// A group left open, or one nested past the limit.
    Group,
    /// `metadata_context` or `route_metadata_context` did not decode.
    Metadata(String),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Varint => f.write_str("invalid varint"),
            WireError::Truncated => f.write_str("a field runs past the end of its message"),
            WireError::Key => f.write_str("invalid field key"),
            WireError::WireType { field, wire } => {
                write!(f, "field {field} has the wrong wire type {wire}")
            }
            WireError::Utf8 { field } => write!(f, "string field {field} is not valid UTF-8"),
            WireError::Group => f.write_str("a group is unterminated or nested too deep"),
            WireError::Metadata(e) => write!(f, "metadata: {e}"),
        }
    }
}

impl std::error::Error for WireError {}

pub(crate) const VARINT: u8 = 0;
pub(crate) const FIXED64: u8 = 1;
pub(crate) const LEN: u8 = 2;
pub(crate) const START_GROUP: u8 = 3;
pub(crate) const END_GROUP: u8 = 4;
pub(crate) const FIXED32: u8 = 5;
/// As deep as prost lets groups nest.
const MAX_GROUP_DEPTH: u32 = 100;

/// The unread rest of one message, and the number of the field being read.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    field: u32,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, field: 0 }
    }

    /// The next field's number and wire type; `None` at the end of the message.
    #[inline]
    pub(crate) fn key(&mut self) -> Result<Option<(u32, u8)>, WireError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        // A key past 32 bits is refused, as prost refuses it, though its field number would fit.
        let key = u32::try_from(self.varint()?).map_err(|_| WireError::Key)?;
        let wire = (key & 7) as u8;
        let field = key >> 3;
        if field == 0 || wire > FIXED32 {
            return Err(WireError::Key);
        }
        self.field = field;
        Ok(Some((field, wire)))
    }

    #[inline]
    pub(crate) fn varint(&mut self) -> Result<u64, WireError> {
        // Keys, the lengths of short fields and small numbers take one byte.
        if let Some((&byte, rest)) = self.buf.split_first()
            && byte < 0x80
        {
            self.buf = rest;
            return Ok(u64::from(byte));
        }
        self.long_varint()
    }

    fn long_varint(&mut self) -> Result<u64, WireError> {
        let mut value = 0u64;
        for (i, &byte) in self.buf.iter().take(10).enumerate() {
            // The tenth byte holds bit 63 only.
            if i == 9 && byte > 1 {
                return Err(WireError::Varint);
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                self.buf = &self.buf[i + 1..];
                return Ok(value);
            }
        }
        Err(WireError::Varint)
    }

    pub(crate) fn varint_field(&mut self, wire: u8) -> Result<u64, WireError> {
        self.expect(wire, VARINT)?;
        self.varint()
    }

    /// A length-delimited field's bytes.
    pub(crate) fn len(&mut self, wire: u8) -> Result<&'a [u8], WireError> {
        self.expect(wire, LEN)?;
        let len = usize::try_from(self.varint()?).map_err(|_| WireError::Truncated)?;
        self.take(len)
    }

    pub(crate) fn string(&mut self, wire: u8) -> Result<&'a str, WireError> {
        let field = self.field;
        std::str::from_utf8(self.len(wire)?).map_err(|_| WireError::Utf8 { field })
    }

    pub(crate) fn take(&mut self, len: usize) -> Result<&'a [u8], WireError> {
        if len > self.buf.len() {
            return Err(WireError::Truncated);
        }
        let (head, rest) = self.buf.split_at(len);
        self.buf = rest;
        Ok(head)
    }

    /// Steps over a field the mapping does not read.
    pub(crate) fn skip(&mut self, field: u32, wire: u8, depth: u32) -> Result<(), WireError> {
        match wire {
            VARINT => self.varint().map(drop),
            FIXED64 => self.take(8).map(drop),
            LEN => self.len(LEN).map(drop),
            FIXED32 => self.take(4).map(drop),
            START_GROUP => {
                if depth >= MAX_GROUP_DEPTH {
                    return Err(WireError::Group);
                }
                loop {
                    match self.key()? {
                        None => return Err(WireError::Group),
                        Some((f, END_GROUP)) if f == field => return Ok(()),
                        Some((_, END_GROUP)) => return Err(WireError::Group),
                        Some((f, w)) => self.skip(f, w, depth + 1)?,
                    }
                }
            }
            // An end of group with no group open.
            _ => Err(WireError::Group),
        }
    }

    pub(crate) fn expect(&self, wire: u8, want: u8) -> Result<(), WireError> {
        if wire == want {
            Ok(())
        } else {
            Err(WireError::WireType {
                field: self.field,
                wire,
            })
        }
    }
}

// Writing.

pub(crate) fn write_key(out: &mut Vec<u8>, field: u32, wire: u8) {
    write_varint(out, (u64::from(field) << 3) | u64::from(wire));
}

pub(crate) fn write_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// An int32 or enum field; zero, its default, is not written.
pub(crate) fn int(out: &mut Vec<u8>, field: u32, value: i32) {
    if value != 0 {
        write_key(out, field, VARINT);
        // Negative int32s are sign-extended to ten bytes, as protobuf writes them.
        write_varint(out, i64::from(value) as u64);
    }
}

/// A string field; empty, its default, is not written.
pub(crate) fn string(out: &mut Vec<u8>, field: u32, value: &str) {
    if !value.is_empty() {
        string_always(out, field, value);
    }
}

/// A string written even when empty: a oneof case, or an element of a repeated field.
pub(crate) fn string_always(out: &mut Vec<u8>, field: u32, value: &str) {
    write_key(out, field, LEN);
    write_varint(out, value.len() as u64);
    out.extend_from_slice(value.as_bytes());
}

/// A message field written by `body`. Its length goes before it, so one byte is kept for
/// it and the body moved up in the rare case it needs more.
pub(crate) fn message(out: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    write_key(out, field, LEN);
    let at = out.len();
    out.push(0);
    body(out);
    let len = out.len() - at - 1;
    if len < 0x80 {
        out[at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(10);
        write_varint(&mut prefix, len as u64);
        out.splice(at..=at, prefix);
    }
}

/// An int64 field; zero, its default, is not written.
pub(crate) fn int64(out: &mut Vec<u8>, field: u32, value: i64) {
    if value != 0 {
        write_key(out, field, VARINT);
        write_varint(out, value as u64);
    }
}

/// A sint32 field (zigzag); zero, its default, is not written.
pub(crate) fn sint32(out: &mut Vec<u8>, field: u32, value: i32) {
    if value != 0 {
        write_key(out, field, VARINT);
        write_varint(out, u64::from(((value << 1) ^ (value >> 31)) as u32));
    }
}
