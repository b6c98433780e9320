//! Names and rule matches generated for the limited paths of a `ratelimitconfig`.

use std::collections::HashSet;

use super::descriptors::{Level, Matcher};

/// `<doc>-<key>[-<value>]...`, with characters other than letters, digits, `-` and `_`
/// replaced by `_`, made unique with a number.
pub(super) fn unique_name(doc: &str, levels: &[Level], taken: &mut HashSet<String>) -> String {
    let mut name = doc.to_string();
    for level in levels {
        name.push('-');
        name.push_str(&level.key);
        match &level.matcher {
            Matcher::Any => {}
            Matcher::Exact(v) => {
                name.push('-');
                name.push_str(v);
            }
            Matcher::Wildcard(parts) => {
                name.push('-');
                name.push_str(&parts.join("_any"));
            }
        }
    }
    let base: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut name = base.clone();
    let mut n = 2;
    while !taken.insert(name.clone()) {
        name = format!("{base}-{n}");
        n += 1;
    }
    name
}

/// envoyproxy/ratelimit's statistics key of a path (`config_impl.go`, `loadDescriptors`): the
/// domain, then per level `key`, or `key_value` for an entry with a value (a wildcard's
/// pattern with its `*`s), joined with `.`.
pub(super) fn stat_key(domain: &str, levels: &[Level]) -> String {
    let mut key = domain.to_string();
    for level in levels {
        key.push('.');
        key.push_str(&level.key);
        match &level.matcher {
            Matcher::Any => {}
            Matcher::Exact(v) => {
                key.push('_');
                key.push_str(v);
            }
            Matcher::Wildcard(parts) => {
                key.push('_');
                key.push_str(&parts.join("*"));
            }
        }
    }
    key
}

/// The rule match for a path (see the module documentation).
pub(super) fn match_source(domain: &str, levels: &[Level]) -> String {
    let keys: Vec<&str> = levels.iter().map(|l| l.key.as_str()).collect();
    let mut parts = vec![
        format!("ratelimit.domain == {}", quote(domain)),
        format!("ratelimit.descriptor_keys == {}", quote(&keys.join("."))),
    ];
    for level in levels {
        let entry = format!("ratelimit.descriptor[{}]", quote(&level.key));
        match &level.matcher {
            Matcher::Exact(v) => parts.push(format!("{entry} == {}", quote(v))),
            Matcher::Wildcard(pattern) => parts.push(wildcard_test(&entry, pattern)),
            Matcher::Any if level.not_exact.is_empty() && level.not_wildcard.is_empty() => {
                parts.push(format!("{} in ratelimit.descriptor", quote(&level.key)));
            }
            Matcher::Any => {}
        }
        if !level.not_exact.is_empty() {
            let values: Vec<String> = level.not_exact.iter().map(|v| quote(v)).collect();
            parts.push(format!("!({entry} in [{}])", values.join(", ")));
        }
        for pattern in &level.not_wildcard {
            parts.push(format!("!{}", wildcard_test(&entry, pattern)));
        }
    }
    parts.join(" && ")
}

/// A test of `entry` against a value pattern split at its `*`s: `startsWith` for the common
/// trailing `*`, else an anchored regular expression (each `*` any run of characters, as
/// envoyproxy/ratelimit's `wildcardMatch`), compiled once with the config.
fn wildcard_test(entry: &str, pattern: &[String]) -> String {
    match pattern {
        [prefix, last] if last.is_empty() => format!("{entry}.startsWith({})", quote(prefix)),
        _ => {
            let literal: Vec<String> = pattern.iter().map(|p| regex::escape(p)).collect();
            let re = format!("(?s)^{}$", literal.join(".*"));
            format!("{entry}.matches({})", quote(&re))
        }
    }
}

/// A CEL string literal.
pub(super) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
