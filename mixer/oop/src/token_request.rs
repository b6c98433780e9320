//! One access token request of the OAuth 2.0 client-credentials grant (RFC 6749 section
//! 4.4): a form-encoded POST to the token endpoint over HTTP/1.1, plain or over rustls, with
//! the client authenticated by HTTP Basic (section 2.3.1), and the JSON answer of section 5.1
//! (or the error of section 5.2) read back. Each request gets a connection of its own: a token
//! lasts minutes to hours, so there is nothing to keep alive in between. Redirects are not
//! followed and proxies are not used.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use mixer_adapter_api::{OAuthClient, PemFile};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::transport::{describe, trust_anchors};

/// The largest answer read: a token answer is a few kilobytes at most.
const MAX_ANSWER: usize = 64 * 1024;

/// Where tokens come from and how to reach it.
pub(crate) struct TokenEndpoint {
    /// As configured, for messages.
    url: String,
    /// `host:port` as the `Host` header wants it.
    authority: String,
    /// The host to connect to (no IPv6 brackets).
    host: String,
    port: u16,
    /// Path and query: the request target.
    target: String,
    /// For `https`: the connector and the name the endpoint's certificate must carry.
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

/// The client's side of the grant: who it is and what it asks for.
pub(crate) struct Grant {
    client_id: String,
    secret: PathBuf,
    /// `grant_type`, `scope` and the endpoint parameters, form-encoded once.
    form: String,
}

/// What the endpoint issued.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Issued {
    /// `access_token`.
    pub token: String,
    /// `expires_in`, when given.
    pub lifetime: Option<Duration>,
}

impl TokenEndpoint {
    /// Parses `url` and, for `https`, builds a rustls client trusting the system's CAs and
    /// `ca` (the connection's `caCertificates`, as the token endpoint often belongs to the same
    /// organisation as the adapter).
    pub(crate) fn new(url: &str, ca: Option<&PemFile>) -> Result<TokenEndpoint, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(format!("{url:?} is not an http:// or https:// URL")),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| format!("{url:?} has no host"))?;
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let tls = if https {
            let name = ServerName::try_from(host.to_owned())
                .map_err(|_| format!("{host:?} is neither a DNS name nor an IP address"))?;
            Some((connector(ca)?, name))
        } else {
            None
        };
        Ok(TokenEndpoint {
            url: url.to_owned(),
            authority: authority.as_str().to_owned(),
            host: host.to_owned(),
            port,
            target: uri
                .path_and_query()
                .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned()),
            tls,
        })
    }

    /// The URL as configured.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Asks for a token, reading the client secret now (it may have been rotated). Not
    /// bounded in time: the caller puts a timeout around it.
    pub(crate) async fn request(&self, grant: &Grant) -> Result<Issued, String> {
        let secret = read_secret(&grant.secret).await?;
        // Section 2.3.1: both halves are form-encoded before they are joined and base64'd.
        let credentials = format!("{}:{}", form_encode(&grant.client_id), form_encode(&secret));
        let basic = base64::engine::general_purpose::STANDARD.encode(credentials);
        let mut authorization = HeaderValue::try_from(format!("Basic {basic}"))
            .map_err(|_| "the client credentials do not fit a header".to_owned())?;
        authorization.set_sensitive(true);
        let request = Request::post(self.target.as_str())
            .header(HOST, self.authority.as_str())
            .header(AUTHORIZATION, authorization)
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json")
            .body(Full::new(Bytes::from(grant.form.clone())))
            .map_err(|e| format!("cannot build the token request: {e}"))?;
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", self.url))?;
        // Nagle would hold the body back behind the headers.
        let _ = tcp.set_nodelay(true);
        let (status, body) = match &self.tls {
            None => exchange(TokioIo::new(tcp), request).await,
            Some((connector, name)) => {
                let stream = connector
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| format!("TLS with {} failed: {}", self.url, describe(&e)))?;
                exchange(TokioIo::new(stream), request).await
            }
        }
        .map_err(|e| format!("{}: {e}", self.url))?;
        if status != StatusCode::OK {
            return Err(format!("{} answered {status}{}", self.url, refusal(&body)));
        }
        issued(&body).map_err(|e| format!("{} answered 200 OK but {e}", self.url))
    }
}

impl Grant {
    /// The request's form fields, from the config.
    pub(crate) fn new(client: &OAuthClient) -> Grant {
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", "client_credentials");
        if !client.scopes.is_empty() {
            form.append_pair("scope", &client.scopes.join(" "));
        }
        form.extend_pairs(&client.endpoint_params);
        Grant {
            client_id: client.client_id.clone(),
            secret: client.client_secret.clone(),
            form: form.finish(),
        }
    }
}

fn connector(ca: Option<&PemFile>) -> Result<TlsConnector, String> {
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
    Ok(TlsConnector::from(Arc::new(config)))
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

fn form_encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// Sends `request` on a fresh HTTP/1.1 connection over `io` and reads the whole answer.
async fn exchange<I>(io: I, request: Request<Full<Bytes>>) -> Result<(StatusCode, Bytes), String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| describe(&e))?;
    // The connection is driven by a task of its own, ended with the request, answered or not.
    let driver = AbortOnDrop(tokio::spawn(async move {
        let _ = connection.await;
    }));
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| describe(&e))?;
    let status = response.status();
    let body = Limited::new(response.into_body(), MAX_ANSWER)
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
        .to_bytes();
    drop(driver);
    Ok((status, body))
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A successful answer (section 5.1). The token type must be Bearer, when given: section
/// 7.1 forbids using a token of a type the client does not understand.
fn issued(body: &[u8]) -> Result<Issued, String> {
    let json: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("its answer is not JSON: {e}"))?;
    let token = match json.get("access_token") {
        Some(serde_json::Value::String(t)) if !t.trim().is_empty() => t.trim().to_owned(),
        _ => return Err("its answer has no access_token".into()),
    };
    match json.get("token_type") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::String(t)) if t.eq_ignore_ascii_case("bearer") => {}
        Some(other) => {
            return Err(format!(
                "the token type is {other}, and only Bearer tokens can be sent"
            ));
        }
    }
    // A number, as the RFC says; some servers send a string of digits.
    let seconds = match json.get("expires_in") {
        Some(serde_json::Value::Number(n)) => n.as_f64(),
        Some(serde_json::Value::String(s)) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    let lifetime = seconds
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| Duration::from_secs_f64(s.min(1e9)));
    Ok(Issued { token, lifetime })
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use mixer_adapter_api::TokenHeader;

    use super::*;

    #[test]
    fn answers_are_read_as_rfc_6749_says() {
        let ok = issued(br#"{"access_token":"t1","token_type":"bearer","expires_in":3600}"#);
        assert_eq!(
            ok,
            Ok(Issued {
                token: "t1".into(),
                lifetime: Some(Duration::from_secs(3600))
            })
        );
        let lenient = issued(br#"{"access_token":"t2","expires_in":"60"}"#).expect("ok");
        assert_eq!(lenient.lifetime, Some(Duration::from_secs(60)));
        assert_eq!(
            issued(br#"{"access_token":"t3"}"#).expect("ok").lifetime,
            None
        );
        for (body, why) in [
            (&br#"{"token_type":"Bearer"}"#[..], "no access_token"),
            (br#"{"access_token":"t","token_type":"mac"}"#, "only Bearer"),
            (b"<html>", "not JSON"),
        ] {
            let err = issued(body).expect_err("refused");
            assert!(err.contains(why), "{err}");
        }
        assert_eq!(
            refusal(br#"{"error":"invalid_client","error_description":"bad secret"}"#),
            ": invalid_client (bad secret)"
        );
        assert_eq!(refusal(b"Internal Server Error"), "");
    }

    #[test]
    fn the_form_and_the_endpoint_come_from_the_config() {
        let client = OAuthClient {
            client_id: "mixer".into(),
            client_secret: "/secret".into(),
            token_url: "https://[::1]:9443/oauth/token?tenant=a".into(),
            scopes: vec!["a.read".into(), "b:write".into()],
            endpoint_params: BTreeMap::from([("audience".into(), "x y&z".into())]),
            header: TokenHeader::Bearer,
        };
        assert_eq!(
            Grant::new(&client).form,
            "grant_type=client_credentials&scope=a.read+b%3Awrite&audience=x+y%26z"
        );
        let e = TokenEndpoint::new(&client.token_url, None).expect("valid");
        assert_eq!(
            (
                e.authority.as_str(),
                e.host.as_str(),
                e.port,
                e.target.as_str()
            ),
            ("[::1]:9443", "::1", 9443, "/oauth/token?tenant=a")
        );
        assert!(e.tls.is_some());
        let e = TokenEndpoint::new("http://idp.example", None).expect("valid");
        assert_eq!(
            (e.port, e.target.as_str(), e.tls.is_none()),
            (80, "/", true)
        );
        assert!(TokenEndpoint::new("ftp://idp.example/", None).is_err());
    }
}
