//! The descriptor tree of a `ratelimitconfig`: entries checked level by level, and the
//! limited paths (leaves) with the exclusions envoyproxy/ratelimit's matching implies.

use serde_json::{Map, Value};

use super::super::Doc;
use crate::document::{as_map, check_keys, opt_string, type_name};
use crate::error::{Diagnostics, did_you_mean, index, join};

pub(super) const DESCRIPTOR_KEYS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "shadow_mode",
    "detailed_metric",
    "descriptors",
];
pub(super) const RATE_LIMIT_KEYS: &[&str] =
    &["unit", "requests_per_unit", "name", "unlimited", "replaces"];
pub(super) const UNITS: [(&str, &str); 5] = [
    ("second", "1s"),
    ("minute", "60s"),
    ("hour", "3600s"),
    ("day", "86400s"),
    ("week", "604800s"),
];

/// How one level of a path matches the request descriptor's entry.
#[derive(Clone, Debug)]
pub(super) enum Matcher {
    Any,
    Exact(String),
    Prefix(String),
}

#[derive(Clone, Debug)]
pub(super) struct Level {
    pub(super) key: String,
    pub(super) matcher: Matcher,
    /// Values of same-key siblings this level must not take (they have entries of their own).
    pub(super) not_exact: Vec<String>,
    /// Prefixes of same-key wildcard siblings that take precedence.
    pub(super) not_prefix: Vec<String>,
}

pub(super) struct Limit {
    pub(super) requests_per_unit: u32,
    pub(super) window: &'static str,
    pub(super) shadow: bool,
}

pub(super) struct Leaf {
    pub(super) levels: Vec<Level>,
    pub(super) limit: Limit,
}

/// Walks one descriptor list: checks each entry, then recurses into nested lists.
pub(super) fn walk(
    doc: &Doc<'_>,
    list: &[Value],
    path: &str,
    prefix: &[Level],
    leaves: &mut Vec<Leaf>,
    diags: &mut Diagnostics,
) {
    let raw = doc.raw;
    // First the keys and values of this level, for duplicates and exclusions.
    let mut parsed: Vec<(usize, String, Matcher, Map<String, Value>)> = Vec::new();
    let mut seen: Vec<(String, Option<String>, String)> = Vec::new();
    for (i, item) in list.iter().enumerate() {
        let here = index(path, i);
        let Some(map) = as_map(item, &here, &raw.doc, diags) else {
            continue;
        };
        let map = map.into_owned();
        check_keys(&map, DESCRIPTOR_KEYS, &here, &raw.doc, diags);
        let key = match map.get("key") {
            Some(Value::String(k)) if !k.is_empty() => k.clone(),
            None | Some(Value::Null) | Some(Value::String(_)) => {
                diags.error(&raw.doc, join(&here, "key"), "missing");
                continue;
            }
            Some(other) => {
                diags.error(
                    &raw.doc,
                    join(&here, "key"),
                    format!("expected a string, found {}", type_name(other)),
                );
                continue;
            }
        };
        let value = match map.get("value") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            // YAML reads `value: 500` as a number; envoyproxy/ratelimit takes it as text.
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(Value::Bool(b)) => Some(b.to_string()),
            Some(other) => {
                diags.error(
                    &raw.doc,
                    join(&here, "value"),
                    format!("expected a string, found {}", type_name(other)),
                );
                continue;
            }
        };
        if let Some((_, _, first)) = seen.iter().find(|(k, v, _)| *k == key && *v == value) {
            let shown = match &value {
                Some(v) => format!("key {key:?} with value {v:?}"),
                None => format!("key {key:?} without a value"),
            };
            diags.error(
                &raw.doc,
                here.clone(),
                format!("duplicate descriptor: {shown} is already at {first}"),
            );
            continue;
        }
        seen.push((key.clone(), value.clone(), here));
        let matcher = match value {
            None => Matcher::Any,
            Some(v) => match v.strip_suffix('*') {
                Some(p) => Matcher::Prefix(p.to_string()),
                None => Matcher::Exact(v),
            },
        };
        parsed.push((i, key, matcher, map));
    }

    for (n, (i, key, matcher, map)) in parsed.iter().enumerate() {
        let here = index(path, *i);
        let same_key = || parsed.iter().filter(|(_, k, _, _)| k == key);
        let exact_siblings: Vec<String> = same_key()
            .filter_map(|(_, _, m, _)| match m {
                Matcher::Exact(v) => Some(v.clone()),
                _ => None,
            })
            .collect();
        let (not_exact, not_prefix) = match matcher {
            Matcher::Exact(_) => (Vec::new(), Vec::new()),
            Matcher::Prefix(_) => {
                let earlier = parsed[..n]
                    .iter()
                    .filter(|(_, k, _, _)| k == key)
                    .filter_map(|(_, _, m, _)| match m {
                        Matcher::Prefix(p) => Some(p.clone()),
                        _ => None,
                    })
                    .collect();
                (exact_siblings, earlier)
            }
            Matcher::Any => {
                let prefixes = same_key()
                    .filter_map(|(_, _, m, _)| match m {
                        Matcher::Prefix(p) => Some(p.clone()),
                        _ => None,
                    })
                    .collect();
                (exact_siblings, prefixes)
            }
        };
        let mut levels = prefix.to_vec();
        levels.push(Level {
            key: key.clone(),
            matcher: matcher.clone(),
            not_exact,
            not_prefix,
        });
        let shadow = flag(doc, map, "shadow_mode", &here, diags);
        flag(doc, map, "detailed_metric", &here, diags);
        if let Some(rl) = map.get("rate_limit").filter(|v| !v.is_null())
            && let Some(limit) = rate_limit(doc, rl, &join(&here, "rate_limit"), shadow, diags)
        {
            leaves.push(Leaf {
                levels: levels.clone(),
                limit,
            });
        }
        let nested = join(&here, "descriptors");
        match map.get("descriptors") {
            None | Some(Value::Null) => {}
            Some(Value::Array(list)) => walk(doc, list, &nested, &levels, leaves, diags),
            Some(other) => diags.error(
                &raw.doc,
                nested,
                format!("expected a list, found {}", type_name(other)),
            ),
        }
    }
}

/// An optional boolean field (false when absent).
pub(super) fn flag(
    doc: &Doc<'_>,
    map: &Map<String, Value>,
    key: &str,
    path: &str,
    diags: &mut Diagnostics,
) -> bool {
    match map.get(key) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            diags.error(
                &doc.raw.doc,
                join(path, key),
                format!("expected true or false, found {}", type_name(other)),
            );
            false
        }
    }
}

/// A `rate_limit` block; `None` for an unlimited one or one with errors (reported).
pub(super) fn rate_limit(
    doc: &Doc<'_>,
    value: &Value,
    path: &str,
    shadow: bool,
    diags: &mut Diagnostics,
) -> Option<Limit> {
    let raw = doc.raw;
    let map = as_map(value, path, &raw.doc, diags)?;
    check_keys(&map, RATE_LIMIT_KEYS, path, &raw.doc, diags);
    opt_string(&map, "name", path, &raw.doc, diags);
    if map.get("replaces").is_some_and(|v| !v.is_null()) {
        diags.error(
            &raw.doc,
            join(path, "replaces"),
            "replaces is not supported",
        );
        return None;
    }
    let unlimited = flag(doc, &map, "unlimited", path, diags);
    let unit = map.get("unit").filter(|v| !v.is_null());
    if unlimited {
        if unit.is_some() || map.get("requests_per_unit").is_some_and(|v| !v.is_null()) {
            diags.error(
                &raw.doc,
                path,
                "an unlimited rate_limit takes no unit or requests_per_unit",
            );
        }
        return None;
    }
    let window = match unit {
        None => {
            diags.error(&raw.doc, join(path, "unit"), "missing");
            None
        }
        Some(Value::String(u)) => {
            let lower = u.to_ascii_lowercase();
            match UNITS.iter().find(|(n, _)| *n == lower) {
                Some((_, w)) => Some(*w),
                None => {
                    let hint = if lower == "month" || lower == "year" {
                        " (month and year have no fixed length and are not supported)".to_string()
                    } else {
                        did_you_mean(&lower, UNITS.iter().map(|(n, _)| *n))
                    };
                    diags.error(
                        &raw.doc,
                        join(path, "unit"),
                        format!(
                            "unknown unit {u:?}{hint}; expected second, minute, hour, day or week"
                        ),
                    );
                    None
                }
            }
        }
        Some(other) => {
            diags.error(
                &raw.doc,
                join(path, "unit"),
                format!("expected a string, found {}", type_name(other)),
            );
            None
        }
    };
    let here = join(path, "requests_per_unit");
    let requests = match map.get("requests_per_unit") {
        None | Some(Value::Null) => {
            diags.error(&raw.doc, here, "missing");
            None
        }
        Some(Value::Number(n)) => match n.as_i64() {
            Some(v) if v < 0 => {
                diags.error(&raw.doc, here, format!("{v} is negative"));
                None
            }
            Some(v) => match u32::try_from(v) {
                Ok(v) => Some(v),
                Err(_) => {
                    diags.error(&raw.doc, here, format!("{v} is more than {}", u32::MAX));
                    None
                }
            },
            None => {
                diags.error(&raw.doc, here, format!("{n} is not a whole number"));
                None
            }
        },
        Some(other) => {
            diags.error(
                &raw.doc,
                here,
                format!("expected a whole number, found {}", type_name(other)),
            );
            None
        }
    };
    Some(Limit {
        requests_per_unit: requests?,
        window: window?,
        shadow,
    })
}
