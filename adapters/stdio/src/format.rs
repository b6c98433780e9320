//! Records as JSON lines or console lines, with the encodings Istio's zap core used.

use std::fmt::Write as _;

use chrono::{Datelike, Timelike};
use mixer_model::{Duration, StringMap, Timestamp, Value};

use crate::config::Level;

/// Istio's time format: UTC with microseconds, `2017-01-01T12:30:05.000123Z` (RFC 3339).
pub fn format_time(t: Timestamp) -> String {
    let mut out = String::with_capacity(27);
    write_time(&mut out, t);
    out
}

/// Appends [`format_time`]'s text. Every log line has a time: digits are pushed directly
/// rather than through `format!`, which cost more than the rest of the line.
fn write_time(out: &mut String, t: Timestamp) {
    let d = chrono::DateTime::from_timestamp_nanos(t.0);
    push_padded(out, i64::from(d.year()), 4);
    out.push('-');
    push_padded(out, i64::from(d.month()), 2);
    out.push('-');
    push_padded(out, i64::from(d.day()), 2);
    out.push('T');
    push_padded(out, i64::from(d.hour()), 2);
    out.push(':');
    push_padded(out, i64::from(d.minute()), 2);
    out.push(':');
    push_padded(out, i64::from(d.second()), 2);
    out.push('.');
    push_padded(out, i64::from(d.nanosecond() / 1_000), 6);
    out.push('Z');
}

/// A line's time as text, its date and seconds rendered once per second: lines written
/// within the same second (a batch of decision-log records) only add their microseconds.
/// [`write_time`] through chrono cost about a thousand instructions a line (#36).
#[derive(Default)]
pub struct TimeText {
    /// The whole second (Unix time) `prefix` holds; `None` before the first line.
    second: Option<i64>,
    /// `2017-01-01T12:30:05`.
    prefix: String,
}

impl TimeText {
    /// Appends [`format_time`]'s text of `t`.
    pub fn write(&mut self, out: &mut String, t: Timestamp) {
        let second = t.0.div_euclid(1_000_000_000);
        if self.second != Some(second) {
            let mut full = String::with_capacity(27);
            write_time(&mut full, Timestamp(second * 1_000_000_000));
            full.truncate("2017-01-01T12:30:05".len());
            self.prefix = full;
            self.second = Some(second);
        }
        out.push_str(&self.prefix);
        out.push('.');
        push_digits(
            out,
            u64::try_from(t.0.rem_euclid(1_000_000_000) / 1_000).unwrap_or(0),
            6,
        );
        out.push('Z');
    }
}

/// Appends the last `width` decimal digits of `n`, zero-padded: `n` plus `10^width` written
/// whole, its leading `1` left out. Digits set one by one and checked as UTF-8 cost about
/// 110 instructions a line's time, this about 40 (#36).
#[inline(always)]
fn push_digits(out: &mut String, n: u64, width: u32) {
    let p = 10u64.pow(width);
    let mut buffer = itoa::Buffer::new();
    let text = buffer.format(n % p + p);
    out.push_str(text.get(1..).unwrap_or_default());
}

/// Appends `n` with at least `width` digits, zero-padded (a sign first when negative).
fn push_padded(out: &mut String, n: i64, width: usize) {
    let mut buffer = itoa::Buffer::new();
    let digits = buffer.format(n.unsigned_abs());
    if n < 0 {
        out.push('-');
    }
    for _ in digits.len()..width {
        out.push('0');
    }
    out.push_str(digits);
}

/// Appends `v / 10^digits` as a decimal: the fraction's trailing zeros (and a point with
/// nothing after it) left out, as Go writes durations.
// Always inlined: its callers' constant `digits` then divide by constants, not by a power
// computed a line (#36).
#[inline(always)]
fn push_fraction(out: &mut String, v: u64, digits: u32) {
    let p = 10u64.pow(digits);
    let (int, mut frac) = (v / p, v % p);
    out.push_str(itoa::Buffer::new().format(int));
    if frac == 0 {
        return;
    }
    out.push('.');
    // The trailing zeros divided away rather than trimmed from the text: every
    // decision-log record writes its latency (#36).
    let mut width = digits;
    while frac % 10 == 0 {
        frac /= 10;
        width -= 1;
    }
    push_digits(out, frac, width);
}

/// Go's `time.Duration.String()`: `19ms`, `1.5s`, `1m30s`, `1h0m0s`, `250µs`, `0s`.
pub fn go_duration(d: Duration) -> String {
    let mut out = String::with_capacity(16);
    push_go_duration(&mut out, d);
    out
}

/// Appends [`go_duration`]'s text. A decision-log record has a latency: pushed directly
/// rather than through `format!` and the strings it makes.
pub(crate) fn push_go_duration(out: &mut String, d: Duration) {
    let n = d.0;
    if n == 0 {
        out.push_str("0s");
        return;
    }
    let u = n.unsigned_abs();
    if n < 0 {
        out.push('-');
    }
    if u < 1_000 {
        out.push_str(itoa::Buffer::new().format(u));
        out.push_str("ns");
    } else if u < 1_000_000 {
        push_fraction(out, u, 3);
        out.push_str("\u{b5}s");
    } else if u < 1_000_000_000 {
        push_fraction(out, u, 6);
        out.push_str("ms");
    } else {
        let secs = u / 1_000_000_000;
        let (h, m) = (secs / 3600, (secs / 60) % 60);
        if h > 0 {
            out.push_str(itoa::Buffer::new().format(h));
            out.push('h');
        }
        if h > 0 || m > 0 {
            out.push_str(itoa::Buffer::new().format(m));
            out.push('m');
        }
        push_fraction(out, (secs % 60) * 1_000_000_000 + u % 1_000_000_000, 9);
        out.push('s');
    }
}

/// The bytes that may start a JSON escape: controls, `"`, `\`, and 0xE2 (the first byte of
/// U+2028 and U+2029, which JavaScript readers take for line ends).
const MAY_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table[0xE2] = true;
    table
};

/// Whether no byte of `bytes` may start an escape ([`MAY_ESCAPE`]). Most text written
/// (names, codes, ids, header values) has none: a test without early exit, which the
/// compiler runs many bytes at a time, spares it the byte-by-byte search below (#36: the
/// decision log's line).
fn needs_no_escape(bytes: &[u8]) -> bool {
    // Eight bytes a step in a `u64` (SWAR: the any-byte tests of "Bit Twiddling Hacks",
    // exact for the question "is there such a byte"), the bytes past the last step in one
    // more. The byte-wise loop cost about 4.5 instructions a byte, 1.6k a decision-log line
    // (#36).
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let suspects = |x: u64| {
        (x.wrapping_sub(ONES * 0x20) & !x & HIGHS)
            | has_zero(x ^ (ONES * u64::from(b'"')))
            | has_zero(x ^ (ONES * u64::from(b'\\')))
            | has_zero(x ^ (ONES * 0xE2))
    };
    // Words read from the bytes in fixed sizes: the compiler loads them whole, where the copy
    // of a variable-length tail into a padded word was a `memcpy` call a string (#36: about
    // 30 strings a decision-log line, most shorter than eight bytes). A byte read twice
    // (the overlapping last word, the halves of a short string) changes no answer.
    let n = bytes.len();
    let word = |at: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(word)
    };
    let half = |at: usize| {
        let mut half = [0u8; 4];
        half.copy_from_slice(&bytes[at..at + 4]);
        u64::from(u32::from_le_bytes(half))
    };
    let suspect = if n >= 8 {
        let mut suspect = 0u64;
        let mut at = 0;
        while at + 8 <= n {
            suspect |= suspects(word(at));
            at += 8;
        }
        if at < n {
            suspect |= suspects(word(n - 8));
        }
        suspect
    } else if n >= 4 {
        suspects(half(0) | (half(n - 4) << 32))
    } else {
        // Up to three bytes: the first, the middle and the last cover them, the rest of the
        // word a byte that needs no escape.
        let mut padded = [b'a'; 8];
        if let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) {
            padded[0] = first;
            padded[1] = bytes[n / 2];
            padded[2] = last;
        }
        suspects(u64::from_le_bytes(padded))
    };
    suspect == 0
}

/// Appends `s` as a JSON string.
pub fn json_string(out: &mut String, s: &str) {
    out.push('"');
    if needs_no_escape(s.as_bytes()) {
        out.push_str(s);
        out.push('"');
        return;
    }
    // Every field of every log line passes here: bytes are scanned rather than chars (no
    // UTF-8 decoding), and runs that need no escape are copied whole. Only ASCII bytes and
    // the first byte of U+2028/U+2029 (0xE2) can start an escape; a 0xE2 is always a char
    // boundary, so slicing at it is safe.
    let bytes = s.as_bytes();
    let mut plain = 0;
    let mut i = 0;
    // One table look-up a byte to find the next byte that may need an escape.
    while let Some(found) = bytes[i..].iter().position(|&b| MAY_ESCAPE[usize::from(b)]) {
        i += found;
        let b = bytes[i];
        let (escape, len) = match b {
            b'"' => ("\\\"", 1),
            b'\\' => ("\\\\", 1),
            b'\n' => ("\\n", 1),
            b'\r' => ("\\r", 1),
            b'\t' => ("\\t", 1),
            0..0x20 => ("", 1),
            0xE2 if bytes.get(i + 1) == Some(&0x80)
                && matches!(bytes.get(i + 2), Some(0xA8 | 0xA9)) =>
            {
                ("", 3)
            }
            _ => {
                i += 1;
                continue;
            }
        };
        out.push_str(&s[plain..i]);
        if escape.is_empty() {
            let c = s[i..].chars().next().map_or(0, u32::from);
            let _ = write!(out, "\\u{c:04x}");
        } else {
            out.push_str(escape);
        }
        i += len;
        plain = i;
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn double(d: f64) -> Option<String> {
    // Rust prints 1e21 in full and 1.0 as "1": both valid JSON numbers.
    d.is_finite().then(|| format!("{d}"))
}

fn special_double(d: f64) -> &'static str {
    if d.is_nan() {
        "NaN"
    } else if d > 0.0 {
        "+Inf"
    } else {
        "-Inf"
    }
}

/// Appends a value as JSON: numbers and booleans as such, timestamps in [`format_time`],
/// durations as Go strings, bytes in base64 (as zap), NaN and infinities as the strings
/// `NaN`, `+Inf`, `-Inf` (as zap), maps as objects, everything else as its text.
pub fn json_value(out: &mut String, v: &Value) {
    match v {
        Value::Int64(i) => out.push_str(itoa::Buffer::new().format(*i)),
        Value::Double(d) => match double(*d) {
            Some(text) => out.push_str(&text),
            None => json_string(out, special_double(*d)),
        },
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Timestamp(t) => {
            // The time has no character JSON escapes.
            out.push('"');
            write_time(out, *t);
            out.push('"');
        }
        Value::Duration(d) => {
            // A duration has no character JSON escapes.
            out.push('"');
            push_go_duration(out, *d);
            out.push('"');
        }
        Value::Bytes(b) => json_string(out, &base64(b)),
        Value::IpAddress(ip) => json_string(out, &ip.to_string()),
        Value::StringMap(m) => json_string_map(out, m),
        Value::String(s) | Value::EmailAddress(s) | Value::Uri(s) | Value::DnsName(s) => {
            json_string(out, s)
        }
    }
}

/// Appends a map of texts as a JSON object, in key order.
pub(crate) fn json_string_map(out: &mut String, m: &StringMap) {
    out.push('{');
    for (i, (k, v)) in m.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_string(out, k);
        out.push(':');
        json_string(out, v);
    }
    out.push('}');
}

/// Appends a value for a console line: text bare when it is one plain word, JSON-quoted
/// otherwise; maps as JSON objects.
pub fn console_value(out: &mut String, v: &Value) {
    let text = match v {
        Value::StringMap(_) => return json_value(out, v),
        Value::Double(d) if double(*d).is_none() => special_double(*d).to_string(),
        Value::Timestamp(t) => format_time(*t),
        Value::Duration(d) => go_duration(*d),
        Value::Bytes(b) => base64(b),
        other => other.to_string(),
    };
    let plain = !text.is_empty()
        && !text
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '"' || c == '=' || c == '\\');
    if plain {
        out.push_str(&text);
    } else {
        json_string(out, &text);
    }
}

/// What a JSON line starts with: `{"level":"info","time":"..."`, the time through `times`,
/// which a batch's lines share.
pub(crate) fn json_head(out: &mut String, level: Level, time: Timestamp, times: &mut TimeText) {
    out.push_str(match level {
        Level::Info => "{\"level\":\"info\",\"time\":\"",
        Level::Warning => "{\"level\":\"warn\",\"time\":\"",
        Level::Error => "{\"level\":\"error\",\"time\":\"",
    });
    times.write(out, time);
    out.push('"');
}

/// One record: what a line is made of.
pub struct Record<'a> {
    /// Its level.
    pub level: Level,
    /// When it happened.
    pub time: Timestamp,
    /// The instance's name.
    pub instance: &'a str,
    /// Named values, in output order.
    pub fields: Vec<(&'a str, &'a Value)>,
}

impl Record<'_> {
    /// Appends the record as one JSON object and a newline: `level`, `time`, `instance`,
    /// then the fields (zap's layout in Istio). A batch's lines go through
    /// [`crate::Repeats::write_json`] instead, which writes the same text.
    pub fn write_json(&self, out: &mut String) {
        self.write_json_head(out, &mut TimeText::default());
        out.push_str(",\"instance\":");
        json_string(out, self.instance);
        for (k, v) in &self.fields {
            out.push(',');
            json_string(out, k);
            out.push(':');
            json_value(out, v);
        }
        out.push_str("}\n");
    }

    /// What a JSON line starts with: `{"level":"info","time":"..."`, the time through
    /// `times`, which a batch's lines share.
    pub(crate) fn write_json_head(&self, out: &mut String, times: &mut TimeText) {
        json_head(out, self.level, self.time, times);
    }

    /// Appends the record as a console line and a newline:
    /// `time<TAB>level<TAB>instance<TAB>key=value key=value`.
    pub fn write_console(&self, out: &mut String) {
        write_time(out, self.time);
        out.push('\t');
        out.push_str(self.level.label());
        out.push('\t');
        out.push_str(self.instance);
        for (i, (k, v)) in self.fields.iter().enumerate() {
            out.push(if i == 0 { '\t' } else { ' ' });
            out.push_str(k);
            out.push('=');
            console_value(out, v);
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn durations_print_like_go() {
        let d = |n: i64| go_duration(Duration(n));
        assert_eq!(d(0), "0s");
        assert_eq!(d(300), "300ns");
        assert_eq!(d(1_500), "1.5\u{b5}s");
        assert_eq!(d(19_000_000), "19ms");
        assert_eq!(d(19_500_000), "19.5ms");
        assert_eq!(d(1_500_000_000), "1.5s");
        assert_eq!(d(90_000_000_000), "1m30s");
        assert_eq!(d(3_600_000_000_000), "1h0m0s");
        assert_eq!(d(3_723_005_000_000), "1h2m3.005s");
        assert_eq!(d(-2_000_000), "-2ms");
        // Zeros inside the fraction stay; a duration in a JSON line is quoted as it reads.
        assert_eq!(d(1_000_001), "1.000001ms");
        assert_eq!(d(1_050), "1.05\u{b5}s");
        let mut json = String::new();
        json_value(&mut json, &Value::Duration(Duration(61_000_000_000)));
        assert_eq!(json, "\"1m1s\"");
    }

    proptest::proptest! {
        /// A fraction reads as the decimal `v / 10^digits` with its trailing zeros dropped.
        #[test]
        fn fractions_read_as_their_decimals(v in proptest::num::u64::ANY, digits in 0usize..3) {
            let digits = [3u32, 6, 9][digits];
            let p = 10u64.pow(digits);
            let full = format!("{}.{:0width$}", v / p, v % p, width = digits as usize);
            let expected = full.trim_end_matches('0').trim_end_matches('.');
            let mut out = String::new();
            push_fraction(&mut out, v, digits);
            proptest::prop_assert_eq!(out, expected);
        }
    }

    #[test]
    fn every_level_is_written_as_its_label() {
        for level in [Level::Info, Level::Warning, Level::Error] {
            let record = Record {
                level,
                time: Timestamp(0),
                instance: "i",
                fields: Vec::new(),
            };
            let mut out = String::new();
            record.write_json(&mut out);
            let line: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
            assert_eq!(line["level"], level.label(), "{out}");
            assert_eq!(line["time"], "1970-01-01T00:00:00.000000Z", "{out}");
        }
    }

    #[test]
    fn times_shared_by_a_batch_read_as_each_line_alone() {
        let mut times = TimeText::default();
        for text in [
            "2017-01-01T12:30:05.000123Z",
            "2017-01-01T12:30:05.999999Z",
            "2017-01-01T12:30:06.000000Z",
            "2017-01-01T12:30:05.500000Z",
            "1969-12-31T23:59:59.999999Z",
            "1970-01-01T00:00:00.000001Z",
            "2024-02-29T23:59:59.000010Z",
        ] {
            let t = Timestamp::parse_rfc3339(text).expect("t");
            let mut out = String::new();
            times.write(&mut out, t);
            assert_eq!(out, text);
            assert_eq!(out, format_time(t));
        }
    }

    #[test]
    fn times_have_microseconds() {
        let t = Timestamp::parse_rfc3339("2017-01-01T12:30:05.000123456Z").expect("t");
        assert_eq!(format_time(t), "2017-01-01T12:30:05.000123Z");
        assert_eq!(format_time(Timestamp(0)), "1970-01-01T00:00:00.000000Z");
    }

    #[test]
    fn values_as_json() {
        let j = |v: Value| {
            let mut s = String::new();
            json_value(&mut s, &v);
            s
        };
        assert_eq!(j(Value::Int64(-3)), "-3");
        assert_eq!(j(Value::Double(2.5)), "2.5");
        assert_eq!(j(Value::Double(f64::NAN)), "\"NaN\"");
        assert_eq!(j(Value::Double(f64::NEG_INFINITY)), "\"-Inf\"");
        assert_eq!(j(Value::Bool(true)), "true");
        assert_eq!(j(Value::from("a\"b\n")), "\"a\\\"b\\n\"");
        assert_eq!(j(Value::Bytes(Arc::from(&b"hello"[..]))), "\"aGVsbG8=\"");
        assert_eq!(j(Value::Bytes(Arc::from(&b"hi"[..]))), "\"aGk=\"");
        assert_eq!(j(Value::Bytes(Arc::from(&b"abc"[..]))), "\"YWJj\"");
        assert_eq!(
            j(Value::from(StringMap::from_pairs([("b", "2"), ("a", "1")]))),
            "{\"a\":\"1\",\"b\":\"2\"}"
        );
        assert_eq!(
            j(Value::IpAddress("10.0.0.1".parse().expect("ip"))),
            "\"10.0.0.1\""
        );
        for v in [
            Value::Double(1e300),
            Value::Double(1e-300),
            Value::Double(-0.0),
            Value::from("\u{1}\u{2028}é"),
        ] {
            let text = j(v.clone());
            serde_json::from_str::<serde_json::Value>(&text)
                .unwrap_or_else(|e| panic!("{v:?} gave {text}: {e}"));
        }
    }

    #[test]
    fn console_values() {
        let c = |v: Value| {
            let mut s = String::new();
            console_value(&mut s, &v);
            s
        };
        assert_eq!(c(Value::from("GET")), "GET");
        assert_eq!(c(Value::from("two words")), "\"two words\"");
        assert_eq!(c(Value::from("")), "\"\"");
        assert_eq!(c(Value::from("a=b")), "\"a=b\"");
        assert_eq!(c(Value::Duration(Duration(19_000_000))), "19ms");
        assert_eq!(c(Value::Int64(200)), "200");
    }

    #[test]
    fn json_strings_read_back_as_written() {
        for text in [
            "",
            "plain",
            "say \"hi\"",
            "back\\slash",
            "tab\tnew\nline\r",
            "\u{1}\u{1f}",
            "line\u{2028}para\u{2029}end",
            "ünïcødé and 😀",
            "\"",
            "trailing\\",
            "\u{2027}\u{20ac}\u{e2}",
        ] {
            let mut out = String::new();
            json_string(&mut out, text);
            let back: String = serde_json::from_str(&out).expect("valid JSON");
            assert_eq!(back, text, "{out}");
            assert!(!out.contains('\u{2028}') && !out.chars().any(|c| (c as u32) < 0x20));
        }
        // The test that lets plain text through whole says yes exactly where no byte may
        // start an escape, wherever the byte is (in an eight-byte step or after the last).
        // Every length up to 19 too: short strings and tails are read in overlapping words.
        for len in 0..=19 {
            assert!(needs_no_escape(&b"abcdefghijklmnopqrs"[..len]), "{len}");
            for b in 0..=255u8 {
                for at in 0..len {
                    let mut text = *b"abcdefghijklmnopqrs";
                    text[at] = b;
                    assert_eq!(
                        needs_no_escape(&text[..len]),
                        !MAY_ESCAPE[usize::from(b)],
                        "{b:#x} at {at} of {len}"
                    );
                }
            }
        }
        let mut out = String::new();
        json_string(&mut out, "a\u{2028}b\u{1}\u{2027}");
        assert_eq!(out, "\"a\\u2028b\\u0001\u{2027}\"");
    }
}
