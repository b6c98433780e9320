//! A small OAuth 2.0 authorization server for the tests: the token endpoint of the
//! client-credentials grant (RFC 6749 section 4.4) on 127.0.0.1, over plain HTTP/1.1 or TLS
//! with the test PKI's server certificate. It checks what a real one checks (the method, the
//! form encoding, the client's HTTP Basic credentials, the grant type), answers errors as
//! section 5.2 says, records every request, and can be told to fail.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use base64::Engine;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::Pki;

/// One token request as the endpoint saw it.
#[derive(Clone, Debug)]
pub struct TokenRequest {
    /// The client id and secret were right.
    pub authenticated: bool,
    /// The form fields.
    pub form: BTreeMap<String, String>,
}

struct Server {
    client_id: String,
    secret: String,
    expires_in: u64,
    /// Answer every request with this status instead.
    fail_with: Option<StatusCode>,
    issued: u32,
    requests: Vec<TokenRequest>,
}

/// The running endpoint; it stops with the test's runtime.
#[derive(Clone)]
pub struct TokenEndpoint {
    url: String,
    server: Arc<Mutex<Server>>,
}

impl TokenEndpoint {
    /// Issues `tok-1`, `tok-2`... (bearer tokens living `expires_in` seconds) to `client_id`
    /// with `secret`, at `/oauth2/token`; over TLS when `pki` is given.
    pub async fn start(
        client_id: &str,
        secret: &str,
        expires_in: u64,
        pki: Option<&Pki>,
    ) -> TokenEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = Arc::new(Mutex::new(Server {
            client_id: client_id.into(),
            secret: secret.into(),
            expires_in,
            fail_with: None,
            issued: 0,
            requests: Vec::new(),
        }));
        let acceptor = pki.map(acceptor);
        let scheme = if acceptor.is_some() { "https" } else { "http" };
        let state = server.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let state = state.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, std::convert::Infallible>(answer(&state, req).await) }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    let _ = match acceptor {
                        None => http.serve_connection(TokioIo::new(tcp), service).await,
                        Some(acceptor) => match acceptor.accept(tcp).await {
                            Ok(tls) => http.serve_connection(TokioIo::new(tls), service).await,
                            Err(_) => return,
                        },
                    };
                });
            }
        });
        TokenEndpoint {
            url: format!("{scheme}://127.0.0.1:{port}/oauth2/token"),
            server,
        }
    }

    /// The token URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn with<T>(&self, f: impl FnOnce(&mut Server) -> T) -> T {
        f(&mut self.server.lock().expect("lock"))
    }

    /// Accept this secret from now on (and no other).
    pub fn set_secret(&self, secret: &str) {
        self.with(|s| s.secret = secret.into());
    }

    /// Answer every request with `status` (or normally again, with `None`).
    pub fn fail_with(&self, status: Option<StatusCode>) {
        self.with(|s| s.fail_with = status);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<TokenRequest> {
        self.with(|s| s.requests.clone())
    }

    /// How many tokens were issued.
    pub fn issued(&self) -> u32 {
        self.with(|s| s.issued)
    }
}

fn acceptor(pki: &Pki) -> tokio_rustls::TlsAcceptor {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(&pki.read("server.pem"))
        .collect::<Result<Vec<_>, _>>()
        .expect("certificate");
    let key = PrivateKeyDer::from_pem_slice(&pki.read("server.key")).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

type Answer = Response<Full<Bytes>>;

fn json(status: StatusCode, body: serde_json::Value) -> Answer {
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "application/json")
        .header(CACHE_CONTROL, "no-store")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("response")
}

/// Section 5.2's error answer.
fn error(status: StatusCode, code: &str) -> Answer {
    json(status, serde_json::json!({ "error": code }))
}

/// The client id and secret of an `authorization: Basic` header (section 2.3.1: each half
/// form-encoded, then joined by `:` and base64'd).
fn basic_credentials(req: &Request<Incoming>) -> Option<(String, String)> {
    let header = req.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let encoded = header.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (id, secret) = text.split_once(':')?;
    let decode = |s: &str| {
        form_urlencoded::parse(format!("x={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
    };
    Some((decode(id)?, decode(secret)?))
}

async fn answer(state: &Mutex<Server>, req: Request<Incoming>) -> Answer {
    if req.method() != Method::POST || req.uri().path() != "/oauth2/token" {
        return error(StatusCode::METHOD_NOT_ALLOWED, "invalid_request");
    }
    let form_encoded = req
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/x-www-form-urlencoded");
    let credentials = basic_credentials(&req);
    let Ok(body) = req.into_body().collect().await else {
        return error(StatusCode::BAD_REQUEST, "invalid_request");
    };
    let form: BTreeMap<String, String> = form_urlencoded::parse(&body.to_bytes())
        .into_owned()
        .collect();
    let mut s = state.lock().expect("lock");
    let authenticated = credentials == Some((s.client_id.clone(), s.secret.clone()));
    s.requests.push(TokenRequest {
        authenticated,
        form: form.clone(),
    });
    if let Some(status) = s.fail_with {
        return Response::builder()
            .status(status)
            .body(Full::new(Bytes::from_static(b"the token service is down")))
            .expect("response");
    }
    if !form_encoded {
        return error(StatusCode::BAD_REQUEST, "invalid_request");
    }
    if !authenticated {
        let mut answer = error(StatusCode::UNAUTHORIZED, "invalid_client");
        answer.headers_mut().insert(
            WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Basic realm=\"test\""),
        );
        return answer;
    }
    if form.get("grant_type").map(String::as_str) != Some("client_credentials") {
        return error(StatusCode::BAD_REQUEST, "unsupported_grant_type");
    }
    s.issued += 1;
    json(
        StatusCode::OK,
        // Lower-case "bearer": the type is case-insensitive (section 5.1).
        serde_json::json!({
            "access_token": format!("tok-{}", s.issued),
            "token_type": "bearer",
            "expires_in": s.expires_in,
        }),
    )
}
