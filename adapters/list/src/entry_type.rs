//! How list entries are compared: the one setting both the config and the list need.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// How list entries are compared (Istio's `ListEntryType`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum EntryType {
    /// Exact strings.
    #[default]
    Strings,
    /// Strings compared without regard to case.
    CaseInsensitiveStrings,
    /// IPv4/IPv6 addresses and CIDR ranges.
    IpAddresses,
    /// Regular expressions (RE2-like syntax), matching anywhere in the value.
    Regex,
}

impl EntryType {
    /// Every entry type, in Istio's enum order (0..=3).
    pub const ALL: [EntryType; 4] = [
        EntryType::Strings,
        EntryType::CaseInsensitiveStrings,
        EntryType::IpAddresses,
        EntryType::Regex,
    ];

    /// Istio's enum name (`IP_ADDRESSES`).
    pub fn name(self) -> &'static str {
        match self {
            EntryType::Strings => "STRINGS",
            EntryType::CaseInsensitiveStrings => "CASE_INSENSITIVE_STRINGS",
            EntryType::IpAddresses => "IP_ADDRESSES",
            EntryType::Regex => "REGEX",
        }
    }
}

impl fmt::Display for EntryType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Accepts the enum name (as protobuf JSON does) or its number.
impl<'de> Deserialize<'de> for EntryType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<EntryType, D::Error> {
        struct V;
        const EXPECTED: &str = "STRINGS, CASE_INSENSITIVE_STRINGS, IP_ADDRESSES or REGEX (or 0-3)";
        impl Visitor<'_> for V {
            type Value = EntryType;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<EntryType, E> {
                EntryType::ALL
                    .into_iter()
                    .find(|t| t.name() == v)
                    .ok_or_else(|| {
                        E::custom(format!("unknown entryType {v:?}, expected {EXPECTED}"))
                    })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<EntryType, E> {
                usize::try_from(v)
                    .ok()
                    .and_then(|i| EntryType::ALL.get(i).copied())
                    .ok_or_else(|| E::custom(format!("unknown entryType {v}, expected {EXPECTED}")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<EntryType, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!(
                        "unknown entryType {v}, expected {EXPECTED}"
                    ))),
                }
            }
        }
        deserializer.deserialize_any(V)
    }
}
