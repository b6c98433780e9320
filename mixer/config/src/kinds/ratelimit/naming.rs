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
            Matcher::Prefix(p) => {
                name.push('-');
                name.push_str(p);
                name.push_str("_any");
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
            Matcher::Prefix(p) => parts.push(format!("{entry}.startsWith({})", quote(p))),
            Matcher::Any if level.not_exact.is_empty() && level.not_prefix.is_empty() => {
                parts.push(format!("{} in ratelimit.descriptor", quote(&level.key)));
            }
            Matcher::Any => {}
        }
        if !level.not_exact.is_empty() {
            let values: Vec<String> = level.not_exact.iter().map(|v| quote(v)).collect();
            parts.push(format!("!({entry} in [{}])", values.join(", ")));
        }
        for p in &level.not_prefix {
            parts.push(format!("!{entry}.startsWith({})", quote(p)));
        }
    }
    parts.join(" && ")
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
