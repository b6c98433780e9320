//! The load generator's gRPC client: unary calls whose request messages were encoded and
//! framed once, up front, sent over an HTTP/2 connection of the `h2` crate.
//!
//! The generator shares the machine with the server it measures, so every microsecond it
//! spends per call is taken from the server. With tonic's client over the mixer's adapter
//! connection, each call cloned its prepared message (a map of headers among it), encoded
//! it and went through tonic's streaming codec: at 22k checks/s in open loop the
//! generator's one thread was 97% busy and its own queueing became the measured tail.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use prost::Message;

/// One HTTP/2 connection; clones share it.
#[derive(Clone)]
pub struct Wire {
    send: SendRequest<Bytes>,
    addr: SocketAddr,
}

/// A call that brought no answer message: the connection or stream broke, the server
/// answered without HTTP 200 or with a non-OK gRPC status, or the answer did not decode.
/// The generator only counts these.
#[derive(Debug)]
pub struct Failed;

impl Wire {
    /// Connects to `addr` (plaintext HTTP/2, TCP_NODELAY).
    pub async fn connect(addr: SocketAddr) -> anyhow::Result<Wire> {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        tcp.set_nodelay(true)?;
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .initial_connection_window_size(1 << 20)
            .handshake(tcp)
            .await
            .with_context(|| format!("HTTP/2 handshake with {addr}"))?;
        tokio::spawn(connection);
        Ok(Wire { send, addr })
    }

    /// The URI of `path` (`/package.Service/Method`) on this connection's server.
    pub fn uri(&self, path: &str) -> http::Uri {
        format!("http://{}{path}", self.addr)
            .parse()
            .unwrap_or_else(|_| http::Uri::from_static("http://localhost/"))
    }

    /// Sends one framed request message to `uri` and decodes the one answer message.
    pub async fn call<Resp: Message + Default>(
        &self,
        uri: &http::Uri,
        framed: Bytes,
    ) -> Result<Resp, Failed> {
        let mut request = http::Request::post(uri.clone())
            .body(())
            .map_err(|_| Failed)?;
        let headers = request.headers_mut();
        headers.insert(
            "content-type",
            http::HeaderValue::from_static("application/grpc"),
        );
        headers.insert("te", http::HeaderValue::from_static("trailers"));
        let mut send = self.send.clone().ready().await.map_err(|_| Failed)?;
        let (response, mut stream) = send.send_request(request, false).map_err(|_| Failed)?;
        stream.send_data(framed, true).map_err(|_| Failed)?;
        let response = response.await.map_err(|_| Failed)?;
        if response.status() != http::StatusCode::OK {
            return Err(Failed);
        }
        if let Some(code) = grpc_status(response.headers())
            && code != 0
        {
            return Err(Failed);
        }
        let mut body = response.into_body();
        let mut answer = BytesMut::new();
        while let Some(data) = body.data().await {
            let data = data.map_err(|_| Failed)?;
            let _ = body.flow_control().release_capacity(data.len());
            answer.extend_from_slice(&data);
        }
        let trailers = body.trailers().await.map_err(|_| Failed)?;
        if trailers.as_ref().and_then(grpc_status) != Some(0) {
            return Err(Failed);
        }
        if answer.len() < 5 || answer[0] != 0 {
            return Err(Failed);
        }
        Resp::decode(&answer[5..]).map_err(|_| Failed)
    }
}

fn grpc_status(headers: &http::HeaderMap) -> Option<i32> {
    headers.get("grpc-status")?.to_str().ok()?.parse().ok()
}

/// `messages`, each encoded and framed as gRPC sends it (uncompressed flag, big-endian
/// length, the message).
pub fn frame_all<M: Message>(messages: &[M]) -> Arc<Vec<Bytes>> {
    Arc::new(messages.iter().map(mixer_grpc::framed).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_the_length_and_the_message() {
        let message = prost_types::Duration {
            seconds: 300,
            nanos: 0,
        };
        let framed = frame_all(std::slice::from_ref(&message));
        let frame = &framed[0];
        assert_eq!(frame[0], 0, "uncompressed");
        let len = u32::from_be_bytes([frame[1], frame[2], frame[3], frame[4]]) as usize;
        assert_eq!(len, frame.len() - 5);
        assert_eq!(
            prost_types::Duration::decode(&frame[5..]).expect("decodes"),
            message
        );
    }
}
