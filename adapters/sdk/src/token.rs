//! [`RequiredToken`]: an adapter that accepts only calls carrying the mixer's token.
//!
//! The mixer sends a token on every call when its handler's `connection.authentication.tls`
//! names one (`tokenPath` with `authHeader: BEARER | PLAIN` or `customHeader`, or `oauth`).
//! An adapter that checks it knows the caller is the mixer, not anything that can reach its
//! port. The expected token is read from a file and read again when the last read is a second
//! old, so a rotated secret needs no restart; the health service stays open, since probes
//! carry no token.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tonic::Status;
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service, http};

/// How old a read of the token file may be before the next call reads it again.
const REFRESH: Duration = Duration::from_secs(1);

/// The token every call must carry, and where.
#[derive(Debug)]
pub struct RequiredToken {
    header: http::HeaderName,
    bearer: bool,
    path: PathBuf,
    current: Mutex<(String, Instant)>,
}

impl RequiredToken {
    /// `authorization: Bearer <token>` (the mixer's `authHeader: BEARER`, and `oauth` when the
    /// adapter is given the token the OAuth server issues).
    pub fn bearer(path: impl AsRef<Path>) -> std::io::Result<RequiredToken> {
        Self::new(http::header::AUTHORIZATION, true, path.as_ref())
    }

    /// The token as it is, in `header` (the mixer's `customHeader`, or `authorization` for
    /// `authHeader: PLAIN`).
    pub fn header(header: &str, path: impl AsRef<Path>) -> std::io::Result<RequiredToken> {
        let name = http::HeaderName::from_bytes(header.to_ascii_lowercase().as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        Self::new(name, false, path.as_ref())
    }

    fn new(header: http::HeaderName, bearer: bool, path: &Path) -> std::io::Result<Self> {
        let token = read(path)?;
        Ok(RequiredToken {
            header,
            bearer,
            path: path.to_path_buf(),
            current: Mutex::new((token, Instant::now())),
        })
    }

    /// The expected token; a file that became unreadable or empty keeps the last good one.
    fn expected(&self) -> String {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.1.elapsed() >= REFRESH {
            if let Ok(token) = read(&self.path) {
                current.0 = token;
            }
            current.1 = Instant::now();
        }
        current.0.clone()
    }

    pub(crate) fn accepts(&self, headers: &http::HeaderMap) -> bool {
        let Some(sent) = headers.get(&self.header).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let sent = if self.bearer {
            match sent.split_once(' ') {
                Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
                _ => return false,
            }
        } else {
            sent.trim()
        };
        sent == self.expected()
    }
}

fn read(path: &Path) -> std::io::Result<String> {
    let token = std::fs::read_to_string(path)?.trim().to_string();
    if token.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} holds no token", path.display()),
        ));
    }
    Ok(token)
}

/// The answer to a call without the token.
pub(crate) fn refused() -> Status {
    Status::unauthenticated("the call carries no token or a wrong one")
}

/// The layer [`crate::Server`] puts in front of every service.
#[derive(Clone, Default)]
pub(crate) struct TokenLayer(pub(crate) Option<Arc<RequiredToken>>);

impl<S> tower_layer::Layer<S> for TokenLayer {
    type Service = TokenCheck<S>;

    fn layer(&self, inner: S) -> TokenCheck<S> {
        TokenCheck {
            inner,
            required: self.0.clone(),
        }
    }
}

/// Refuses calls without the token (UNAUTHENTICATED) before they reach the adapter.
#[derive(Clone)]
pub(crate) struct TokenCheck<S> {
    inner: S,
    required: Option<Arc<RequiredToken>>,
}

impl<S, B> Service<http::Request<B>> for TokenCheck<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if let Some(required) = &self.required
            && !request.uri().path().starts_with("/grpc.health.v1.Health/")
            && !required.accepts(request.headers())
        {
            return Box::pin(std::future::ready(Ok(refused().into_http())));
        }
        Box::pin(self.inner.call(request))
    }
}
