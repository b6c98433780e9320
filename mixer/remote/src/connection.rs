//! How to reach an out-of-process adapter: its address and deadline, and Istio's
//! `connection.authentication` (TLS or mutual TLS, an access token from a file or from an
//! OAuth 2.0 token endpoint), with certificate files as read when the config loaded.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::secrets::redact_url;

/// Where and how to reach a remote adapter (Istio's handler `connection`).
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteConnection {
    /// `host:port` of the adapter's gRPC service.
    pub address: String,
    /// Deadline of each call; `None` = the implementation's default.
    pub timeout: Option<Duration>,
    /// Istio's `authentication` block (TLS or mutual TLS); `None` = plaintext.
    pub authentication: Option<Authentication>,
}

/// Istio's `connection.authentication` (`istio.policy.v1beta1.Authentication`): how the
/// mixer secures its connection to the adapter. Certificate files are read when the config
/// loads, so a changed certificate makes the next reload rebuild the handler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Authentication {
    /// `tls`: the adapter proves itself with a certificate; the mixer may send a token.
    Tls(Tls),
    /// `mutual`: both sides present certificates.
    Mutual(MutualTls),
}

/// Istio's `Tls`: server-authenticated TLS, plus an optional access token in each call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tls {
    /// `caCertificates`: CAs trusted for the adapter's certificate, on top of the system's
    /// (and for an `https` OAuth token endpoint's).
    pub ca_certificates: Option<PemFile>,
    /// Where the token sent with each call comes from (Istio's `token_source`); `None`: no
    /// token.
    pub token: Option<TokenSource>,
    /// `serverName`: the name the adapter's certificate must carry (and the SNI sent);
    /// `None` = the host of `connection.address`.
    pub server_name: Option<String>,
}

/// Istio's `Mutual`: the mixer presents a client certificate too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MutualTls {
    /// `clientCertificate`: the mixer's certificate chain.
    pub client_certificate: PemFile,
    /// `privateKey`: its key.
    pub private_key: PemFile,
    /// `caCertificates`: CAs trusted for the adapter's certificate, on top of the system's.
    pub ca_certificates: Option<PemFile>,
    /// `serverName`: SNI and the name checked in the adapter's certificate.
    pub server_name: Option<String>,
}

/// Istio's `token_source`: a token read from a file, or fetched from an OAuth 2.0 token
/// endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    /// `tokenPath`.
    File(AccessToken),
    /// `oauth`: the client-credentials grant (RFC 6749 section 4.4).
    OAuth(OAuthClient),
}

impl TokenSource {
    /// Where the token goes, whatever its source.
    pub fn header(&self) -> &TokenHeader {
        match self {
            TokenSource::File(t) => &t.header,
            TokenSource::OAuth(o) => &o.header,
        }
    }
}

/// A token read from a file and sent with every call (Istio's `tokenPath` + token type).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessToken {
    /// `tokenPath`: the file holding the token. It is read by the client, not kept in the
    /// config, because tokens rotate more often than configs change.
    pub path: PathBuf,
    /// Where the token goes.
    pub header: TokenHeader,
}

/// Istio's `oauth`: the mixer asks `token_url` for an access token with its client id and
/// secret (the client-credentials grant) and sends the token with every call, asking for a
/// new one before it expires.
#[derive(Clone, PartialEq, Eq)]
pub struct OAuthClient {
    /// `clientId`: who the mixer is to the token endpoint.
    pub client_id: String,
    /// `clientSecret`: the file holding the client secret. Like `tokenPath`, it is read by
    /// the client (at each token request), not kept in the config: secrets rotate.
    pub client_secret: PathBuf,
    /// `tokenUrl`: the token endpoint, `http://` or `https://`.
    pub token_url: String,
    /// `scopes`: sent space-separated as the request's `scope`; empty: no `scope`.
    pub scopes: Vec<String>,
    /// `endpointParams`: further form fields of the token request (`audience`, `resource`).
    pub endpoint_params: BTreeMap<String, String>,
    /// Where the token goes: `authHeader`/`customHeader`, `authorization: Bearer` when
    /// neither is given.
    pub header: TokenHeader,
}

impl std::fmt::Debug for OAuthClient {
    // Endpoint parameters may carry credentials (a client assertion): names only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthClient")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret)
            .field("token_url", &redact_url(&self.token_url))
            .field("scopes", &self.scopes)
            .field("endpoint_params", &self.endpoint_params.keys())
            .field("header", &self.header)
            .finish()
    }
}

/// Istio's `authHeader` / `customHeader`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenHeader {
    /// `authHeader: PLAIN`: `authorization: <token>`.
    Plain,
    /// `authHeader: BEARER`: `authorization: Bearer <token>`.
    Bearer,
    /// `customHeader: NAME`: `NAME: <token>` (lower case).
    Custom(String),
}

/// A PEM file named by the config and its contents when the config was loaded.
#[derive(Clone, PartialEq, Eq)]
pub struct PemFile {
    /// The path as written.
    pub path: PathBuf,
    /// The file's bytes (already checked to hold PEM of the expected kind).
    pub pem: Arc<[u8]>,
}

impl std::fmt::Debug for PemFile {
    // Never print the contents: a private key would end up in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PemFile")
            .field("path", &self.path)
            .field("bytes", &self.pem.len())
            .finish()
    }
}

impl Authentication {
    /// The block as Istio spells it, with paths and no file contents (for config dumps).
    pub fn describe(&self) -> serde_json::Value {
        fn path(p: &PemFile) -> serde_json::Value {
            p.path.display().to_string().into()
        }
        let mut out = serde_json::Map::new();
        match self {
            Authentication::Tls(t) => {
                if let Some(ca) = &t.ca_certificates {
                    out.insert("caCertificates".into(), path(ca));
                }
                match &t.token {
                    Some(TokenSource::File(file)) => {
                        out.insert("tokenPath".into(), file.path.display().to_string().into());
                    }
                    Some(TokenSource::OAuth(oauth)) => {
                        out.insert("oauth".into(), oauth.describe());
                    }
                    None => {}
                }
                if let Some(token) = &t.token {
                    match token.header() {
                        TokenHeader::Plain => out.insert("authHeader".into(), "PLAIN".into()),
                        TokenHeader::Bearer => out.insert("authHeader".into(), "BEARER".into()),
                        TokenHeader::Custom(h) => {
                            out.insert("customHeader".into(), h.clone().into())
                        }
                    };
                }
                if let Some(name) = &t.server_name {
                    out.insert("serverName".into(), name.clone().into());
                }
                serde_json::json!({ "tls": out })
            }
            Authentication::Mutual(m) => {
                out.insert("clientCertificate".into(), path(&m.client_certificate));
                out.insert("privateKey".into(), path(&m.private_key));
                if let Some(ca) = &m.ca_certificates {
                    out.insert("caCertificates".into(), path(ca));
                }
                if let Some(name) = &m.server_name {
                    out.insert("serverName".into(), name.clone().into());
                }
                serde_json::json!({ "mutual": out })
            }
        }
    }
}

impl OAuthClient {
    /// The `oauth` block as written, with the secret's path and the names of the endpoint
    /// parameters only.
    fn describe(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        out.insert("clientId".into(), self.client_id.clone().into());
        out.insert(
            "clientSecret".into(),
            self.client_secret.display().to_string().into(),
        );
        out.insert("tokenUrl".into(), redact_url(&self.token_url).into());
        if !self.scopes.is_empty() {
            out.insert("scopes".into(), self.scopes.clone().into());
        }
        if !self.endpoint_params.is_empty() {
            let names: serde_json::Map<_, _> = self
                .endpoint_params
                .keys()
                .map(|k| (k.clone(), "(set)".into()))
                .collect();
            out.insert("endpointParams".into(), names.into());
        }
        out.into()
    }
}
