//! A remote handler's `connection.authentication` (Istio's `istio.policy.v1beta1.Authentication`):
//! `tls` (the adapter proves itself; the mixer may send a token, read from a file or fetched
//! from an OAuth token endpoint, see [`super::oauth`]) or `mutual` (both sides present
//! certificates). Every file is read here, so a missing file or a
//! block that is not PEM is a config error with its field path, not a failure at the first
//! call. Paths are used as written: relative ones are relative to the mixer's working
//! directory, as in Istio.

use std::path::PathBuf;
use std::sync::Arc;

use mixer_remote::{
    AccessToken, Authentication, MutualTls, PemFile, Tls, TokenHeader, TokenSource,
};
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Map, Value};

use super::{Doc, oauth, parse_enum};
use crate::document::{check_keys, mapping, opt_string};
use crate::error::{Diagnostics, join};

const TLS_KEYS: &[&str] = &[
    "caCertificates",
    "tokenPath",
    "oauth",
    "authHeader",
    "customHeader",
    "serverName",
];
const MUTUAL_KEYS: &[&str] = &[
    "privateKey",
    "clientCertificate",
    "caCertificates",
    "serverName",
];

/// Parses and checks the block at `path`; `None` after reporting any problem.
pub(crate) fn authentication(
    doc: &Doc<'_>,
    value: &Value,
    path: &str,
    diags: &mut Diagnostics,
) -> Option<Authentication> {
    let d = &doc.raw.doc;
    let map = mapping(value, path, d, diags)?;
    check_keys(map, &["tls", "mutual"], path, d, diags);
    let tls = map.get("tls").filter(|v| !v.is_null());
    let mutual = map.get("mutual").filter(|v| !v.is_null());
    match (tls, mutual) {
        (Some(_), Some(_)) => {
            diags.error(d, path, "give either tls or mutual, not both");
            None
        }
        (None, None) => {
            if !map.keys().any(|k| k != "tls" && k != "mutual") {
                diags.error(d, path, "expected tls or mutual");
            }
            None
        }
        (Some(t), None) => tls_block(doc, t, &join(path, "tls"), diags).map(Authentication::Tls),
        (None, Some(m)) => {
            mutual_block(doc, m, &join(path, "mutual"), diags).map(Authentication::Mutual)
        }
    }
}

fn tls_block(doc: &Doc<'_>, value: &Value, path: &str, diags: &mut Diagnostics) -> Option<Tls> {
    let d = &doc.raw.doc;
    let map = mapping(value, path, d, diags)?;
    let before = diags.errors.len();
    check_keys(map, TLS_KEYS, path, d, diags);
    let ca_certificates = optional_certificates(doc, map, "caCertificates", path, diags);
    let server_name = server_name(doc, map, path, diags);
    let header = token_header(doc, map, path, diags);
    let token_path = opt_string(map, "tokenPath", path, d, diags);
    let oauth_block = map.get("oauth").filter(|v| !v.is_null());
    let token = match (token_path, oauth_block, header) {
        (Some(_), Some(_), _) => {
            diags.error(d, path, "give either tokenPath or oauth, not both");
            None
        }
        // Istio 1.4 ignored authHeader and customHeader with oauth and always sent
        // `authorization: Bearer <token>`: that is the default; given ones are honoured.
        (None, Some(o), header) => oauth::oauth(
            doc,
            o,
            &join(path, "oauth"),
            header.unwrap_or(TokenHeader::Bearer),
            diags,
        )
        .map(TokenSource::OAuth),
        (Some(p), None, Some(header)) => {
            check_token(doc, &p, &join(path, "tokenPath"), diags);
            Some(TokenSource::File(AccessToken {
                path: PathBuf::from(p),
                header,
            }))
        }
        (Some(_), None, None) => {
            if !map.contains_key("authHeader") && !map.contains_key("customHeader") {
                diags.error(
                    d,
                    path,
                    "tokenPath needs authHeader (PLAIN or BEARER) or customHeader to say how the token is sent",
                );
            }
            None
        }
        (None, None, Some(_)) => {
            diags.error(
                d,
                join(path, "tokenPath"),
                "missing: authHeader and customHeader say how to send a token, and tokenPath or oauth where it comes from",
            );
            None
        }
        (None, None, None) => None,
    };
    (diags.errors.len() == before).then_some(Tls {
        ca_certificates,
        token,
        server_name,
    })
}

fn mutual_block(
    doc: &Doc<'_>,
    value: &Value,
    path: &str,
    diags: &mut Diagnostics,
) -> Option<MutualTls> {
    let d = &doc.raw.doc;
    let map = mapping(value, path, d, diags)?;
    let before = diags.errors.len();
    check_keys(map, MUTUAL_KEYS, path, d, diags);
    let client_certificate = optional_certificates(doc, map, "clientCertificate", path, diags);
    let private_key = private_key(doc, map, path, diags);
    for (key, present) in [
        ("clientCertificate", client_certificate.is_some()),
        ("privateKey", private_key.is_some()),
    ] {
        // Istio fell back to Mixer's own certificate; this mixer has none to fall back to.
        if !present && map.get(key).is_none_or(Value::is_null) {
            diags.error(
                d,
                join(path, key),
                "missing (mutual TLS needs the mixer's certificate and key)",
            );
        }
    }
    let ca_certificates = optional_certificates(doc, map, "caCertificates", path, diags);
    let server_name = server_name(doc, map, path, diags);
    if diags.errors.len() != before {
        return None;
    }
    Some(MutualTls {
        client_certificate: client_certificate?,
        private_key: private_key?,
        ca_certificates,
        server_name,
    })
}

/// `authHeader: PLAIN | BEARER` or `customHeader: NAME`, at most one.
fn token_header(
    doc: &Doc<'_>,
    map: &Map<String, Value>,
    path: &str,
    diags: &mut Diagnostics,
) -> Option<TokenHeader> {
    let d = &doc.raw.doc;
    let auth = parse_enum(
        doc,
        map.get("authHeader"),
        &join(path, "authHeader"),
        &[("PLAIN", false), ("BEARER", true)],
        diags,
    )
    .map(|bearer| {
        if bearer {
            TokenHeader::Bearer
        } else {
            TokenHeader::Plain
        }
    });
    let custom = opt_string(map, "customHeader", path, d, diags);
    match (auth, custom) {
        (Some(_), Some(_)) => {
            diags.error(
                d,
                join(path, "customHeader"),
                "give either authHeader or customHeader, not both",
            );
            None
        }
        (Some(h), None) => Some(h),
        (None, Some(name)) => {
            let name = name.to_ascii_lowercase();
            match header_name_problem(&name) {
                Some(problem) => {
                    diags.error(d, join(path, "customHeader"), problem);
                    None
                }
                None => Some(TokenHeader::Custom(name)),
            }
        }
        (None, None) => None,
    }
}

/// Why `name` cannot carry a token in gRPC metadata, if it cannot.
fn header_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("empty header name".into());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Some(format!(
            "{name:?} is not a header name ({c:?} is not allowed)"
        ));
    }
    if name.ends_with("-bin") {
        return Some(format!(
            "{name:?} is a binary header (-bin); the token is text"
        ));
    }
    if name.starts_with("grpc-") || matches!(name, "content-type" | "te" | "user-agent") {
        return Some(format!("{name:?} is reserved by gRPC"));
    }
    None
}

/// Reads the token once to catch a missing or unusable file at load; the client reads it
/// again (and whenever it changes).
fn check_token(doc: &Doc<'_>, file: &str, path: &str, diags: &mut Diagnostics) {
    let d = &doc.raw.doc;
    match std::fs::read(file) {
        Err(e) => diags.error(d, path, format!("cannot read {file}: {e}")),
        Ok(bytes) => {
            let token = String::from_utf8_lossy(&bytes);
            let token = token.trim();
            if token.is_empty() {
                diags.error(d, path, format!("{file} is empty"));
            } else if token.bytes().any(|b| !(0x20..0x7f).contains(&b)) {
                diags.error(
                    d,
                    path,
                    format!("{file} holds characters a header cannot carry (only printable ASCII)"),
                );
            }
        }
    }
}

fn server_name(
    doc: &Doc<'_>,
    map: &Map<String, Value>,
    path: &str,
    diags: &mut Diagnostics,
) -> Option<String> {
    let name = opt_string(map, "serverName", path, &doc.raw.doc, diags)?;
    if ServerName::try_from(name.as_str()).is_err() {
        diags.error(
            &doc.raw.doc,
            join(path, "serverName"),
            format!("{name:?} is neither a DNS name nor an IP address"),
        );
        return None;
    }
    Some(name)
}

/// Reads the file named by `map[key]`; reports unreadable files.
fn read_file(
    doc: &Doc<'_>,
    map: &Map<String, Value>,
    key: &str,
    path: &str,
    diags: &mut Diagnostics,
) -> Option<(String, Vec<u8>)> {
    let file = opt_string(map, key, path, &doc.raw.doc, diags)?;
    if file.trim().is_empty() {
        diags.error(&doc.raw.doc, join(path, key), "empty path");
        return None;
    }
    match std::fs::read(&file) {
        Ok(bytes) => Some((file, bytes)),
        Err(e) => {
            diags.error(
                &doc.raw.doc,
                join(path, key),
                format!("cannot read {file}: {e}"),
            );
            None
        }
    }
}

/// A file of one or more PEM `CERTIFICATE` blocks.
fn optional_certificates(
    doc: &Doc<'_>,
    map: &Map<String, Value>,
    key: &str,
    path: &str,
    diags: &mut Diagnostics,
) -> Option<PemFile> {
    let (file, bytes) = read_file(doc, map, key, path, diags)?;
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        match cert {
            Ok(_) => count += 1,
            Err(e) => {
                diags.error(
                    &doc.raw.doc,
                    join(path, key),
                    format!("{file} is not valid PEM: {}", pem_problem(&e)),
                );
                return None;
            }
        }
    }
    if count == 0 {
        diags.error(
            &doc.raw.doc,
            join(path, key),
            format!("{file} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"),
        );
        return None;
    }
    Some(pem_file(file, bytes))
}

/// A file holding one PEM private key (PKCS#8, PKCS#1 RSA or SEC1 EC).
fn private_key(
    doc: &Doc<'_>,
    map: &Map<String, Value>,
    path: &str,
    diags: &mut Diagnostics,
) -> Option<PemFile> {
    let (file, bytes) = read_file(doc, map, "privateKey", path, diags)?;
    match PrivateKeyDer::from_pem_slice(&bytes) {
        Ok(_) => Some(pem_file(file, bytes)),
        Err(pem::Error::NoItemsFound) => {
            diags.error(
                &doc.raw.doc,
                join(path, "privateKey"),
                format!("{file} holds no PEM private key (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)"),
            );
            None
        }
        Err(e) => {
            diags.error(
                &doc.raw.doc,
                join(path, "privateKey"),
                format!("{file} is not valid PEM: {}", pem_problem(&e)),
            );
            None
        }
    }
}

fn pem_file(file: String, bytes: Vec<u8>) -> PemFile {
    PemFile {
        path: PathBuf::from(file),
        pem: Arc::from(bytes),
    }
}

/// The PEM error in words, without byte dumps of the offending line.
fn pem_problem(e: &pem::Error) -> String {
    match e {
        pem::Error::MissingSectionEnd { .. } => "a block has no END line".into(),
        pem::Error::IllegalSectionStart { .. } => "a BEGIN line is malformed".into(),
        pem::Error::Base64Decode(m) => format!("bad base64 ({m})"),
        other => other.to_string(),
    }
}
