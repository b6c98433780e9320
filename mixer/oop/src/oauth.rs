//! The OAuth token of a `tls` connection (Istio's `oauth`): asked of the token endpoint with
//! the client-credentials grant (RFC 6749 section 4.4) by the `oauth2` crate over `reqwest`,
//! kept, and sent with every call until it expires.
//!
//! The request is the grant's: a form-encoded POST (`grant_type=client_credentials`, `scope`,
//! the endpoint parameters) with the client authenticated by HTTP Basic (section 2.3.1, each
//! half form-encoded), the client secret read from its file for every request (it may have
//! been rotated). The endpoint is reached over rustls trusting the system's CAs and the
//! connection's `caCertificates` (the token endpoint often belongs to the same organisation as
//! the adapter); redirects are not followed and proxies are not used. A refusal names the
//! HTTP status and the error of section 5.2; the answer of section 5.1 is read leniently where
//! real endpoints stray (no `token_type`, `expires_in` as a string), but a token type other
//! than Bearer is refused (section 7.1).
//!
//! Calls never fetch a token themselves and the interceptor that adds it to a call only reads
//! the cache. Before a call, [`OAuthSource::ready`] looks at the cache:
//!
//! - a token that has not expired is used; once it is past [`refresh_at`](schedule) (10% of
//!   its lifetime before expiry, 10 s at most), the call also starts fetching its successor
//!   in a background task, so busy handlers never wait;
//! - with no usable token, the call starts a fetch (or joins the one under way) and waits for
//!   it, but not past its own deadline;
//! - after a failed fetch, no new one starts before a backoff (250 ms, doubling up to 30 s);
//!   calls in between fail at once with the failure's reason.
//!
//! A fetch is bounded by [`FETCH_TIMEOUT`] (or the connection timeout if longer) and
//! completes even if the call that started it gave up, so the next call finds its token.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mixer_adapter_api::secrets::redact_url;
use mixer_remote::{OAuthClient, PemFile};
use oauth2::basic::{
    BasicErrorResponse, BasicRevocationErrorResponse, BasicTokenIntrospectionResponse,
    BasicTokenType,
};
use oauth2::{
    ClientId, ClientSecret, RequestTokenError, Scope, StandardRevocableToken, TokenResponse,
    TokenUrl,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio::time::Instant;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};

use crate::tls::{describe, trust_anchors};

/// The shortest bound of one token request.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// How early a token is replaced at most (Go's oauth2 package uses the same margin).
const REFRESH_EARLY_MAX: Duration = Duration::from_secs(10);
/// How long a token whose answer has no `expires_in` is used.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);
/// The shortest lifetime believed: a shorter one would have every call fetch a token.
const MIN_LIFETIME: Duration = Duration::from_secs(1);
/// Wait after the first failed fetch; doubled after each further one, up to the maximum.
const BACKOFF_FIRST: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The largest answer read: a token answer is a few kilobytes at most.
const MAX_ANSWER: usize = 64 * 1024;

/// One connection's token source, shared by its channel's interceptor and its handler.
pub(crate) struct OAuthSource {
    endpoint: TokenEndpoint,
    key: AsciiMetadataKey,
    bearer: bool,
    fetch_timeout: Duration,
    state: Mutex<State>,
    /// Woken when a fetch ends, well or badly.
    changed: Notify,
}

#[derive(Default)]
struct State {
    token: Option<Cached>,
    /// Why the last fetch failed, until one succeeds.
    error: Option<String>,
    fetching: bool,
    failures: u32,
    /// No fetch starts before this, after a failure.
    retry_at: Option<Instant>,
}

struct Cached {
    value: AsciiMetadataValue,
    refresh_at: Instant,
    expires_at: Instant,
}

/// What a call does next.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Go with the cached token; `refresh`: start fetching its successor.
    Go { refresh: bool },
    /// Wait for a fetch; `start`: this call starts it.
    Wait { start: bool },
    /// Fail now, for this reason.
    Fail(String),
}

impl OAuthSource {
    /// Checks the URL and builds the HTTP client; fetches nothing yet (there may be no
    /// runtime: config validation builds transports too). The token goes in header `key`,
    /// after `Bearer ` when `bearer`.
    pub(crate) fn new(
        client: &OAuthClient,
        (key, bearer): (AsciiMetadataKey, bool),
        ca: Option<&PemFile>,
        timeout: Duration,
    ) -> Result<OAuthSource, String> {
        Ok(OAuthSource {
            endpoint: TokenEndpoint::new(client, ca)?,
            key,
            bearer,
            fetch_timeout: timeout.max(FETCH_TIMEOUT),
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        })
    }

    /// The token endpoint's URL, for messages.
    pub(crate) fn url(&self) -> &str {
        self.endpoint.url()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until a call may go: a token is cached, or `deadline` passed, or the last fetch
    /// failed (the error says why).
    pub(crate) async fn ready(self: &Arc<Self>, deadline: Instant) -> Result<(), String> {
        loop {
            // Registered before the state is read, so a fetch ending in between still wakes us.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let step = self.lock().step(Instant::now());
            match step {
                Step::Go { refresh } => {
                    if refresh {
                        self.spawn_fetch();
                    }
                    return Ok(());
                }
                Step::Fail(why) => return Err(why),
                Step::Wait { start } => {
                    if start {
                        self.spawn_fetch();
                    }
                }
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(format!("{} has not answered yet", self.url()));
            }
        }
    }

    /// The header of a call: the cached token, never waiting.
    pub(crate) fn header(&self) -> Result<(AsciiMetadataKey, AsciiMetadataValue), String> {
        let state = self.lock();
        match &state.token {
            Some(t) if Instant::now() < t.expires_at => Ok((self.key.clone(), t.value.clone())),
            _ => Err(state
                .error
                .clone()
                .unwrap_or_else(|| format!("no token from {} yet", self.url()))),
        }
    }

    /// Fetches in a task of its own: it outlives a call that stops waiting.
    fn spawn_fetch(self: &Arc<Self>) {
        let source = self.clone();
        tokio::spawn(async move {
            let mut fetch = Fetch {
                sent: Instant::now(),
                result: None,
                source,
            };
            let s = &fetch.source;
            let result = match tokio::time::timeout(s.fetch_timeout, s.endpoint.request()).await {
                Ok(Ok(issued)) => s.value(issued),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(format!(
                    "{} did not answer within {:?}",
                    s.url(),
                    s.fetch_timeout
                )),
            };
            fetch.result = Some(result);
        });
    }

    /// The header value of an issued token, and how long it lives.
    fn value(&self, issued: Issued) -> Result<(AsciiMetadataValue, Option<Duration>), String> {
        let lifetime = issued.expires_in();
        let token = issued.access_token.secret().trim();
        let text = if self.bearer {
            format!("Bearer {token}")
        } else {
            token.to_owned()
        };
        let mut value = AsciiMetadataValue::try_from(text).map_err(|_| {
            format!(
                "{} issued a token with characters a header cannot carry",
                self.url()
            )
        })?;
        value.set_sensitive(true);
        Ok((value, lifetime))
    }
}

/// The `oauth2` client of the grant, with the lenient token answer ([`Issued`]); only its
/// token endpoint gets set.
type GrantClient = oauth2::Client<
    BasicErrorResponse,
    Issued,
    BasicTokenIntrospectionResponse,
    StandardRevocableToken,
    BasicRevocationErrorResponse,
>;

/// Where tokens come from, who asks and for what.
struct TokenEndpoint {
    /// As configured, its password hidden, for messages.
    url: String,
    token_url: TokenUrl,
    client_id: ClientId,
    secret: PathBuf,
    scopes: Vec<Scope>,
    /// More form fields (`endpointParams`).
    params: Vec<(String, String)>,
    sender: Sender,
}

/// Sends the grant's requests: an owned handle (reqwest's client is shared), so that the
/// futures it makes borrow nothing and a fetch can run in a task of its own.
#[derive(Clone)]
struct Sender {
    http: reqwest::Client,
    /// The endpoint's URL, its password hidden, for messages.
    url: Arc<str>,
}

impl TokenEndpoint {
    fn new(client: &OAuthClient, ca: Option<&PemFile>) -> Result<TokenEndpoint, String> {
        // Every message names the URL: never with a password in it.
        let url = redact_url(&client.token_url);
        let token_url = TokenUrl::new(client.token_url.clone())
            .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        let https = match token_url.url().scheme() {
            "https" => true,
            "http" => false,
            _ => return Err(format!("{url:?} is not an http:// or https:// URL")),
        };
        if token_url.url().host_str().is_none_or(str::is_empty) {
            return Err(format!("{url:?} has no host"));
        }
        let mut http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy();
        if https {
            http = http.use_preconfigured_tls(tls_config(ca)?);
        }
        let http = http
            .build()
            .map_err(|e| format!("the HTTP client for {url}: {}", describe(&e)))?;
        Ok(TokenEndpoint {
            sender: Sender {
                http,
                url: Arc::from(url.as_str()),
            },
            url,
            token_url,
            client_id: ClientId::new(client.client_id.clone()),
            secret: client.client_secret.clone(),
            scopes: client.scopes.iter().cloned().map(Scope::new).collect(),
            params: client
                .endpoint_params
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        })
    }

    /// The URL as configured, its password hidden.
    fn url(&self) -> &str {
        &self.url
    }

    /// Asks for a token, reading the client secret now (it may have been rotated). Not
    /// bounded in time: the caller puts a timeout around it.
    async fn request(&self) -> Result<Issued, String> {
        let secret = read_secret(&self.secret).await?;
        let client = GrantClient::new(self.client_id.clone())
            .set_client_secret(ClientSecret::new(secret))
            .set_token_uri(self.token_url.clone());
        let mut request = client
            .exchange_client_credentials()
            .add_scopes(self.scopes.iter().cloned());
        for (name, value) in &self.params {
            request = request.add_extra_param(name.as_str(), value.as_str());
        }
        let sender = self.sender.clone();
        let send = move |request: oauth2::HttpRequest| sender.clone().send(request);
        let issued = request.request_async(&send).await.map_err(|e| match e {
            // Our own message: the transport failed, or the endpoint refused.
            RequestTokenError::Request(failure) => failure.0,
            RequestTokenError::Parse(e, _) => {
                format!("{} answered 200 OK but not with a token: {e}", self.url)
            }
            RequestTokenError::ServerResponse(e) => format!("{} answered {e}", self.url),
            RequestTokenError::Other(why) => format!("{} answered 200 OK but {why}", self.url),
        })?;
        issued
            .checked()
            .map_err(|why| format!("{} answered 200 OK but {why}", self.url))?;
        Ok(issued)
    }
}

impl Sender {
    /// Sends one request of the grant and reads the whole answer. Anything but 200 OK is a
    /// refusal, worded here with its status and its section 5.2 error.
    async fn send(self, request: oauth2::HttpRequest) -> Result<oauth2::HttpResponse, Failure> {
        let request = reqwest::Request::try_from(request)
            .map_err(|e| Failure(format!("cannot build the token request: {e}")))?;
        let mut response = self
            .http
            .execute(request)
            .await
            .map_err(|e| Failure(self.unreachable(e)))?;
        let status = response.status();
        let headers = response.headers().clone();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| {
            let e = e.without_url();
            Failure(format!(
                "{}: reading the answer: {}",
                self.url,
                describe(&e)
            ))
        })? {
            if body.len() + chunk.len() > MAX_ANSWER {
                return Err(Failure(format!(
                    "{} answered more than {MAX_ANSWER} bytes",
                    self.url
                )));
            }
            body.extend_from_slice(&chunk);
        }
        if status != reqwest::StatusCode::OK {
            return Err(Failure(format!(
                "{} answered {status}{}",
                self.url,
                refusal(&body)
            )));
        }
        let mut answer = http::Response::builder().status(status);
        if let Some(fields) = answer.headers_mut() {
            *fields = headers;
        }
        answer
            .body(body)
            .map_err(|e| Failure(format!("{}: {e}", self.url)))
    }

    /// Why the endpoint could not be reached; reqwest's own message would carry the URL as
    /// configured, password and all.
    fn unreachable(&self, e: reqwest::Error) -> String {
        let e = e.without_url();
        if from_tls(&e) {
            format!("TLS with {} failed: {}", self.url, describe(&e))
        } else {
            format!("cannot connect to {}: {}", self.url, describe(&e))
        }
    }
}

/// A failed exchange, already worded.
#[derive(Debug)]
struct Failure(String);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

/// Whether a TLS error (a handshake refused) is among `e`'s causes.
fn from_tls(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if is_tls(c) {
            return true;
        }
        cause = c.source();
    }
    false
}

/// A rustls error, or an I/O error made of one: the connectors wrap rustls's error in an
/// `io::Error`, sometimes twice, and an `io::Error`'s `source` skips what it wraps.
fn is_tls(e: &(dyn std::error::Error + 'static)) -> bool {
    if e.is::<rustls::Error>() {
        return true;
    }
    match e
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
    {
        Some(inner) => is_tls(inner),
        None => false,
    }
}

/// The rustls client of an `https` endpoint: the system's CAs and `ca`, TLS 1.2 or 1.3,
/// HTTP/1.1.
fn tls_config(ca: Option<&PemFile>) -> Result<rustls::ClientConfig, String> {
    let roots = rustls::RootCertStore {
        roots: trust_anchors(ca)?,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS settings: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The secret without surrounding whitespace (a trailing newline is not part of it).
async fn read_secret(path: &std::path::Path) -> Result<String, String> {
    let bytes = tokio::fs::read(path)
        .await
        .map_err(|e| format!("cannot read the client secret {}: {e}", path.display()))?;
    let secret = String::from_utf8(bytes)
        .map_err(|_| format!("the client secret {} is not UTF-8", path.display()))?;
    let secret = secret.trim();
    if secret.is_empty() {
        return Err(format!("the client secret {} is empty", path.display()));
    }
    Ok(secret.to_owned())
}

/// The error of section 5.2, when the answer has one: `: invalid_client (description)`.
fn refusal(body: &[u8]) -> String {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) else {
        return String::new();
    };
    let text = |key: &str| {
        json.get(key)
            .and_then(serde_json::Value::as_str)
            .map(|s| s.chars().take(200).collect::<String>())
    };
    match (text("error"), text("error_description")) {
        (Some(e), Some(d)) => format!(": {e} ({d})"),
        (Some(e), None) => format!(": {e}"),
        _ => String::new(),
    }
}

/// A token answer (section 5.1), read as endpoints send it: `token_type` may be missing and
/// `expires_in` may be a string of digits; [`Issued::checked`] refuses what cannot be used.
#[derive(Debug, Deserialize, Serialize)]
struct Issued {
    access_token: oauth2::AccessToken,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<serde_json::Value>,
}

/// What [`Issued::token_type`] says: only Bearer tokens get past [`Issued::checked`].
static BEARER: BasicTokenType = BasicTokenType::Bearer;

impl Issued {
    /// A token to send: not blank, and of type Bearer when a type is given (section 7.1
    /// forbids using a token of a type the client does not understand).
    fn checked(&self) -> Result<(), String> {
        if self.access_token.secret().trim().is_empty() {
            return Err("its access_token is empty".into());
        }
        match self.token_type.as_deref() {
            None => Ok(()),
            Some(t) if t.eq_ignore_ascii_case("bearer") => Ok(()),
            Some(other) => Err(format!(
                "the token type is {other:?}, and only Bearer tokens can be sent"
            )),
        }
    }
}

impl TokenResponse for Issued {
    type TokenType = BasicTokenType;

    fn access_token(&self) -> &oauth2::AccessToken {
        &self.access_token
    }

    fn token_type(&self) -> &BasicTokenType {
        &BEARER
    }

    /// A number, as the RFC says, or a string of digits, as some endpoints send it.
    fn expires_in(&self) -> Option<Duration> {
        let seconds = match &self.expires_in {
            Some(serde_json::Value::Number(n)) => n.as_f64(),
            Some(serde_json::Value::String(s)) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        seconds
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(|s| Duration::from_secs_f64(s.min(1e9)))
    }

    fn refresh_token(&self) -> Option<&oauth2::RefreshToken> {
        None
    }

    fn scopes(&self) -> Option<&Vec<Scope>> {
        None
    }
}

/// A fetch under way; dropping it records its outcome and wakes the waiting calls, also when
/// the task is cancelled (the runtime shutting down), so no call waits for a fetch that is gone.
struct Fetch {
    source: Arc<OAuthSource>,
    sent: Instant,
    result: Option<Result<(AsciiMetadataValue, Option<Duration>), String>>,
}

impl Drop for Fetch {
    fn drop(&mut self) {
        let result = self
            .result
            .take()
            .unwrap_or_else(|| Err("the token request was abandoned".into()));
        let now = Instant::now();
        let url = self.source.url();
        {
            let mut state = self.source.lock();
            let recovered = state.failures > 0;
            match &result {
                Ok((_, lifetime)) if recovered => {
                    tracing::info!(token_url = %url, ?lifetime, "OAuth token obtained again");
                }
                Ok((_, lifetime)) => {
                    tracing::debug!(token_url = %url, ?lifetime, "OAuth token obtained")
                }
                Err(e) => tracing::warn!(
                    token_url = %url,
                    failures = state.failures + 1,
                    "OAuth token request failed: {e}"
                ),
            }
            state.fetched(result, self.sent, now);
        }
        self.source.changed.notify_waiters();
    }
}

impl State {
    fn step(&mut self, now: Instant) -> Step {
        if let Some(t) = &self.token
            && now < t.expires_at
        {
            let refresh = now >= t.refresh_at && self.may_fetch(now);
            self.fetching |= refresh;
            return Step::Go { refresh };
        }
        if self.fetching {
            return Step::Wait { start: false };
        }
        if self.may_fetch(now) {
            self.fetching = true;
            return Step::Wait { start: true };
        }
        Step::Fail(
            self.error
                .clone()
                .unwrap_or_else(|| "no token fetched yet".into()),
        )
    }

    fn may_fetch(&self, now: Instant) -> bool {
        !self.fetching && self.retry_at.is_none_or(|at| now >= at)
    }

    fn fetched(
        &mut self,
        result: Result<(AsciiMetadataValue, Option<Duration>), String>,
        sent: Instant,
        now: Instant,
    ) {
        self.fetching = false;
        match result {
            Ok((value, lifetime)) => {
                let (refresh_at, expires_at) = schedule(sent, lifetime);
                self.token = Some(Cached {
                    value,
                    refresh_at,
                    expires_at,
                });
                self.error = None;
                self.failures = 0;
                self.retry_at = None;
            }
            Err(e) => {
                self.failures = self.failures.saturating_add(1);
                self.retry_at = Some(now + backoff(self.failures));
                self.error = Some(e);
            }
        }
    }
}

/// When to start replacing a token and when to stop sending it, counted from when it was
/// asked for (the endpoint's clock started later, so this errs on the early side).
fn schedule(sent: Instant, lifetime: Option<Duration>) -> (Instant, Instant) {
    let lifetime = lifetime.unwrap_or(DEFAULT_LIFETIME).max(MIN_LIFETIME);
    let early = (lifetime / 10).min(REFRESH_EARLY_MAX);
    (sent + lifetime - early, sent + lifetime)
}

fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    BACKOFF_FIRST
        .saturating_mul(1 << doublings)
        .min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str) -> AsciiMetadataValue {
        AsciiMetadataValue::try_from(text).expect("ascii")
    }

    #[test]
    fn a_token_is_replaced_shortly_before_it_expires() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        assert_eq!(schedule(t0, Some(s(3600))), (t0 + s(3590), t0 + s(3600)));
        assert_eq!(
            schedule(t0, Some(s(2))),
            (t0 + Duration::from_millis(1800), t0 + s(2))
        );
        assert_eq!(schedule(t0, None), (t0 + s(290), t0 + s(300)));
        assert_eq!(schedule(t0, Some(Duration::ZERO)).1, t0 + MIN_LIFETIME);

        let mut state = State::default();
        // No token: the first call starts a fetch, the next ones wait for it.
        assert_eq!(state.step(t0), Step::Wait { start: true });
        assert_eq!(state.step(t0), Step::Wait { start: false });
        state.fetched(Ok((token("Bearer a"), Some(s(100)))), t0, t0);
        // Fresh: used as it is.
        assert_eq!(state.step(t0 + s(50)), Step::Go { refresh: false });
        // In the last 10 s: used, and one call (only one) starts fetching the next.
        assert_eq!(state.step(t0 + s(91)), Step::Go { refresh: true });
        assert_eq!(state.step(t0 + s(92)), Step::Go { refresh: false });
        // The refresh fails: the old token goes on until it expires...
        state.fetched(Err("503".into()), t0 + s(91), t0 + s(93));
        assert_eq!(state.step(t0 + s(93)), Step::Go { refresh: false });
        assert_eq!(state.step(t0 + s(94)), Step::Go { refresh: true });
        state.fetched(Err("503".into()), t0 + s(94), t0 + s(100));
        // ...then calls fail with the reason until the backoff (500 ms now) is over.
        let ms = Duration::from_millis;
        assert_eq!(state.step(t0 + s(100)), Step::Fail("503".into()));
        assert_eq!(state.step(t0 + s(100) + ms(499)), Step::Fail("503".into()));
        assert_eq!(
            state.step(t0 + s(100) + ms(500)),
            Step::Wait { start: true }
        );
        state.fetched(Ok((token("Bearer b"), None)), t0 + s(100), t0 + s(100));
        assert_eq!((state.failures, state.error.as_deref()), (0, None));
        assert_eq!(state.step(t0 + s(101)), Step::Go { refresh: false });
    }

    #[test]
    fn answers_are_read_as_rfc_6749_says_and_as_endpoints_send_them() {
        let read = |body: &str| serde_json::from_str::<Issued>(body).expect("an answer");
        let ok = read(r#"{"access_token":"t1","token_type":"bearer","expires_in":3600}"#);
        assert_eq!(ok.checked(), Ok(()));
        assert_eq!(ok.expires_in(), Some(Duration::from_secs(3600)));
        let lenient = read(r#"{"access_token":"t2","expires_in":"60"}"#);
        assert_eq!(lenient.checked(), Ok(()));
        assert_eq!(lenient.expires_in(), Some(Duration::from_secs(60)));
        assert_eq!(read(r#"{"access_token":"t3"}"#).expires_in(), None);
        let mac = read(r#"{"access_token":"t","token_type":"mac"}"#);
        assert!(mac.checked().expect_err("refused").contains("only Bearer"));
        assert!(read(r#"{"access_token":" "}"#).checked().is_err());
        assert!(serde_json::from_str::<Issued>(r#"{"token_type":"Bearer"}"#).is_err());
        assert_eq!(
            refusal(br#"{"error":"invalid_client","error_description":"bad secret"}"#),
            ": invalid_client (bad secret)"
        );
        assert_eq!(refusal(b"Internal Server Error"), "");
    }

    #[test]
    fn the_endpoint_comes_from_the_config() {
        let client = |url: &str| OAuthClient {
            client_id: "mixer".into(),
            client_secret: "/secret".into(),
            token_url: url.into(),
            scopes: vec!["a.read".into()],
            endpoint_params: std::collections::BTreeMap::new(),
            header: mixer_remote::TokenHeader::Bearer,
        };
        assert!(
            TokenEndpoint::new(&client("https://[::1]:9443/oauth/token?tenant=a"), None).is_ok()
        );
        assert!(TokenEndpoint::new(&client("http://idp.example"), None).is_ok());
        let e = TokenEndpoint::new(&client("ftp://idp.example/"), None).err();
        assert!(e.is_some_and(|e| e.contains("not an http:// or https://")));
        let e = TokenEndpoint::new(&client("https://user:hunter2@/token"), None).err();
        assert!(e.is_some_and(|e| !e.contains("hunter2")));
    }

    #[test]
    fn failures_back_off_exponentially_up_to_a_cap() {
        let ms = Duration::from_millis;
        let waits: Vec<Duration> = (1..=10).map(backoff).collect();
        assert_eq!(waits[..5], [ms(250), ms(500), ms(1000), ms(2000), ms(4000)]);
        assert_eq!(waits[9], BACKOFF_MAX);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }
}
