//! Protocol clients: each turns a [`Request`](crate::bags::Request) into its wire form once,
//! up front, and sends it on demand.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use envoy_types::ext_authz::v3::pb::CheckRequest;
use envoy_types::ext_authz::v3::pb::CheckResponse;
use envoy_types::pb::envoy::service::auth::v3::AttributeContext;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{
    HttpRequest, Request as AttrRequest,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use mixer_frontends::ext_authz::socket_peer;
use prost::Message;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use mixer_model::{StringMap, Value};
use mixer_proto::istio::mixer::v1 as mixer_pb;

use crate::bags::Request;
use crate::wire::Wire;

/// A client of one unary method: the connection, the method's URI there, and the framed
/// requests it cycles through.
pub struct Unary {
    wire: Wire,
    uri: http::Uri,
    requests: Arc<Vec<bytes::Bytes>>,
}

impl Unary {
    /// Calls `path` on `wire` with `requests` (see [`crate::wire::frame_all`]).
    pub fn new(wire: Wire, path: &str, requests: Arc<Vec<bytes::Bytes>>) -> Unary {
        Unary {
            uri: wire.uri(path),
            wire,
            requests,
        }
    }

    /// Sends request `i` (modulo the number prepared).
    pub async fn call<Resp: prost::Message + Default>(
        &self,
        i: usize,
    ) -> Result<Resp, crate::wire::Failed> {
        let request = self.requests[i % self.requests.len()].clone();
        self.wire.call(&self.uri, request).await
    }
}

/// What one call came back with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The request was allowed.
    Allowed,
    /// The request was denied (a decision, not a failure).
    Denied,
    /// The call failed: transport error or a gRPC / HTTP error status.
    Error,
}

/// A connection able to send the prepared requests by index.
pub trait Client: Send + 'static {
    /// Sends request `i` (modulo the number prepared).
    fn call(&mut self, i: usize) -> impl std::future::Future<Output = Outcome> + Send;
}

/// ext_authz `CheckRequest`s for the given requests.
pub fn ext_authz_requests(requests: &[Request]) -> Arc<Vec<bytes::Bytes>> {
    let built: Vec<_> = requests
        .iter()
        .map(|r| {
            let headers: HashMap<String, String> = r.headers.iter().cloned().collect();
            CheckRequest {
                attributes: Some(AttributeContext {
                    source: Some(socket_peer(&r.source_ip, 43210, &r.source_principal)),
                    destination: Some(socket_peer(
                        "10.0.0.1",
                        8080,
                        "spiffe://cluster.local/ns/default/sa/api",
                    )),
                    request: Some(AttrRequest {
                        http: Some(HttpRequest {
                            id: r
                                .headers
                                .iter()
                                .find(|h| h.0 == "x-request-id")
                                .map(|h| h.1.clone())
                                .unwrap_or_default(),
                            method: r.method.to_string(),
                            headers,
                            path: r.path.clone(),
                            host: r.host.clone(),
                            scheme: "http".into(),
                            protocol: "HTTP/1.1".into(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            }
        })
        .collect();
    crate::wire::frame_all(&built)
}

/// An ext_authz client over one HTTP/2 connection.
pub struct ExtAuthz(pub Unary);

impl Client for ExtAuthz {
    async fn call(&mut self, i: usize) -> Outcome {
        match self.0.call::<CheckResponse>(i).await {
            Ok(response) => ext_authz_verdict(&response),
            Err(_) => Outcome::Error,
        }
    }
}

fn ext_authz_verdict(response: &CheckResponse) -> Outcome {
    match response.status.as_ref().map(|s| s.code) {
        None | Some(0) => Outcome::Allowed,
        Some(_) => Outcome::Denied,
    }
}

/// The outcome of an encoded ext_authz `CheckResponse`.
pub fn ext_authz_outcome(message: &[u8]) -> Outcome {
    CheckResponse::decode(message).map_or(Outcome::Error, |r| ext_authz_verdict(&r))
}

/// Forward-auth: one keep-alive HTTP/1.1 connection per client.
pub struct ForwardAuth {
    addr: SocketAddr,
    requests: Arc<Vec<Vec<u8>>>,
    conn: Option<BufReader<TcpStream>>,
}

/// Raw HTTP/1.1 requests to `/check` for the given requests.
pub fn forward_auth_requests(requests: &[Request], addr: SocketAddr) -> Arc<Vec<Vec<u8>>> {
    let built: Vec<_> = requests
        .iter()
        .map(|r| {
            let mut text = format!(
                "GET /check HTTP/1.1\r\nHost: {addr}\r\nX-Original-URI: {}\r\nX-Original-Method: {}\r\nX-Forwarded-Host: {}\r\nX-Forwarded-For: {}\r\n",
                r.path, r.method, r.host, r.source_ip
            );
            for (k, v) in r.headers.iter().filter(|(k, _)| !k.starts_with(':')) {
                text.push_str(&format!("{k}: {v}\r\n"));
            }
            text.push_str("\r\n");
            text.into_bytes()
        })
        .collect();
    Arc::new(built)
}

impl ForwardAuth {
    /// A client for `addr` sending `requests`.
    pub fn new(addr: SocketAddr, requests: Arc<Vec<Vec<u8>>>) -> ForwardAuth {
        ForwardAuth {
            addr,
            requests,
            conn: None,
        }
    }

    async fn exchange(&mut self, i: usize) -> std::io::Result<u16> {
        if self.conn.is_none() {
            let stream = TcpStream::connect(self.addr).await?;
            stream.set_nodelay(true)?;
            self.conn = Some(BufReader::new(stream));
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(std::io::Error::other("no connection"));
        };
        conn.get_mut()
            .write_all(&self.requests[i % self.requests.len()])
            .await?;
        let mut line = String::new();
        conn.read_line(&mut line).await?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other("bad status line"))?;
        let mut length = 0usize;
        loop {
            line.clear();
            if conn.read_line(&mut line).await? == 0 {
                return Err(std::io::Error::other("connection closed"));
            }
            if line == "\r\n" {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        conn.read_exact(&mut body).await?;
        Ok(status)
    }
}

impl Client for ForwardAuth {
    async fn call(&mut self, i: usize) -> Outcome {
        match self.exchange(i).await {
            Ok(200) => Outcome::Allowed,
            Ok(401 | 403 | 429) => Outcome::Denied,
            Ok(_) => Outcome::Error,
            Err(_) => {
                self.conn = None;
                Outcome::Error
            }
        }
    }
}

/// Mixer v1 `CheckRequest`s, compressed with the global dictionary as an Istio proxy does.
pub fn mixer_v1_requests(requests: &[Request]) -> Arc<Vec<bytes::Bytes>> {
    let words = mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT;
    let built: Vec<_> = requests
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let url_path = r.path.split('?').next().unwrap_or("/").to_string();
            let attrs: Vec<(&str, Value)> = vec![
                (
                    "request.headers",
                    StringMap::from_pairs(r.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                        .into(),
                ),
                ("request.method", Value::from(r.method)),
                ("request.path", Value::from(r.path.as_str())),
                ("request.url_path", Value::from(url_path)),
                ("request.host", Value::from(r.host.as_str())),
                ("request.scheme", Value::from("http")),
                ("source.ip", Value::from(r.source_ip.as_str())),
                ("source.principal", Value::from(r.source_principal.as_str())),
                ("destination.service.host", Value::from(r.host.as_str())),
                ("destination.port", Value::Int64(8080)),
                ("context.protocol", Value::from("http")),
                ("context.reporter.kind", Value::from("inbound")),
            ];
            mixer_pb::CheckRequest {
                attributes: Some(mixer_frontends::mixer_v1::encode(
                    attrs.iter().map(|(k, v)| (*k, v)),
                    words,
                )),
                global_word_count: words as u32,
                deduplication_id: format!("bench-{i}"),
                ..Default::default()
            }
        })
        .collect();
    crate::wire::frame_all(&built)
}

fn mixer_v1_verdict(response: mixer_pb::CheckResponse) -> Outcome {
    match response.precondition.and_then(|p| p.status).map(|s| s.code) {
        None | Some(0) => Outcome::Allowed,
        Some(_) => Outcome::Denied,
    }
}

/// The outcome of an encoded Mixer v1 `CheckResponse`.
pub fn mixer_v1_outcome(message: &[u8]) -> Outcome {
    mixer_pb::CheckResponse::decode(message).map_or(Outcome::Error, mixer_v1_verdict)
}

/// A Mixer v1 Check client over one HTTP/2 connection.
pub struct MixerV1(pub Unary);

impl Client for MixerV1 {
    async fn call(&mut self, i: usize) -> Outcome {
        match self.0.call::<mixer_pb::CheckResponse>(i).await {
            Ok(response) => mixer_v1_verdict(response),
            Err(_) => Outcome::Error,
        }
    }
}

/// Envoy rate limit requests: one descriptor `tenant=<tenant-i>` each, over `limits` tenants.
pub fn ratelimit_requests(n: usize, limits: usize) -> Arc<Vec<bytes::Bytes>> {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    let built: Vec<_> = (0..n)
        .map(
            |i| envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest {
                domain: "bench".into(),
                descriptors: vec![RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "tenant".into(),
                        value: format!("tenant-{}", i % limits.max(1)),
                    }],
                    ..Default::default()
                }],
                hits_addend: 1,
            },
        )
        .collect();
    crate::wire::frame_all(&built)
}

/// An Envoy rate limit client over one HTTP/2 connection.
pub struct RateLimit(pub Unary);

impl Client for RateLimit {
    async fn call(&mut self, i: usize) -> Outcome {
        match self.0.call::<RateLimitResponse>(i).await {
            Ok(r) => ratelimit_verdict(&r),
            Err(_) => Outcome::Error,
        }
    }
}

fn ratelimit_verdict(response: &RateLimitResponse) -> Outcome {
    // 1 is OK; 2 is OVER_LIMIT.
    if response.overall_code == 1 {
        Outcome::Allowed
    } else {
        Outcome::Denied
    }
}

/// The outcome of an encoded `RateLimitResponse`.
pub fn ratelimit_outcome(message: &[u8]) -> Outcome {
    RateLimitResponse::decode(message).map_or(Outcome::Error, |r| ratelimit_verdict(&r))
}

/// A `ratelimitconfig` document with `limits` descriptors (`tenant=tenant-i`), each allowing
/// far more than a benchmark sends, on memquota or on redisquota at `redis`.
pub fn ratelimit_config(limits: usize, redis: Option<&str>) -> String {
    let backend = match redis {
        Some(addr) => format!(
            "  backend:\n    adapter: redisquota\n    params: {{redisServerUrl: \"{addr}\", connectionPoolSize: 8}}\n"
        ),
        None => String::new(),
    };
    let mut out = format!(
        "apiVersion: config.istio.io/v1alpha2\nkind: ratelimitconfig\nmetadata: {{name: bench, namespace: istio-system}}\nspec:\n  domain: bench\n{backend}  descriptors:\n"
    );
    for i in 0..limits.max(1) {
        out.push_str(&format!(
            "  - key: tenant\n    value: tenant-{i}\n    rate_limit: {{unit: second, requests_per_unit: 1000000}}\n"
        ));
    }
    out
}
