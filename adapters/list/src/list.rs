//! A compiled list: the provider's entries plus the overrides, in a structure that answers a
//! lookup without scanning the entries.
//!
//! | entry type | structure | lookup |
//! |---|---|---|
//! | `STRINGS` | `HashSet` | O(1) |
//! | `CASE_INSENSITIVE_STRINGS` | `HashSet` of lower-cased entries | O(1) (+ lower-casing the value) |
//! | `IP_ADDRESSES` | sorted, merged, disjoint `u128` intervals | O(log n) binary search |
//! | `REGEX` | one `regex::RegexSet` | linear in the value's length, not in the number of entries |

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;

use regex::{RegexSet, RegexSetBuilder};

use crate::entry_type::EntryType;

/// Compiled regexes may grow large for long lists; allow more than the crate's default.
const REGEX_SIZE_LIMIT: usize = 256 << 20;

/// A list ready for lookups.
#[derive(Clone)]
pub struct List {
    entries: Entries,
    len: usize,
}

#[derive(Clone)]
enum Entries {
    Strings(HashSet<String>),
    CaseInsensitive(HashSet<String>),
    Ips(IpRanges),
    Regex(RegexSet),
}

/// What is looked up: text, or an address that arrived typed (an `IP_ADDRESS` attribute).
#[derive(Clone, Copy, Debug)]
pub enum Lookup<'a> {
    /// A string value.
    Text(&'a str),
    /// An IP address value.
    Ip(IpAddr),
}

impl fmt::Display for Lookup<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lookup::Text(s) => f.write_str(s),
            // Go printed IPv4-mapped addresses in dotted form; so do we.
            Lookup::Ip(ip) => write!(f, "{}", ip.to_canonical()),
        }
    }
}

impl fmt::Debug for List {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.entries {
            Entries::Strings(_) => "strings",
            Entries::CaseInsensitive(_) => "case-insensitive strings",
            Entries::Ips(_) => "IP ranges",
            Entries::Regex(_) => "regexes",
        };
        write!(f, "List({} {kind})", self.len)
    }
}

impl List {
    /// Builds a list from a provider's body (may be empty) and the configured overrides.
    /// Fails on the first provider entry that is not a valid IP/CIDR or regex.
    pub fn build(entry_type: EntryType, body: &str, overrides: &[String]) -> Result<List, String> {
        let lines = provider_entries(entry_type, body);
        // Overrides are taken as written (Istio skipped only empty ones).
        let overrides = overrides
            .iter()
            .map(String::as_str)
            .filter(|s| !s.is_empty());
        let all: Vec<&str> = lines.into_iter().chain(overrides).collect();
        let len = all.len();
        let entries = match entry_type {
            EntryType::Strings => Entries::Strings(all.into_iter().map(str::to_owned).collect()),
            EntryType::CaseInsensitiveStrings => {
                Entries::CaseInsensitive(all.into_iter().map(str::to_lowercase).collect())
            }
            EntryType::IpAddresses => {
                let mut ranges = Vec::with_capacity(all.len());
                for entry in all {
                    ranges.push(
                        parse_cidr(entry)
                            .map_err(|e| format!("could not parse list entry {entry}: {e}"))?,
                    );
                }
                Entries::Ips(IpRanges::new(ranges))
            }
            EntryType::Regex => Entries::Regex(compile_regex_set(&all)?),
        };
        Ok(List { entries, len })
    }

    /// Number of entries it was built from (before de-duplication and merging).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when built from no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the value is in the list. `Err` when the value cannot be looked up in a list of
    /// this kind (text that is not an IP address in an `IP_ADDRESSES` list).
    pub fn contains(&self, value: Lookup<'_>) -> Result<bool, String> {
        match (&self.entries, value) {
            (Entries::Strings(set), Lookup::Text(s)) => Ok(set.contains(s)),
            (Entries::CaseInsensitive(set), Lookup::Text(s)) => Ok(set.contains(&s.to_lowercase())),
            (Entries::Regex(set), Lookup::Text(s)) => Ok(set.is_match(s)),
            (Entries::Ips(ranges), Lookup::Ip(ip)) => Ok(ranges.contains(ip)),
            (Entries::Ips(ranges), Lookup::Text(s)) => match s.trim().parse::<IpAddr>() {
                Ok(ip) => Ok(ranges.contains(ip)),
                Err(_) => Err(format!("{s} is not a valid IP address")),
            },
            // A typed address against a textual list: compare its usual text form.
            (_, Lookup::Ip(ip)) => {
                let text = ip.to_canonical().to_string();
                self.contains(Lookup::Text(&text))
            }
        }
    }
}

fn compile_regex_set(patterns: &[&str]) -> Result<RegexSet, String> {
    match RegexSetBuilder::new(patterns)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
    {
        Ok(set) => Ok(set),
        // Name the offending pattern, which RegexSet's error does not do.
        Err(set_error) => Err(patterns
            .iter()
            .find_map(|p| {
                regex::Regex::new(p)
                    .err()
                    .map(|e| format!("could not parse regex {p}: {e}"))
            })
            .unwrap_or_else(|| format!("could not compile regexes: {set_error}"))),
    }
}

/// The entries of a provider's body: one per line, surrounding white space trimmed, blank lines
/// and lines starting with `#` skipped. For `IP_ADDRESSES`, Istio's YAML document
/// `whitelist: [...]` (flow or block sequence) is accepted too.
pub fn provider_entries(entry_type: EntryType, body: &str) -> Vec<&str> {
    let lines = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    if entry_type == EntryType::IpAddresses {
        let mut peek = lines.clone();
        if let Some(first) = peek.next()
            && let Some(rest) = first.strip_prefix("whitelist:")
        {
            return yaml_whitelist(rest.trim(), peek);
        }
    }
    lines.collect()
}

/// `whitelist: [a, "b"]` or `whitelist:` followed by `- a` lines.
fn yaml_whitelist<'a>(inline: &'a str, rest: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    fn unquote(s: &str) -> &str {
        let s = s.split(" #").next().unwrap_or(s).trim();
        s.strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .or_else(|| s.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
            .unwrap_or(s)
    }
    if let Some(flow) = inline.strip_prefix('[') {
        let flow = flow.split(']').next().unwrap_or(flow);
        return flow
            .split(',')
            .map(unquote)
            .filter(|s| !s.is_empty())
            .collect();
    }
    rest.map_while(|l| l.strip_prefix('-'))
        .map(unquote)
        .filter(|s| !s.is_empty())
        .collect()
}

/// An address in one 128-bit space: IPv4 addresses become IPv4-mapped IPv6 addresses
/// (`::ffff:a.b.c.d`), so `10.0.0.0/8` and `::ffff:10.0.0.0/104` are the same range and a
/// v4-mapped value matches a v4 entry.
pub fn ip_to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// Parses `addr` or `addr/prefix` (IPv4 or IPv6) into an inclusive range. A bare address is a
/// single host (/32 or /128). Host bits after the prefix are ignored, as Go's ParseCIDR did.
pub fn parse_cidr(text: &str) -> Result<(u128, u128), String> {
    let text = text.trim();
    let (addr, prefix) = match text.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (text, None),
    };
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| format!("invalid CIDR address: {text}"))?;
    let max: u32 = if ip.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => max,
        Some(p) => match p.parse::<u32>() {
            // Reject "+8" and "08"-style oddities the way Go did: digits only.
            Ok(n) if n <= max && p.chars().all(|c| c.is_ascii_digit()) => n,
            _ => return Err(format!("invalid CIDR address: {text}")),
        },
    };
    let bits = prefix + (128 - max);
    let mask = if bits == 0 {
        0
    } else {
        u128::MAX << (128 - bits)
    };
    let start = ip_to_u128(ip) & mask;
    Ok((start, start | !mask))
}

/// Sorted, merged, non-overlapping inclusive `u128` intervals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpRanges {
    ranges: Vec<(u128, u128)>,
}

impl IpRanges {
    /// From any ranges (overlapping, adjacent, unsorted).
    pub fn new(mut ranges: Vec<(u128, u128)>) -> IpRanges {
        ranges.sort_unstable();
        let mut merged: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
        for (start, end) in ranges {
            match merged.last_mut() {
                // Overlapping or adjacent: extend.
                Some(last) if start <= last.1.saturating_add(1) => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        merged.shrink_to_fit();
        IpRanges { ranges: merged }
    }

    /// Whether an address is in one of the ranges: one binary search.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let x = ip_to_u128(ip);
        let after = self.ranges.partition_point(|(start, _)| *start <= x);
        after > 0 && self.ranges[after - 1].1 >= x
    }

    /// The merged intervals.
    pub fn intervals(&self) -> &[(u128, u128)] {
        &self.ranges
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn u128_to_ip(x: u128) -> IpAddr {
        IpAddr::V6(Ipv6Addr::from(x))
    }

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn ips(entries: &[&str]) -> List {
        List::build(EntryType::IpAddresses, &entries.join("\n"), &[]).expect("builds")
    }

    fn has(list: &List, s: &str) -> bool {
        list.contains(Lookup::Text(s)).expect("valid value")
    }

    #[test]
    fn strings_are_exact() {
        let list = List::build(
            EntryType::Strings,
            "# comment\nalpha\n\n  beta  \r\n",
            &["gamma".into(), String::new()],
        )
        .expect("builds");
        assert!(has(&list, "alpha"));
        assert!(has(&list, "beta"));
        assert!(has(&list, "gamma"));
        assert!(!has(&list, "Alpha"));
        assert!(!has(&list, ""));
        assert!(!has(&list, "# comment"));
        assert_eq!(list.len(), 3);
    }

    #[test]
    fn case_insensitive_strings() {
        let list = List::build(
            EntryType::CaseInsensitiveStrings,
            "Alpha\nÉCOLE",
            &["GaMMa".into()],
        )
        .expect("builds");
        for v in ["alpha", "ALPHA", "aLpHa", "école", "gamma", "GAMMA"] {
            assert!(has(&list, v), "{v}");
        }
        assert!(!has(&list, "delta"));
    }

    #[test]
    fn regexes_are_unanchored_like_go_matchstring() {
        let list = List::build(
            EntryType::Regex,
            "^v[0-9]+$\nadmin",
            &["\\.evil\\.com$".into()],
        )
        .expect("builds");
        assert!(has(&list, "v12"));
        assert!(!has(&list, "v12a"));
        assert!(has(&list, "superadmins"));
        assert!(has(&list, "www.evil.com"));
        assert!(!has(&list, "www.evil.com.org"));
        let err = List::build(EntryType::Regex, "ok\n(unclosed", &[]).expect_err("bad regex");
        assert!(err.contains("(unclosed"), "{err}");
        let empty = List::build(EntryType::Regex, "", &[]).expect("empty set");
        assert!(!has(&empty, "anything"));
    }

    #[test]
    fn cidr_edge_cases() {
        let all_v4 = ips(&["0.0.0.0/0"]);
        assert!(has(&all_v4, "1.2.3.4"));
        assert!(has(&all_v4, "255.255.255.255"));
        assert!(has(&all_v4, "::ffff:1.2.3.4"), "v4-mapped v6 is v4");
        assert!(!has(&all_v4, "2001:db8::1"), "/0 of v4 is not all of v6");

        let all = ips(&["::/0"]);
        assert!(has(&all, "2001:db8::1"));
        assert!(has(&all, "10.0.0.1"), "v4 maps into ::ffff:0:0/96");

        let host = ips(&["10.1.2.3/32", "2001:db8::7/128", "192.168.0.9"]);
        assert!(has(&host, "10.1.2.3"));
        assert!(!has(&host, "10.1.2.4"));
        assert!(!has(&host, "10.1.2.2"));
        assert!(has(&host, "2001:db8::7"));
        assert!(!has(&host, "2001:db8::8"));
        assert!(has(&host, "192.168.0.9"));
        assert!(!has(&host, "192.168.0.10"));

        // A bare v6 address is a single host (Istio appended /32, making it a /32 network).
        let v6host = ips(&["2001:db8::1"]);
        assert!(!has(&v6host, "2001:db8::2"));

        let mapped = ips(&["::ffff:10.0.0.0/104"]);
        assert!(has(&mapped, "10.200.0.1"));
        assert!(!has(&mapped, "11.0.0.1"));

        // Host bits are ignored.
        let sloppy = ips(&["10.1.2.3/8"]);
        assert!(has(&sloppy, "10.255.0.0"));

        assert!(all_v4.contains(Lookup::Text("not-an-ip")).is_err());
        assert!(all_v4.contains(Lookup::Ip(v4(8, 8, 8, 8))).expect("typed"));
    }

    #[test]
    fn overlapping_and_adjacent_ranges_merge() {
        let list = IpRanges::new(vec![
            parse_cidr("10.0.0.0/8").unwrap(),
            parse_cidr("10.1.0.0/16").unwrap(),
            parse_cidr("11.0.0.0/8").unwrap(),
            parse_cidr("9.255.255.255").unwrap(),
            parse_cidr("13.0.0.0/8").unwrap(),
        ]);
        assert_eq!(list.intervals().len(), 2, "{:?}", list.intervals());
        assert!(list.contains(ip("9.255.255.255")));
        assert!(list.contains(ip("11.255.255.255")));
        assert!(!list.contains(ip("12.0.0.0")));
        assert!(list.contains(ip("13.0.0.0")));
        let full = IpRanges::new(vec![(0, u128::MAX), (5, 7)]);
        assert_eq!(full.intervals(), &[(0, u128::MAX)]);
        assert!(full.contains(ip("::")));
    }

    #[test]
    fn bad_cidrs_are_rejected() {
        for bad in [
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "banana",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "",
        ] {
            assert!(parse_cidr(bad).is_err(), "{bad}");
        }
        let err = List::build(EntryType::IpAddresses, "10.0.0.0/8\nnope", &[]).expect_err("bad");
        assert!(err.contains("nope"), "{err}");
    }

    #[test]
    fn istio_yaml_whitelist_payloads() {
        let block = "# list\nwhitelist:\n  - 10.0.0.0/8\n  - \"192.168.1.1\"\n";
        assert_eq!(
            provider_entries(EntryType::IpAddresses, block),
            vec!["10.0.0.0/8", "192.168.1.1"]
        );
        let flow = "whitelist: [10.0.0.0/8, '::1']";
        assert_eq!(
            provider_entries(EntryType::IpAddresses, flow),
            vec!["10.0.0.0/8", "::1"]
        );
        // Only IP lists read the YAML form.
        assert_eq!(
            provider_entries(EntryType::Strings, "whitelist:\n- a"),
            vec!["whitelist:", "- a"]
        );
    }

    fn arb_cidr() -> impl Strategy<Value = (IpAddr, u32)> {
        prop_oneof![
            (any::<[u8; 4]>(), 0u32..=32).prop_map(|(b, p)| (IpAddr::from(b), p)),
            (any::<[u8; 4]>(), 20u32..=32).prop_map(|(b, p)| (IpAddr::from(b), p)),
            (any::<u128>(), 0u32..=128).prop_map(|(x, p)| (u128_to_ip(x), p)),
            (any::<u128>(), 100u32..=128).prop_map(|(x, p)| (u128_to_ip(x), p)),
        ]
    }

    /// The obvious definition: one pass over the entries, masking both sides in the shared
    /// 128-bit space (IPv4 entries and queries are v4-mapped).
    fn naive(entries: &[(IpAddr, u32)], query: IpAddr) -> bool {
        let widen = |ip: IpAddr| match ip {
            IpAddr::V4(v4) => (u128::from(v4.to_ipv6_mapped()), 96),
            IpAddr::V6(v6) => (u128::from(v6), 0),
        };
        let (q, _) = widen(query);
        entries.iter().any(|(net, prefix)| {
            let (n, extra) = widen(*net);
            let bits = prefix + extra;
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            n & mask == q & mask
        })
    }

    proptest! {
        #[test]
        fn lookup_agrees_with_a_naive_scan(
            entries in proptest::collection::vec(arb_cidr(), 0..40),
            queries in proptest::collection::vec(any::<u128>(), 1..40),
            near in proptest::collection::vec((any::<prop::sample::Index>(), any::<u32>()), 1..40),
        ) {
            let text: Vec<String> = entries.iter().map(|(ip, p)| format!("{ip}/{p}")).collect();
            let list = List::build(EntryType::IpAddresses, &text.join("\n"), &[]).unwrap();
            let mut probes: Vec<IpAddr> = queries.iter().map(|x| u128_to_ip(*x)).collect();
            probes.extend(queries.iter().map(|x| IpAddr::from((*x as u32).to_be_bytes())));
            // Probes at and around the entries' own boundaries.
            if !entries.is_empty() {
                for (idx, delta) in &near {
                    let (net, prefix) = entries[idx.index(entries.len())];
                    let (start, end) = parse_cidr(&format!("{net}/{prefix}")).unwrap();
                    for x in [start, end, start.wrapping_sub(1), end.wrapping_add(1),
                              start.wrapping_add(u128::from(*delta))] {
                        probes.push(u128_to_ip(x));
                        probes.push(u128_to_ip(x).to_canonical());
                    }
                }
            }
            for q in probes {
                let got = list.contains(Lookup::Ip(q)).unwrap();
                prop_assert_eq!(got, naive(&entries, q), "query {}", q);
                let got_text = list.contains(Lookup::Text(&q.to_string())).unwrap();
                prop_assert_eq!(got_text, got);
            }
        }
    }
}
