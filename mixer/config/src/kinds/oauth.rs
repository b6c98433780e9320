//! The `oauth` token source of a `tls` connection (Istio's `istio.policy.v1beta1.OAuth`):
//! the mixer fetches its access token from a token endpoint with the OAuth 2.0
//! client-credentials grant (RFC 6749 section 4.4). Checked here: the three required fields,
//! the secret file (read once now; the client reads it again for every token request), the
//! URL, the scopes' spelling and endpoint parameters that would clash with the grant's own.

use std::collections::BTreeMap;
use std::path::PathBuf;

use mixer_remote::{OAuthClient, TokenHeader};
use serde_json::{Map, Value};

use super::Doc;
use crate::document::{check_keys, expected_string, mapping, opt_string, type_name};
use crate::error::{Diagnostics, index, join};

const OAUTH_KEYS: &[&str] = &[
    "clientId",
    "clientSecret",
    "tokenUrl",
    "scopes",
    "endpointParams",
];

/// Form fields of the token request that the mixer writes itself, and why.
const RESERVED_PARAMS: &[(&str, &str)] = &[
    ("grant_type", "the mixer asks for client_credentials"),
    ("scope", "give scopes instead"),
    (
        "client_id",
        "the client id goes in the authorization header (HTTP Basic)",
    ),
    (
        "client_secret",
        "the client secret goes in the authorization header (HTTP Basic)",
    ),
];

/// Parses the `oauth` block at `path`; `header` is where the token goes. `None` after
/// reporting any problem.
pub(crate) fn oauth(
    doc: &Doc<'_>,
    value: &Value,
    path: &str,
    header: TokenHeader,
    diags: &mut Diagnostics,
) -> Option<OAuthClient> {
    let d = &doc.raw.doc;
    let map = mapping(value, path, d, diags)?;
    let before = diags.errors.len();
    check_keys(map, OAUTH_KEYS, path, d, diags);
    let client_id = required(
        doc,
        map,
        "clientId",
        path,
        "the id the token endpoint knows the mixer by",
        diags,
    );
    let client_secret = required(
        doc,
        map,
        "clientSecret",
        path,
        "the path of the file holding the client secret",
        diags,
    );
    if let Some(file) = &client_secret {
        check_secret(doc, file, &join(path, "clientSecret"), diags);
    }
    let token_url = required(
        doc,
        map,
        "tokenUrl",
        path,
        "the token endpoint's URL",
        diags,
    );
    if let Some(url) = &token_url {
        check_url(doc, url, &join(path, "tokenUrl"), diags);
    }
    let scopes = scopes(doc, map.get("scopes"), &join(path, "scopes"), diags);
    let endpoint_params = endpoint_params(
        doc,
        map.get("endpointParams"),
        &join(path, "endpointParams"),
        diags,
    );
    if diags.errors.len() != before {
        return None;
    }
    Some(OAuthClient {
        client_id: client_id?,
        client_secret: PathBuf::from(client_secret?),
        token_url: token_url?,
        scopes,
        endpoint_params,
        header,
    })
}

/// A string field that must be there and not be blank (proto3 cannot tell an empty
/// string from an absent one, so neither means anything).
fn required(
    doc: &Doc<'_>,
    map: &Map<String, Value>,
    key: &str,
    path: &str,
    what: &str,
    diags: &mut Diagnostics,
) -> Option<String> {
    let value = opt_string(map, key, path, &doc.raw.doc, diags);
    match value {
        Some(v) if !v.trim().is_empty() => Some(v),
        Some(_) => {
            diags.error(&doc.raw.doc, join(path, key), format!("empty ({what})"));
            None
        }
        None => {
            if map.get(key).is_none_or(Value::is_null) {
                diags.error(&doc.raw.doc, join(path, key), format!("missing ({what})"));
            }
            None
        }
    }
}

/// Reads the secret once so that a missing or empty file is found at load.
fn check_secret(doc: &Doc<'_>, file: &str, path: &str, diags: &mut Diagnostics) {
    match std::fs::read(file) {
        Err(e) => diags.error(&doc.raw.doc, path, format!("cannot read {file}: {e}")),
        Ok(bytes) if String::from_utf8_lossy(&bytes).trim().is_empty() => {
            diags.error(&doc.raw.doc, path, format!("{file} is empty"));
        }
        Ok(_) => {}
    }
}

/// An `http://` or `https://` URL with a host (and no fragment, which RFC 6749 section 3.2
/// forbids in a token endpoint). Plain http to another machine is allowed, with a warning:
/// the client secret would cross the network readable.
fn check_url(doc: &Doc<'_>, url: &str, path: &str, diags: &mut Diagnostics) {
    let d = &doc.raw.doc;
    let problem = match url_host(url) {
        Err(problem) => problem,
        Ok((false, host)) if !is_loopback(host) => {
            diags.warn(
                d,
                path,
                format!("the client secret is sent to {host} unencrypted: use https://"),
            );
            return;
        }
        Ok(_) => return,
    };
    // The URL may hold a password (the userinfo this refuses): never quote it whole.
    let shown = mixer_adapter_api::secrets::redact_url(url);
    diags.error(d, path, format!("{shown:?} {problem}"));
}

/// Whether the URL is https, and its host; or what is wrong with it.
fn url_host(url: &str) -> Result<(bool, &str), &'static str> {
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("holds spaces or control characters");
    }
    let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err("is not an http:// or https:// URL");
    };
    if url.contains('#') {
        return Err("has a fragment (#...), which a token endpoint URL may not have");
    }
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(
            "carries user information (user@host): the client id and secret are sent in a header",
        );
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, after)) => (host, after.strip_prefix(':')),
            None => return Err("has an unclosed [ in its host"),
        },
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err("has no host");
    }
    if port.is_some_and(|p| p.parse::<u16>().map_or(true, |p| p == 0)) {
        return Err("has a port that is not a number from 1 to 65535");
    }
    Ok((https, host))
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `scopes`: a list of RFC 6749 section 3.3 scope tokens (printable ASCII without space,
/// `"` or `\`), joined by spaces in the request.
fn scopes(
    doc: &Doc<'_>,
    value: Option<&Value>,
    path: &str,
    diags: &mut Diagnostics,
) -> Vec<String> {
    let d = &doc.raw.doc;
    let list = match value {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Array(list)) => list,
        Some(other) => {
            diags.error(
                d,
                path,
                format!("expected a list of scopes, found {}", type_name(other)),
            );
            return Vec::new();
        }
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        match item {
            Value::String(s)
                if !s.is_empty()
                    && s.bytes()
                        .all(|b| (0x21..0x7f).contains(&b) && b != b'"' && b != b'\\') =>
            {
                out.push(s.clone());
            }
            Value::String(s) => diags.error(
                d,
                index(path, i),
                format!(
                    "{s:?} is not a scope (printable ASCII without spaces, quotes or backslashes)"
                ),
            ),
            other => diags.error(d, index(path, i), expected_string(other)),
        }
    }
    out
}

/// `endpointParams`: string values, none of them a field the grant sets itself.
fn endpoint_params(
    doc: &Doc<'_>,
    value: Option<&Value>,
    path: &str,
    diags: &mut Diagnostics,
) -> BTreeMap<String, String> {
    let d = &doc.raw.doc;
    let mut out = BTreeMap::new();
    let map = match value {
        None | Some(Value::Null) => return out,
        Some(v) => match mapping(v, path, d, diags) {
            Some(m) => m,
            None => return out,
        },
    };
    for (key, value) in map {
        if let Some((_, why)) = RESERVED_PARAMS.iter().find(|(k, _)| k == key) {
            diags.error(d, join(path, key), format!("set by the mixer ({why})"));
            continue;
        }
        match value {
            Value::String(s) => {
                out.insert(key.clone(), s.clone());
            }
            other => diags.error(d, join(path, key), expected_string(other)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::url_host;

    #[test]
    fn token_urls() {
        assert_eq!(
            url_host("https://idp.example/oauth/token"),
            Ok((true, "idp.example"))
        );
        assert_eq!(
            url_host("http://127.0.0.1:8080?x=1"),
            Ok((false, "127.0.0.1"))
        );
        assert_eq!(url_host("https://[::1]:9443/t"), Ok((true, "::1")));
        for bad in [
            "idp.example/token",
            "ftp://idp.example",
            "https://",
            "https://:80/",
            "https://idp:0/",
            "https://idp:http/",
            "https://a@idp/",
            "https://idp/t#frag",
            "https://idp/t x",
            "https://[::1/t",
        ] {
            assert!(url_host(bad).is_err(), "{bad}");
        }
    }
}
