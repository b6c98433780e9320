//! The extension point for out-of-process adapters: handlers whose config names a
//! `connection` are not looked up by adapter name but built by one [`RemoteAdapters`]
//! implementation (the gRPC client in `mixer-oop`), which the server installs with
//! `mixer_config::AdapterRegistry::set_remote`. The runtime never
//! depends on that implementation: it sees this trait and the handler traits only.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mixer_model::{Template, ValueType};

use crate::adapter::Params;
use crate::error::{AdapterError, ParamError};
use crate::handler::Handler;

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
            .field("token_url", &crate::secrets::redact_url(&self.token_url))
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
        out.insert(
            "tokenUrl".into(),
            crate::secrets::redact_url(&self.token_url).into(),
        );
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

/// The inferred type of one instance field (or one entry of a map field), as the config's
/// expressions say; sent to the adapter at validation and session creation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InferredField {
    /// The template field (`dimensions`, `subject.properties`, `value`).
    pub field: &'static str,
    /// The map key, for an entry of a map field.
    pub key: Option<Arc<str>>,
    /// The expression's type; `None` when it is not known at config time.
    pub value_type: Option<ValueType>,
}

/// One instance the config routes to a remote handler.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteInstance {
    /// Fully qualified instance name.
    pub name: Arc<str>,
    /// Its template.
    pub template: Template,
    /// Field types inferred from the config.
    pub fields: Vec<InferredField>,
}

/// The adapter's own config message, as an `adapter` resource describes it (Istio's
/// `spec.config`): a remote handler's `params` are encoded into it instead of a
/// `google.protobuf.Struct`.
#[derive(Clone, PartialEq, Eq)]
pub struct ParamsDescriptor {
    /// Full name of the message (`mygrpcadapter.config.Params`); the `adapter_config` sent is
    /// an `Any` of type `type.googleapis.com/<message>`.
    pub message: Arc<str>,
    /// A serialized `google.protobuf.FileDescriptorSet` that defines the message (and the
    /// files it imports, well-known types excepted), already checked by config validation.
    pub file_descriptor_set: Arc<[u8]>,
}

impl std::fmt::Debug for ParamsDescriptor {
    // The descriptor bytes say nothing to a reader of logs or dumps.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParamsDescriptor")
            .field("message", &self.message)
            .field("file_descriptor_set_bytes", &self.file_descriptor_set.len())
            .finish()
    }
}

/// Everything the config says about one remote handler.
#[derive(Clone, Debug)]
pub struct RemoteHandlerSpec<'a> {
    /// Fully qualified handler name, for logs and metrics.
    pub handler_name: Arc<str>,
    /// The adapter name as written (`myadapter`); informational for remote adapters.
    pub adapter: &'a str,
    /// The handler's params, passed to the adapter as its config.
    pub params: &'a Params,
    /// The message `params` are encoded into, when an `adapter` resource gives one; `None`
    /// sends them as a `google.protobuf.Struct`.
    pub params_descriptor: Option<&'a ParamsDescriptor>,
    /// Whether the adapter keeps sessions, when an `adapter` resource says
    /// (`spec.session_based`); `None`: unknown, so a client may try and fall back.
    pub session_based: Option<bool>,
    /// How to reach it.
    pub connection: &'a RemoteConnection,
    /// The instances rules send it (every rule of the config).
    pub instances: &'a [RemoteInstance],
}

/// Builds handlers for adapters that run in another process. Called by the runtime when a
/// config snapshot is built, for handlers that are new or changed (unchanged handlers are
/// reused as they are).
///
/// Both methods are synchronous because snapshot building is (it runs on a blocking thread
/// in the server); an implementation that talks to the adapter must bound the time it takes.
pub trait RemoteAdapters: Send + Sync {
    /// Checks a handler's params with the adapter itself. An error rejects the whole config
    /// (the previous snapshot stays), so return one only for params the adapter refused,
    /// not because the adapter could not be reached.
    fn validate(&self, spec: &RemoteHandlerSpec<'_>) -> Result<(), Vec<ParamError>>;

    /// Builds the handler. Must not need the adapter to be up: a down adapter is a runtime
    /// failure handled by fail policies, not a config error.
    fn build(&self, spec: &RemoteHandlerSpec<'_>) -> Result<Arc<dyn Handler>, AdapterError>;
}
