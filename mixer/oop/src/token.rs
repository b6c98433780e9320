//! The access token of a `tls` connection, added to the metadata of every call in the header
//! Istio's `authHeader` or `customHeader` names: read from a file (`tokenPath`, here), or
//! fetched from an OAuth token endpoint (`oauth`, see [`crate::oauth`]).
//!
//! Istio 1.4 read the file once, when the handler was built. Tokens rotate (Kubernetes
//! service-account tokens every hour), so here the file is read again when the last read is
//! more than [`REFRESH`] old: a rotated token is sent within a second, without a config
//! reload. If a later read fails, the last good token is kept and the failure is logged.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mixer_remote::{AccessToken, OAuthClient, PemFile, TokenHeader};
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::oauth::OAuthSource;

/// How old a token read may be before the next call reads the file again.
pub const REFRESH: Duration = Duration::from_secs(1);

/// What each call carries: nothing, or a token header.
#[derive(Clone, Default)]
pub(crate) struct Credentials(Option<Source>);

#[derive(Clone)]
enum Source {
    File(Arc<TokenFile>),
    OAuth(Arc<OAuthSource>),
}

impl std::fmt::Debug for Credentials {
    // The token itself never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => f.write_str("Credentials(none)"),
            Some(Source::File(t)) => write!(f, "Credentials({} from {})", t.key, t.path.display()),
            Some(Source::OAuth(o)) => write!(f, "Credentials(OAuth token from {})", o.url()),
        }
    }
}

pub(crate) struct TokenFile {
    path: PathBuf,
    key: AsciiMetadataKey,
    bearer: bool,
    state: Mutex<State>,
}

struct State {
    value: AsciiMetadataValue,
    read_at: Instant,
    /// The last read failed (logged once until a read succeeds again).
    failing: bool,
}

impl Credentials {
    /// No token: calls go as they are.
    pub(crate) fn none() -> Credentials {
        Credentials(None)
    }

    /// Reads the token now; an unreadable or unusable file is an error (config validation
    /// already checked it, so this only fails when the file changed in between).
    pub(crate) fn from_token(token: &AccessToken) -> Result<Credentials, String> {
        let (key, bearer) = header_key(&token.header)?;
        let value = read(&token.path, bearer)?;
        Ok(Credentials(Some(Source::File(Arc::new(TokenFile {
            path: token.path.clone(),
            key,
            bearer,
            state: Mutex::new(State {
                value,
                read_at: Instant::now(),
                failing: false,
            }),
        })))))
    }

    /// Tokens from an OAuth token endpoint; none is fetched until a call needs one. `ca` is
    /// the connection's `caCertificates`, trusted for an `https` endpoint too; `timeout` the
    /// connection's, which bounds a token request when it is longer than the default.
    pub(crate) fn from_oauth(
        client: &OAuthClient,
        ca: Option<&PemFile>,
        timeout: std::time::Duration,
    ) -> Result<Credentials, String> {
        let source = OAuthSource::new(client, header_key(&client.header)?, ca, timeout)?;
        Ok(Credentials(Some(Source::OAuth(Arc::new(source)))))
    }

    /// Waits (until `deadline` at most) for what a call needs: only an OAuth token may be
    /// missing, when none has been fetched yet or the last one expired.
    pub(crate) async fn ready(&self, deadline: tokio::time::Instant) -> Result<(), String> {
        match &self.0 {
            Some(Source::OAuth(source)) => source.ready(deadline).await,
            _ => Ok(()),
        }
    }
}

/// The metadata key of a token, and whether its value is prefixed by `Bearer `.
pub(crate) fn header_key(header: &TokenHeader) -> Result<(AsciiMetadataKey, bool), String> {
    Ok(match header {
        TokenHeader::Plain => (AsciiMetadataKey::from_static("authorization"), false),
        TokenHeader::Bearer => (AsciiMetadataKey::from_static("authorization"), true),
        TokenHeader::Custom(name) => (
            AsciiMetadataKey::from_bytes(name.as_bytes())
                .map_err(|_| format!("customHeader {name:?} is not a metadata key"))?,
            false,
        ),
    })
}

impl TokenFile {
    fn current(&self) -> AsciiMetadataValue {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.read_at.elapsed() >= REFRESH {
            state.read_at = Instant::now();
            match read(&self.path, self.bearer) {
                Ok(value) => {
                    state.value = value;
                    state.failing = false;
                }
                Err(e) => {
                    if !state.failing {
                        tracing::warn!("adapter token: {e}; sending the last one read");
                    }
                    state.failing = true;
                }
            }
        }
        state.value.clone()
    }
}

/// The header value for the token in `path`: trimmed (a trailing newline is not part of a
/// token, and a header cannot carry it), prefixed by `Bearer ` when asked.
fn read(path: &std::path::Path, bearer: bool) -> Result<AsciiMetadataValue, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("{} is empty", path.display()));
    }
    let value = if bearer {
        format!("Bearer {token}")
    } else {
        token.to_owned()
    };
    let mut value = AsciiMetadataValue::try_from(value)
        .map_err(|_| format!("{} holds characters a header cannot carry", path.display()))?;
    value.set_sensitive(true);
    Ok(value)
}

impl Interceptor for Credentials {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        // Every call to the adapter passes through here: the one place to propagate.
        crate::trace_context::propagate(request.metadata_mut());
        match &self.0 {
            None => {}
            Some(Source::File(token)) => {
                request
                    .metadata_mut()
                    .insert(token.key.clone(), token.current());
            }
            // The handler waited for a token before the call ([`Credentials::ready`]); if it
            // expired since, the call fails rather than go without one.
            Some(Source::OAuth(source)) => {
                let (key, value) = source
                    .header()
                    .map_err(|why| Status::unavailable(format!("no OAuth token: {why}")))?;
                request.metadata_mut().insert(key, value);
            }
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(dir: &std::path::Path, text: &str, header: TokenHeader) -> Credentials {
        let path = dir.join("token");
        std::fs::write(&path, text).expect("write");
        Credentials::from_token(&AccessToken { path, header }).expect("readable")
    }

    fn sent(c: &mut Credentials) -> Vec<(String, String)> {
        let r = c.call(Request::new(())).expect("intercepted");
        r.metadata()
            .iter()
            .filter_map(|kv| match kv {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                    Some((k.to_string(), v.to_str().unwrap_or("?").to_string()))
                }
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect()
    }

    #[test]
    fn header_follows_istios_token_types() {
        let dir = std::env::temp_dir().join(format!("mixer-oop-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let pair = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        let mut c = token(&dir, "abc\n", TokenHeader::Bearer);
        assert_eq!(sent(&mut c), pair("authorization", "Bearer abc"));
        let mut c = token(&dir, "abc", TokenHeader::Plain);
        assert_eq!(sent(&mut c), pair("authorization", "abc"));
        let mut c = token(&dir, "abc", TokenHeader::Custom("x-api-key".into()));
        assert_eq!(sent(&mut c), pair("x-api-key", "abc"));
        assert!(sent(&mut Credentials::none()).is_empty());
        assert!(!format!("{c:?}").contains("abc"));
        // An unusable file is an error when the handler is built.
        std::fs::write(dir.join("token"), "a\u{1}b").expect("write");
        let err = Credentials::from_token(&AccessToken {
            path: dir.join("token"),
            header: TokenHeader::Plain,
        })
        .expect_err("control character");
        assert!(err.contains("cannot carry"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
