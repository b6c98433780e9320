//! Secrets in handler params: which values are secret, how they are hidden wherever config is
//! shown (`/config_dump`), and how they are kept out of error messages and log lines.
//!
//! Three rules decide what is secret, for every handler, built in or out of process:
//!
//! 1. a param the adapter declares secret ([`Adapter::secret_params`](crate::Adapter::secret_params));
//! 2. the value of any param whose key is a secret name ([`is_secret_key`]): `password`,
//!    `secret`, `token`, `apiKey`, `authorization`, `cookie`... (so a header map's
//!    `authorization` entry and an out-of-process adapter's `password` param are hidden without
//!    any declaration);
//! 3. the password of any URL (`redis://:PASSWORD@host`), in any string param.
//!
//! A hidden value reads [`REDACTED`]; a URL keeps everything but its password.
//!
//! ```
//! use mixer_adapter_api::secrets::{Redactor, SecretParam};
//! use serde_json::json;
//!
//! let params = json!({
//!     "redisServerUrl": "redis://:hunter2@redis:6379",
//!     "headers": {"authorization": "Bearer abc", "x-tenant": "blue"},
//!     "dsn": "host=db key=k1",
//! });
//! let redactor = Redactor::new(&params, &[SecretParam::value("dsn")]);
//! assert_eq!(redactor.params(), json!({
//!     "redisServerUrl": "redis://:***@redis:6379",
//!     "headers": {"authorization": "***", "x-tenant": "blue"},
//!     "dsn": "***",
//! }));
//! assert_eq!(
//!     redactor.scrub("cannot parse \"redis://:hunter2@redis:6379\" (password hunter2)"),
//!     "cannot parse \"redis://:***@redis:6379\" (password ***)",
//! );
//! ```

use serde_json::Value;

impl std::fmt::Debug for Redactor {
    // A debug print of a config must not show what this hides.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("params", &self.redacted)
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

/// What a hidden value reads.
pub const REDACTED: &str = "***";

/// Key names whose values are secret, compared after [`normalize_key`] (lower case, without
/// `-`, `_` and `.`). Header names of credentials are among them (`authorization`,
/// `proxy-authorization`, `cookie`, `set-cookie`, `x-api-key`, `api-key`, `x-auth-token`...).
pub const SECRET_KEYS: &[&str] = &[
    "password",
    "passwd",
    "pass",
    "secret",
    "token",
    "apikey",
    "authorization",
    "proxyauthorization",
    "cookie",
    "setcookie",
    "credential",
    "credentials",
    "privatekey",
    "clientsecret",
    "accesskey",
    "secretkey",
    "sessionkey",
    "signature",
    "dsn",
];

/// Endings of key names whose values are secret (`redisPassword`, `x-auth-token`,
/// `x-goog-api-key`, `clientSecret`, `x-amz-security-token`, `private-token`), after
/// [`normalize_key`].
pub const SECRET_KEY_SUFFIXES: &[&str] = &[
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "credentials",
    "privatekey",
    "secretkey",
    "accesskey",
    "authorization",
];

/// `X-Api-Key` -> `xapikey`: the form [`SECRET_KEYS`] are compared in.
pub fn normalize_key(key: &str) -> String {
    key.chars()
        .filter(|c| !matches!(c, '-' | '_' | '.' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

/// True when a param or header called `key` holds a secret. Keys naming a file or a path
/// (`passwordFile`, `tokenPath`) hold where the secret is, which is shown.
pub fn is_secret_key(key: &str) -> bool {
    let k = normalize_key(key);
    if k.ends_with("file") || k.ends_with("path") {
        return false;
    }
    SECRET_KEYS.contains(&k.as_str()) || SECRET_KEY_SUFFIXES.iter().any(|s| k.ends_with(s))
}

/// How a declared secret param is hidden.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretKind {
    /// The whole value (a string, a number; every string inside a list or map).
    Value,
    /// A URL whose password is secret; the rest (scheme, user, host, path) is shown.
    Url,
}

/// A param an adapter declares secret.
///
/// `path` is the param's field path as errors write it, dot-separated (`password`,
/// `backend.password`); `*` stands for every key of a map or every element of a list
/// (`servers.*.password`). A declared [`SecretKind::Value`] whose last segment is a name may
/// also be given as `<name>File`: the path of a file whose contents are the value (see the
/// config loader).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SecretParam {
    /// Where it is.
    pub path: &'static str,
    /// How it is hidden.
    pub kind: SecretKind,
}

impl SecretParam {
    /// A param whose whole value is secret.
    pub const fn value(path: &'static str) -> SecretParam {
        SecretParam {
            path,
            kind: SecretKind::Value,
        }
    }

    /// A URL param whose password is secret.
    pub const fn url(path: &'static str) -> SecretParam {
        SecretParam {
            path,
            kind: SecretKind::Url,
        }
    }
}

/// The secrets found in one handler's params: gives the params with them hidden, and removes
/// them from any text (an adapter's error message, a log line).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Redactor {
    redacted: Value,
    /// Every secret value, longest first (so that a secret containing another goes whole).
    secrets: Vec<String>,
}

impl Redactor {
    /// Finds the secrets of `params` by the three rules of this module.
    pub fn new(params: &serde_json::Value, declared: &[SecretParam]) -> Redactor {
        let mut secrets = Vec::new();
        let mut redacted = params.clone();
        for d in declared {
            let segments: Vec<&str> = d.path.split('.').filter(|s| !s.is_empty()).collect();
            visit_path(&mut redacted, &segments, &mut |v| match d.kind {
                SecretKind::Value => hide_all(v, &mut secrets),
                SecretKind::Url => hide_url(v, &mut secrets),
            });
        }
        walk(&mut redacted, &mut secrets);
        secrets.retain(|s| !s.is_empty() && s != REDACTED);
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        Redactor { redacted, secrets }
    }

    /// The params with every secret hidden.
    pub fn params(&self) -> Value {
        self.redacted.clone()
    }

    /// The secret values found (for tests and for callers that hand them on).
    pub fn secrets(&self) -> &[String] {
        &self.secrets
    }

    /// Shows, in place of a value of the params, the text it was written as (`written`: the
    /// params before the loader expanded them, with the same keys), wherever `shown(text)`:
    /// `${TOKEN}` rather than the token, or `***`, in a dump. Values whose written text is not
    /// chosen keep what [`Redactor::new`] made of them.
    pub fn show_as_written(&mut self, written: &Value, shown: &dyn Fn(&str) -> bool) {
        fn visit(redacted: &mut Value, written: &Value, shown: &dyn Fn(&str) -> bool) {
            match (redacted, written) {
                (Value::String(r), Value::String(w)) if shown(w) => w.clone_into(r),
                (Value::Array(r), Value::Array(w)) => {
                    for (r, w) in r.iter_mut().zip(w) {
                        visit(r, w, shown);
                    }
                }
                (Value::Object(r), Value::Object(w)) => {
                    for (k, r) in r.iter_mut() {
                        if let Some(w) = w.get(k) {
                            visit(r, w, shown);
                        }
                    }
                }
                _ => {}
            }
        }
        visit(&mut self.redacted, written, shown);
    }

    /// Adds secrets found elsewhere (the contents of a `*File`, say).
    pub fn add_secret(&mut self, secret: impl Into<String>) {
        let secret = secret.into();
        if !secret.is_empty() && !self.secrets.contains(&secret) {
            self.secrets.push(secret);
            self.secrets
                .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        }
    }

    /// Whether any secret of these params is in `text` (also inside a word, where
    /// [`Redactor::scrub`] leaves a short one): a no means scrubbing `text` changes no secret.
    pub fn may_appear_in(&self, text: &str) -> bool {
        self.secrets.iter().any(|s| text.contains(s.as_str()))
    }

    /// `text` with every secret of these params replaced by [`REDACTED`], and the password of
    /// every URL in it hidden (an adapter may quote a URL it could not parse).
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            if s.chars().count() >= SHORT_SECRET {
                if out.contains(s.as_str()) {
                    out = out.replace(s.as_str(), REDACTED);
                }
            } else {
                out = replace_whole(&out, s);
            }
        }
        redact_urls_in(&out)
    }
}

/// Secrets shorter than this are removed from text only where they stand alone (between
/// characters that are not letters or digits): a password `pw` must not turn every `pw` inside
/// a word into `***` and make the message unreadable.
const SHORT_SECRET: usize = 4;

fn replace_whole(text: &str, secret: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    while let Some(found) = text[pos..].find(secret) {
        let start = pos + found;
        let end = start + secret.len();
        let alone = !text[..start]
            .chars()
            .next_back()
            .is_some_and(char::is_alphanumeric)
            && !text[end..]
                .chars()
                .next()
                .is_some_and(char::is_alphanumeric);
        out.push_str(&text[pos..start]);
        out.push_str(if alone { REDACTED } else { secret });
        pos = end;
    }
    out.push_str(&text[pos..]);
    out
}

fn visit_path(value: &mut Value, path: &[&str], f: &mut dyn FnMut(&mut Value)) {
    let Some((first, rest)) = path.split_first() else {
        f(value);
        return;
    };
    match value {
        Value::Object(map) if *first == "*" => {
            for v in map.values_mut() {
                visit_path(v, rest, f);
            }
        }
        Value::Array(items) if *first == "*" => {
            for v in items {
                visit_path(v, rest, f);
            }
        }
        Value::Object(map) => {
            if let Some(v) = map.get_mut(*first) {
                visit_path(v, rest, f);
            }
        }
        Value::Array(items) => {
            if let Some(v) = first.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                visit_path(v, rest, f);
            }
        }
        _ => {}
    }
}

fn hide_all(value: &mut Value, secrets: &mut Vec<String>) {
    match value {
        Value::String(s) => {
            secrets.push(std::mem::take(s));
            *s = REDACTED.to_string();
        }
        Value::Number(n) => {
            secrets.push(n.to_string());
            *value = Value::from(REDACTED);
        }
        Value::Array(items) => items.iter_mut().for_each(|v| hide_all(v, secrets)),
        Value::Object(map) => map.values_mut().for_each(|v| hide_all(v, secrets)),
        Value::Null | Value::Bool(_) => {}
    }
}

fn hide_url(value: &mut Value, secrets: &mut Vec<String>) {
    let Value::String(s) = value else {
        return;
    };
    // From the end, so that each range still points at what it found.
    let mut ranges = url_query_secrets(s);
    ranges.extend(url_password(s));
    ranges.sort_unstable();
    for (start, end) in ranges.into_iter().rev() {
        let secret = s[start..end].to_string();
        if let Some(decoded) = percent_decode(&secret)
            && decoded != secret
        {
            secrets.push(decoded);
        }
        secrets.push(secret);
        s.replace_range(start..end, REDACTED);
    }
}

/// Where the values of a URL's query parameters with a secret name are in `text` (byte
/// ranges), when `text` is a URL: `https://collector/v1?api_key=TOKEN&region=eu` has
/// `TOKEN`'s range (services that take a key in the query: `api_key`, `token`, `sig`...).
pub fn url_query_secrets(text: &str) -> Vec<(usize, usize)> {
    let Some(scheme_end) = text.find("://") else {
        return Vec::new();
    };
    let Some(query) = text[scheme_end..].find('?').map(|q| scheme_end + q + 1) else {
        return Vec::new();
    };
    let end = text[query..].find('#').map_or(text.len(), |f| query + f);
    let mut found = Vec::new();
    let mut at = query;
    for pair in text[query..end].split(['&', ';']) {
        if let Some((key, value)) = pair.split_once('=') {
            let decoded_key = percent_decode(key).unwrap_or_else(|| key.to_string());
            if !value.is_empty()
                && value != REDACTED
                && (is_secret_key(&decoded_key) || normalize_key(&decoded_key) == "sig")
            {
                let start = at + key.len() + 1;
                found.push((start, start + value.len()));
            }
        }
        at += pair.len() + 1;
    }
    found
}

fn walk(value: &mut Value, secrets: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if is_secret_key(k) {
                    hide_all(v, secrets);
                } else {
                    walk(v, secrets);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| walk(v, secrets)),
        Value::String(_) => hide_url(value, secrets),
        _ => {}
    }
}

/// Where the password of a URL is in `text` (byte range), when `text` is one: the userinfo's
/// part after its first `:`, up to the last `@`. Works on text no URL parser accepts
/// (`redis://:pa/ss word@host`), which is what a mistyped param holds; a query holding an `@`
/// hides more than the password, never less.
pub fn url_password(text: &str) -> Option<(usize, usize)> {
    let scheme_end = text.find("://")?;
    let scheme = &text[..scheme_end];
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return None;
    }
    password_after(text, scheme_end + 3, false)
}

/// `in_text`: the URL is part of a longer text, so it ends at whitespace or a quote.
fn password_after(text: &str, start: usize, in_text: bool) -> Option<(usize, usize)> {
    let rest = &text[start..];
    let token_end = if in_text {
        rest.find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>'))
            .unwrap_or(rest.len())
    } else {
        rest.len()
    };
    let token = &rest[..token_end];
    let at = token.rfind('@')?;
    let colon = token[..at].find(':')?;
    (colon + 1 < at).then_some((start + colon + 1, start + at))
}

/// `text` with the password of every URL in it, and the values of its query parameters
/// with a secret name ([`url_query_secrets`]), replaced by [`REDACTED`].
pub fn redact_urls_in(text: &str) -> String {
    let text = redact_url_passwords_in(text);
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    while let Some(found) = text[pos..].find("://") {
        let start = pos + found;
        let end = text[start..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>'))
            .map_or(text.len(), |e| start + e);
        let url = &text[start..end];
        let mut cut = 0;
        out.push_str(&text[pos..start]);
        for (from, to) in url_query_secrets(url) {
            out.push_str(&url[cut..from]);
            out.push_str(REDACTED);
            cut = to;
        }
        out.push_str(&url[cut..]);
        pos = end;
    }
    out.push_str(&text[pos..]);
    out
}

fn redact_url_passwords_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    while let Some(found) = text[pos..].find("://") {
        let after = pos + found + 3;
        match password_after(text, after, true) {
            Some((start, end)) => {
                out.push_str(&text[pos..start]);
                out.push_str(REDACTED);
                pos = end;
            }
            None => {
                out.push_str(&text[pos..after]);
                pos = after;
            }
        }
    }
    out.push_str(&text[pos..]);
    out
}

/// `text` with its URL password and query keys ([`url_query_secrets`]) hidden, if it is a
/// URL with them.
pub fn redact_url(text: &str) -> String {
    let mut value = Value::from(text);
    hide_url(&mut value, &mut Vec::new());
    match value {
        Value::String(s) => s,
        _ => text.to_string(),
    }
}

fn percent_decode(text: &str) -> Option<String> {
    if !text.contains('%') {
        return None;
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_keys_and_header_names() {
        for k in [
            "password",
            "redisPassword",
            "Authorization",
            "proxy-authorization",
            "x-api-key",
            "api-key",
            "Cookie",
            "set-cookie",
            "x-auth-token",
            "clientSecret",
            "private_key",
            "x-goog-api-key",
        ] {
            assert!(is_secret_key(k), "{k}");
        }
        for k in [
            "passwordFile",
            "tokenPath",
            "x-tenant",
            "endpoint",
            "maxAmount",
            "name",
            "content-type",
        ] {
            assert!(!is_secret_key(k), "{k}");
        }
    }

    #[test]
    fn url_query_parameters_with_secret_names_are_hidden() {
        let params = json!({
            "endpoint": "https://u:pw@collector:4318/v1?region=eu&api_key=tok3n-value&x-api-key=k2#frag",
            "plain": "https://collector/v1?region=eu&page=2",
        });
        let r = Redactor::new(&params, &[SecretParam::url("endpoint")]);
        assert_eq!(
            r.params(),
            json!({
                "endpoint": "https://u:***@collector:4318/v1?region=eu&api_key=***&x-api-key=***#frag",
                "plain": "https://collector/v1?region=eu&page=2",
            })
        );
        assert_eq!(
            r.scrub("invalid endpoint \"https://collector:4318/v1?api_key=tok3n-value\""),
            "invalid endpoint \"https://collector:4318/v1?api_key=***\""
        );
        // In any text, known or not.
        assert_eq!(
            redact_urls_in("GET https://h/x?token=abc&a=1 and 'redis://:pw@h?sig=z' failed"),
            "GET https://h/x?token=***&a=1 and 'redis://:***@h?sig=***' failed"
        );
        assert_eq!(
            redact_url("https://h/x?a=1&apiKey=k"),
            "https://h/x?a=1&apiKey=***"
        );
    }

    #[test]
    fn urls_keep_all_but_the_password() {
        assert_eq!(redact_url("redis://:pw@h:1/2"), "redis://:***@h:1/2");
        assert_eq!(redact_url("redis://u:pw@h:1"), "redis://u:***@h:1");
        assert_eq!(redact_url("redis://u@h:1"), "redis://u@h:1");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        assert_eq!(redact_url("h:1"), "h:1");
        // Not a valid URL (a '/' and a space in the password): still hidden.
        assert_eq!(redact_url("redis://:pa/ss wo@h:1"), "redis://:***@h:1");
        assert_eq!(redact_url("redis://:pa/ss@h:1"), "redis://:***@h:1");
        assert_eq!(
            redact_urls_in("a http://x:y@h b \"redis://:z@q\" c://"),
            "a http://x:***@h b \"redis://:***@q\" c://"
        );
    }

    #[test]
    fn declared_params_paths_and_scrubbing() {
        let params = json!({
            "servers": [{"url": "https://a:b%40c@h", "key": 1234}],
            "plain": "redis://:pw@h",
            "nested": {"apiKey": ["k1", "k2"]},
        });
        let r = Redactor::new(
            &params,
            &[
                SecretParam::url("servers.*.url"),
                SecretParam::value("servers.*.key"),
            ],
        );
        assert_eq!(
            r.params(),
            json!({
                "servers": [{"url": "https://a:***@h", "key": "***"}],
                "plain": "redis://:***@h",
                "nested": {"apiKey": ["***", "***"]},
            })
        );
        let text = "b@c and b%40c and 1234 and pw and k2 (k2x, pwd)";
        assert_eq!(
            r.scrub(text),
            "*** and *** and *** and *** and *** (k2x, pwd)"
        );
        let mut r = r;
        r.add_secret("from-a-file");
        assert_eq!(r.scrub("x from-a-file y"), "x *** y");
        // Nothing secret: unchanged.
        let plain = json!({"status": {"code": 7, "message": "no"}});
        assert_eq!(Redactor::new(&plain, &[]).params(), plain);
    }
}
