//! The descriptor tree of a `ratelimitconfig`: entries checked level by level, and the
//! limited paths (leaves) with the exclusions envoyproxy/ratelimit's matching implies.

use serde_json::{Map, Value};

use super::super::Doc;
use crate::document::{as_map, check_keys, opt_string, type_name};
use crate::error::{Diagnostics, did_you_mean, index, join};

/// Every descriptor key envoyproxy/ratelimit reads (src/config/config_impl.go, `validKeys`).
pub(super) const DESCRIPTOR_KEYS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "shadow_mode",
    "quota_mode",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
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
    /// A value with `*`s, split at them: each `*` matches any run of characters
    /// (`["/api/", ""]` for `/api/*`).
    Wildcard(Vec<String>),
}

impl Matcher {
    fn of(value: Option<String>) -> Matcher {
        match value {
            None => Matcher::Any,
            Some(v) if v.contains('*') => {
                Matcher::Wildcard(v.split('*').map(str::to_string).collect())
            }
            Some(v) => Matcher::Exact(v),
        }
    }
}

#[derive(Clone, Debug)]
pub(super) struct Level {
    pub(super) key: String,
    pub(super) matcher: Matcher,
    /// Values of same-key siblings this level must not take (they have entries of their own).
    pub(super) not_exact: Vec<String>,
    /// Patterns (split at `*`) of same-key wildcard siblings that take precedence.
    pub(super) not_wildcard: Vec<Vec<String>>,
    /// `share_threshold`: every value the wildcard matches counts on one counter, so the
    /// dimension is the pattern, not the value.
    pub(super) shared: Option<String>,
}

pub(super) struct Limit {
    /// `(requests_per_unit, window)`; `None` for an unlimited one.
    pub(super) counted: Option<(u32, &'static str)>,
    pub(super) shadow: bool,
    pub(super) detailed_metric: bool,
    pub(super) quota_mode: bool,
    pub(super) name: Option<String>,
    pub(super) replaces: Vec<String>,
}

pub(super) struct Leaf {
    pub(super) levels: Vec<Level>,
    pub(super) limit: Limit,
}

/// One entry of a descriptor list once its key and value are read: its index, key, matcher,
/// shared wildcard pattern (`share_threshold`) and the entry itself.
type Parsed = (usize, String, Matcher, Option<String>, Map<String, Value>);

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
    #[allow(clippy::type_complexity)]
    let mut parsed: Vec<Parsed> = Vec::new();
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
        seen.push((key.clone(), value.clone(), here.clone()));
        let shared = flag(doc, &map, "share_threshold", &here, diags);
        let shared = match (&value, shared) {
            (Some(v), true) if v.contains('*') => Some(v.clone()),
            (_, true) => {
                let full = match &value {
                    Some(v) => format!("{key}_{v}"),
                    None => key.clone(),
                };
                diags.error(
                    &raw.doc,
                    join(&here, "share_threshold"),
                    format!(
                        "share_threshold can only be used with wildcard values (containing '*'), but found key '{full}'"
                    ),
                );
                continue;
            }
            _ => None,
        };
        let matcher = Matcher::of(value);
        parsed.push((i, key, matcher, shared, map));
    }

    for (n, (i, key, matcher, shared, map)) in parsed.iter().enumerate() {
        let here = index(path, *i);
        let same_key = || parsed.iter().filter(|(_, k, ..)| k == key);
        let exact_siblings: Vec<String> = same_key()
            .filter_map(|(_, _, m, ..)| match m {
                Matcher::Exact(v) => Some(v.clone()),
                _ => None,
            })
            .collect();
        let wildcards = |among: &[Parsed]| {
            among
                .iter()
                .filter(|(_, k, ..)| k == key)
                .filter_map(|(_, _, m, ..)| match m {
                    Matcher::Wildcard(parts) => Some(parts.clone()),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        // envoyproxy/ratelimit looks a value up exactly, then tries the wildcards in order,
        // then the key-only entry.
        let (not_exact, not_wildcard) = match matcher {
            Matcher::Exact(_) => (Vec::new(), Vec::new()),
            Matcher::Wildcard(_) => (exact_siblings, wildcards(&parsed[..n])),
            Matcher::Any => (exact_siblings, wildcards(&parsed)),
        };
        let mut levels = prefix.to_vec();
        levels.push(Level {
            key: key.clone(),
            matcher: matcher.clone(),
            not_exact,
            not_wildcard,
            shared: shared.clone(),
        });
        let shadow = flag(doc, map, "shadow_mode", &here, diags);
        let quota_mode = flag(doc, map, "quota_mode", &here, diags);
        // Only the names of envoyproxy/ratelimit's statistics depend on these.
        let detailed_metric = flag(doc, map, "detailed_metric", &here, diags);
        flag(doc, map, "value_to_metric", &here, diags);
        // Only sent back as response metadata, which envoyproxy/ratelimit does not do unless
        // RESPONSE_DYNAMIC_METADATA is set; the mixer never does.
        match map.get("metadata") {
            None | Some(Value::Null | Value::Object(_)) => {}
            Some(other) => diags.error(
                &raw.doc,
                join(&here, "metadata"),
                format!("expected a mapping, found {}", type_name(other)),
            ),
        }
        if let Some(rl) = map.get("rate_limit").filter(|v| !v.is_null())
            && let Some(mut limit) = rate_limit(doc, rl, &join(&here, "rate_limit"), shadow, diags)
        {
            limit.quota_mode = quota_mode;
            limit.detailed_metric = detailed_metric;
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
    let name = opt_string(&map, "name", path, &raw.doc, diags).filter(|n| !n.is_empty());
    let replaces = replaces(doc, &map, path, name.as_deref(), diags);
    let unlimited = flag(doc, &map, "unlimited", path, diags);
    let unit = map.get("unit").filter(|v| !v.is_null());
    if unlimited {
        // envoyproxy/ratelimit refuses a unit beside `unlimited` and ignores a count.
        if unit.is_some() {
            diags.error(
                &raw.doc,
                join(path, "unit"),
                "should not specify rate limit unit when unlimited",
            );
            return None;
        }
        return Some(Limit {
            counted: None,
            shadow,
            detailed_metric: false,
            quota_mode: false,
            name,
            replaces: replaces?,
        });
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
        counted: Some((requests?, window?)),
        shadow,
        detailed_metric: false,
        quota_mode: false,
        name,
        replaces: replaces?,
    })
}

/// `replaces: [{name: ...}]`: the names, each non-empty and not the limit's own.
fn replaces(
    doc: &Doc<'_>,
    map: &Map<String, Value>,
    path: &str,
    own: Option<&str>,
    diags: &mut Diagnostics,
) -> Option<Vec<String>> {
    let raw = doc.raw;
    let here = join(path, "replaces");
    let list = match map.get("replaces") {
        None | Some(Value::Null) => return Some(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(other) => {
            diags.error(
                &raw.doc,
                here,
                format!("expected a list, found {}", type_name(other)),
            );
            return None;
        }
    };
    let before = diags.errors.len();
    let mut names = Vec::new();
    for (i, item) in list.iter().enumerate() {
        let at = index(&here, i);
        let Some(entry) = as_map(item, &at, &raw.doc, diags) else {
            continue;
        };
        check_keys(&entry, &["name"], &at, &raw.doc, diags);
        // The messages are envoyproxy/ratelimit's own.
        match opt_string(&entry, "name", &at, &raw.doc, diags) {
            Some(n) if !n.is_empty() => {
                if Some(n.as_str()) == own {
                    diags.error(
                        &raw.doc,
                        join(&at, "name"),
                        "replaces should not contain name of same descriptor",
                    );
                }
                names.push(n);
            }
            _ => diags.error(
                &raw.doc,
                join(&at, "name"),
                "should not have an empty replaces entry",
            ),
        }
    }
    (diags.errors.len() == before).then_some(names)
}
