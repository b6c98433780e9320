//! Typed attribute values with Istio's value types.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use crate::string_map::StringMap;

/// The type of an attribute, as declared in an `attributemanifest` (Istio's `ValueType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ValueType {
    /// UTF-8 text.
    String,
    /// Signed 64-bit integer.
    Int64,
    /// 64-bit float.
    Double,
    /// `true` or `false`.
    Bool,
    /// A point in time.
    Timestamp,
    /// A signed span of time.
    Duration,
    /// Raw bytes.
    Bytes,
    /// An IPv4 or IPv6 address.
    IpAddress,
    /// An e-mail address; equality ignores the case of the domain.
    EmailAddress,
    /// A URI; equality ignores the case of scheme and host.
    Uri,
    /// A DNS name; equality ignores case and a trailing dot.
    DnsName,
    /// A map from string to string (headers, labels).
    StringMap,
}

impl ValueType {
    /// Every value type, in declaration order.
    pub const ALL: [ValueType; 12] = [
        ValueType::String,
        ValueType::Int64,
        ValueType::Double,
        ValueType::Bool,
        ValueType::Timestamp,
        ValueType::Duration,
        ValueType::Bytes,
        ValueType::IpAddress,
        ValueType::EmailAddress,
        ValueType::Uri,
        ValueType::DnsName,
        ValueType::StringMap,
    ];

    /// The name used in manifests (`STRING`, `INT64`, ...).
    pub fn manifest_name(self) -> &'static str {
        match self {
            ValueType::String => "STRING",
            ValueType::Int64 => "INT64",
            ValueType::Double => "DOUBLE",
            ValueType::Bool => "BOOL",
            ValueType::Timestamp => "TIMESTAMP",
            ValueType::Duration => "DURATION",
            ValueType::Bytes => "BYTES",
            ValueType::IpAddress => "IP_ADDRESS",
            ValueType::EmailAddress => "EMAIL_ADDRESS",
            ValueType::Uri => "URI",
            ValueType::DnsName => "DNS_NAME",
            ValueType::StringMap => "STRING_MAP",
        }
    }

    /// Parses a manifest name; `None` for an unknown one.
    pub fn from_manifest_name(name: &str) -> Option<ValueType> {
        ValueType::ALL
            .into_iter()
            .find(|t| t.manifest_name() == name)
    }

    /// True for the types whose values are text underneath (and compare to string literals).
    pub fn is_stringlike(self) -> bool {
        matches!(
            self,
            ValueType::String | ValueType::EmailAddress | ValueType::Uri | ValueType::DnsName
        )
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.manifest_name())
    }
}

/// A point in time, nanoseconds since the Unix epoch (covers years 1677 to 2262).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// Parses an RFC 3339 timestamp such as `2017-01-01T00:00:00Z`.
    pub fn parse_rfc3339(text: &str) -> Option<Timestamp> {
        let t = chrono::DateTime::parse_from_rfc3339(text).ok()?;
        t.timestamp_nanos_opt().map(Timestamp)
    }

    /// From seconds and nanoseconds since the epoch, as protobuf's `Timestamp` carries them;
    /// `None` when the sum is outside what nanoseconds in an `i64` hold.
    pub fn from_parts(seconds: i64, nanos: i32) -> Option<Timestamp> {
        nanos_from_parts(seconds, nanos).map(Timestamp)
    }

    /// The current wall-clock time.
    pub fn now() -> Timestamp {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Timestamp(now)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = chrono::DateTime::from_timestamp_nanos(self.0);
        write!(
            f,
            "{}",
            t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
        )
    }
}

/// A signed span of time in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(pub i64);

/// `seconds * 10^9 + nanos` when it fits an `i64`. Summed in 128 bits: the earliest
/// timestamps have seconds whose product alone leaves the range while the sum is back inside
/// it (seconds -9223372037 with positive nanos), which is how protobuf writes them.
fn nanos_from_parts(seconds: i64, nanos: i32) -> Option<i64> {
    i64::try_from(i128::from(seconds) * 1_000_000_000 + i128::from(nanos)).ok()
}

impl Duration {
    /// From seconds and nanoseconds, as protobuf's `Duration` carries them; `None` when the
    /// sum is outside what nanoseconds in an `i64` hold.
    pub fn from_parts(seconds: i64, nanos: i32) -> Option<Duration> {
        nanos_from_parts(seconds, nanos).map(Duration)
    }

    /// From a standard (unsigned) duration, saturating.
    pub fn from_std(d: std::time::Duration) -> Duration {
        Duration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }

    /// The standard duration, or zero when negative.
    pub fn to_std(self) -> std::time::Duration {
        std::time::Duration::from_nanos(u64::try_from(self.0).unwrap_or(0))
    }

    /// Parses Go-style duration strings: `19ms`, `1.5s`, `1h30m`, `-2us`, `300ns`, `0`.
    pub fn parse(text: &str) -> Option<Duration> {
        let (negative, mut rest) = match text.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        if rest == "0" {
            return Some(Duration(0));
        }
        if rest.is_empty() {
            return None;
        }
        // Integers are summed exactly; only fractional parts go through floating point.
        let mut total: i128 = 0;
        while !rest.is_empty() {
            let num_len = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(rest.len());
            if num_len == 0 {
                return None;
            }
            let number = &rest[..num_len];
            rest = &rest[num_len..];
            let unit_len = rest
                .find(|c: char| c.is_ascii_digit() || c == '.')
                .unwrap_or(rest.len());
            let scale: i128 = match &rest[..unit_len] {
                "ns" => 1,
                "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
                "ms" => 1_000_000,
                "s" => 1_000_000_000,
                "m" => 60_000_000_000,
                "h" => 3_600_000_000_000,
                _ => return None,
            };
            rest = &rest[unit_len..];
            let nanos = if number.contains('.') {
                let f: f64 = number.parse().ok()?;
                let n = (f * scale as f64).round();
                if !n.is_finite() || n > i64::MAX as f64 {
                    return None;
                }
                n as i128
            } else {
                number.parse::<i128>().ok()?.checked_mul(scale)?
            };
            total = total.checked_add(nanos)?;
        }
        let total = i64::try_from(total).ok()?;
        Some(Duration(if negative { -total } else { total }))
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        let abs = n.unsigned_abs();
        let sign = if n < 0 { "-" } else { "" };
        if abs == 0 {
            f.write_str("0s")
        } else if abs.is_multiple_of(1_000_000_000) {
            write!(f, "{sign}{}s", abs / 1_000_000_000)
        } else if abs.is_multiple_of(1_000_000) {
            write!(f, "{sign}{}ms", abs / 1_000_000)
        } else if abs.is_multiple_of(1_000) {
            write!(f, "{sign}{}us", abs / 1_000)
        } else {
            write!(f, "{sign}{abs}ns")
        }
    }
}

/// A typed attribute value. Clones are cheap: text and maps are shared.
#[derive(Clone, Debug)]
pub enum Value {
    /// `STRING`.
    String(Arc<str>),
    /// `INT64`.
    Int64(i64),
    /// `DOUBLE`.
    Double(f64),
    /// `BOOL`.
    Bool(bool),
    /// `TIMESTAMP`.
    Timestamp(Timestamp),
    /// `DURATION`.
    Duration(Duration),
    /// `BYTES`.
    Bytes(Arc<[u8]>),
    /// `IP_ADDRESS`.
    IpAddress(IpAddr),
    /// `EMAIL_ADDRESS`.
    EmailAddress(Arc<str>),
    /// `URI`.
    Uri(Arc<str>),
    /// `DNS_NAME`.
    DnsName(Arc<str>),
    /// `STRING_MAP`.
    StringMap(Arc<StringMap>),
}

impl Value {
    /// The value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::String(_) => ValueType::String,
            Value::Int64(_) => ValueType::Int64,
            Value::Double(_) => ValueType::Double,
            Value::Bool(_) => ValueType::Bool,
            Value::Timestamp(_) => ValueType::Timestamp,
            Value::Duration(_) => ValueType::Duration,
            Value::Bytes(_) => ValueType::Bytes,
            Value::IpAddress(_) => ValueType::IpAddress,
            Value::EmailAddress(_) => ValueType::EmailAddress,
            Value::Uri(_) => ValueType::Uri,
            Value::DnsName(_) => ValueType::DnsName,
            Value::StringMap(_) => ValueType::StringMap,
        }
    }

    /// A `STRING` value.
    pub fn string(s: impl Into<Arc<str>>) -> Value {
        Value::String(s.into())
    }

    /// The text of a string-like value (string, e-mail, URI, DNS name).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) | Value::EmailAddress(s) | Value::Uri(s) | Value::DnsName(s) => {
                Some(s)
            }
            _ => None,
        }
    }

    /// The boolean, if this is a `BOOL`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The integer, if this is an `INT64`.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int64(i) => Some(*i),
            _ => None,
        }
    }

    /// The value as a metric's number, as Istio's metric adapters read one: INT64 and
    /// DOUBLE as they are, DURATION in seconds, BOOL as 1 or 0, STRING parsed as a number;
    /// anything else is an error that says why.
    pub fn to_metric_number(&self) -> Result<f64, String> {
        match self {
            Value::Int64(i) => Ok(*i as f64),
            Value::Double(d) => Ok(*d),
            Value::Duration(d) => Ok(d.0 as f64 / 1e9),
            Value::Bool(b) => Ok(if *b { 1.0 } else { 0.0 }),
            Value::String(s) => s
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("{s:?} is not a number")),
            other => Err(format!(
                "a {} value cannot be a metric value",
                other.value_type()
            )),
        }
    }

    /// The map, if this is a `STRING_MAP`.
    pub fn as_map(&self) -> Option<&StringMap> {
        match self {
            Value::StringMap(m) => Some(m),
            _ => None,
        }
    }

    /// Converts text to a value of `ty`, as config literals and protocol strings need
    /// (`"19ms"` for a duration, `"10.0.0.1"` for an IP address). `None` when it does not parse.
    pub fn parse_as(ty: ValueType, text: &str) -> Option<Value> {
        Some(match ty {
            ValueType::String => Value::String(text.into()),
            ValueType::Int64 => Value::Int64(text.trim().parse().ok()?),
            ValueType::Double => Value::Double(text.trim().parse().ok()?),
            ValueType::Bool => Value::Bool(text.trim().parse().ok()?),
            ValueType::Timestamp => Value::Timestamp(Timestamp::parse_rfc3339(text.trim())?),
            ValueType::Duration => Value::Duration(Duration::parse(text.trim())?),
            ValueType::Bytes => Value::Bytes(text.as_bytes().into()),
            ValueType::IpAddress => Value::IpAddress(text.trim().parse().ok()?),
            ValueType::EmailAddress => {
                let (local, domain) = text.split_once('@')?;
                if local.is_empty() || domain.is_empty() || domain.contains('@') {
                    return None;
                }
                Value::EmailAddress(text.into())
            }
            ValueType::Uri => {
                let (scheme, _) = text.split_once(':')?;
                if scheme.is_empty()
                    || !scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                {
                    return None;
                }
                Value::Uri(text.into())
            }
            ValueType::DnsName => {
                let trimmed = text.strip_suffix('.').unwrap_or(text);
                if trimmed.is_empty()
                    || trimmed.len() > 253
                    || trimmed.split('.').any(|label| {
                        label.is_empty()
                            || label.len() > 63
                            || !label
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                    })
                {
                    return None;
                }
                Value::DnsName(text.into())
            }
            ValueType::StringMap => return None,
        })
    }
}

/// Equality is typed: IP addresses compare as addresses, DNS names ignore case and a trailing
/// dot, e-mail addresses ignore the domain's case, URIs ignore the case of scheme and host.
/// Values of different types are never equal (doubles and integers excepted, compared as numbers).
impl PartialEq for Value {
    fn eq(&self, other: &Value) -> bool {
        use Value::*;
        match (self, other) {
            (String(a), String(b)) => a == b,
            (Int64(a), Int64(b)) => a == b,
            (Double(a), Double(b)) => a == b,
            (Int64(a), Double(b)) | (Double(b), Int64(a)) => (*a as f64) == *b,
            (Bool(a), Bool(b)) => a == b,
            (Timestamp(a), Timestamp(b)) => a == b,
            (Duration(a), Duration(b)) => a == b,
            (Bytes(a), Bytes(b)) => a == b,
            (IpAddress(a), IpAddress(b)) => ip_eq(a, b),
            (EmailAddress(a), EmailAddress(b)) => email_eq(a, b),
            (Uri(a), Uri(b)) => uri_eq(a, b),
            (DnsName(a), DnsName(b)) => dns_eq(a, b),
            (StringMap(a), StringMap(b)) => a == b,
            _ => false,
        }
    }
}

fn ip_eq(a: &IpAddr, b: &IpAddr) -> bool {
    // An IPv4 address equals its IPv4-mapped IPv6 form, as Go's net.IP.Equal has it.
    match (a, b) {
        (IpAddr::V4(x), IpAddr::V6(y)) | (IpAddr::V6(y), IpAddr::V4(x)) => {
            y.to_ipv4_mapped() == Some(*x)
        }
        _ => a == b,
    }
}

fn dns_eq(a: &str, b: &str) -> bool {
    let a = a.strip_suffix('.').unwrap_or(a);
    let b = b.strip_suffix('.').unwrap_or(b);
    a.eq_ignore_ascii_case(b)
}

fn email_eq(a: &str, b: &str) -> bool {
    match (a.rsplit_once('@'), b.rsplit_once('@')) {
        (Some((la, da)), Some((lb, db))) => la == lb && dns_eq(da, db),
        _ => a == b,
    }
}

fn uri_eq(a: &str, b: &str) -> bool {
    fn split(u: &str) -> (&str, &str, &str) {
        let Some((scheme, rest)) = u.split_once(':') else {
            return ("", "", u);
        };
        match rest.strip_prefix("//") {
            Some(after) => {
                let end = after.find(['/', '?', '#']).unwrap_or(after.len());
                (scheme, &after[..end], &after[end..])
            }
            None => (scheme, "", rest),
        }
    }
    let (sa, ha, ra) = split(a);
    let (sb, hb, rb) = split(b);
    sa.eq_ignore_ascii_case(sb) && ha.eq_ignore_ascii_case(hb) && ra == rb
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::String(s) | Value::EmailAddress(s) | Value::Uri(s) | Value::DnsName(s) => {
                f.write_str(s)
            }
            Value::Int64(i) => write!(f, "{i}"),
            Value::Double(d) => write!(f, "{d}"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Timestamp(t) => write!(f, "{t}"),
            Value::Duration(d) => write!(f, "{d}"),
            Value::Bytes(b) => {
                for byte in b.iter() {
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
            Value::IpAddress(ip) => write!(f, "{ip}"),
            Value::StringMap(m) => write!(f, "{m}"),
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.into())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::String(s.into())
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Value {
        Value::Int64(i)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

impl From<f64> for Value {
    fn from(d: f64) -> Value {
        Value::Double(d)
    }
}

impl From<IpAddr> for Value {
    fn from(ip: IpAddr) -> Value {
        Value::IpAddress(ip)
    }
}

impl From<StringMap> for Value {
    fn from(m: StringMap) -> Value {
        Value::StringMap(Arc::new(m))
    }
}

#[cfg(test)]
mod tests;
