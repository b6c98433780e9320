//! How a remote handler reaches its adapter: the endpoint (address, connect timeout, TLS
//! from `connection.authentication`) and the credentials each call carries.

use std::time::Duration;

use mixer_adapter_api::{AdapterError, ErrorKind};
use mixer_remote::{Authentication, RemoteConnection, TokenSource};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::TlsConnector;
use tonic::Code;
use tonic::service::interceptor::InterceptedService;

use crate::connection::{AdapterConnection, Connector, TransportError};
use crate::tls::{describe, trust_anchors};
use crate::token::Credentials;

/// The channel every call goes through: HTTP/2 (over TLS when configured), plus the token.
pub(crate) type AdapterChannel = InterceptedService<AdapterConnection, Credentials>;

/// An endpoint and the credentials to use on it.
#[derive(Clone, Debug)]
pub(crate) struct Transport {
    connector: Connector,
    credentials: Credentials,
}

impl Transport {
    /// Everything about reaching the adapter that can be checked without it: the address,
    /// the certificates (parsed into rustls's types) and the token file. The error names
    /// the field at fault.
    pub(crate) fn new(
        connection: &RemoteConnection,
        timeout: Duration,
    ) -> Result<Transport, (String, String)> {
        let address = &connection.address;
        let tls = connection.authentication.is_some();
        let uri = match address.split_once("://") {
            None if tls => format!("https://{address}"),
            None => format!("http://{address}"),
            Some(("http", _)) if tls => {
                // tonic would silently speak plaintext to an http:// endpoint.
                return Err((
                    "connection.address".into(),
                    format!(
                        "{address:?} is http:// but connection.authentication asks for TLS; write host:port or https://"
                    ),
                ));
            }
            Some(_) => address.clone(),
        };
        let bad = |why: String| {
            (
                "connection.address".to_string(),
                format!("bad adapter address {address:?}: {why}"),
            )
        };
        let uri: http::Uri = uri
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(e.to_string()))?;
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(bad("no host".into()));
        };
        let https = match scheme.as_str() {
            "http" => false,
            "https" => true,
            other => return Err(bad(format!("scheme {other:?} is neither http nor https"))),
        };
        // An IPv6 host comes bracketed in the URI, but not in a socket address or a name.
        let host = authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        let mut connector = Connector {
            scheme: scheme.clone(),
            authority: authority.clone(),
            host: host.to_string(),
            port,
            connect_timeout: timeout,
            tls: None,
        };
        let Some(auth) = &connection.authentication else {
            if https {
                return Err(bad(
                    "https:// needs connection.authentication (tls or mutual)".into(),
                ));
            }
            return Ok(Transport {
                connector,
                credentials: Credentials::none(),
            });
        };
        let (tls, server_name, credentials) = tls_config(auth, timeout)?;
        let name = server_name.unwrap_or_else(|| host.to_string());
        let name = ServerName::try_from(name.clone()).map_err(|e| {
            (
                "connection.authentication".to_string(),
                format!("{name:?} is not a valid TLS server name: {e}"),
            )
        })?;
        connector.tls = Some((tls, name));
        Ok(Transport {
            connector,
            credentials,
        })
    }

    /// A connection that opens on first use (and again after it breaks).
    pub(crate) fn connect_lazy(&self) -> AdapterConnection {
        AdapterConnection::lazy(self.connector.clone())
    }

    /// `connection`, with the credentials every call carries.
    pub(crate) fn channel(&self, connection: &AdapterConnection) -> AdapterChannel {
        InterceptedService::new(connection.clone(), self.credentials.clone())
    }

    /// A channel connected now.
    /// [`Transport::ready`] (a token to send, when one is needed) then
    /// [`Transport::connect`], both by `deadline` (`timeout` from now, for the message):
    /// what a one-off question to the adapter (Validate, reflection) needs.
    pub(crate) async fn connect_by(
        &self,
        name: &str,
        deadline: tokio::time::Instant,
        timeout: std::time::Duration,
    ) -> Result<AdapterChannel, String> {
        self.ready(name, deadline).await.map_err(|e| e.message)?;
        tokio::time::timeout_at(deadline, self.connect())
            .await
            .map_err(|_| format!("no connection within {timeout:?}"))?
            .map_err(|e| format!("cannot connect: {e}"))
    }

    pub(crate) async fn connect(&self) -> Result<AdapterChannel, String> {
        let connection = AdapterConnection::open(self.connector.clone())
            .await
            .map_err(|e| describe(&e))?;
        Ok(InterceptedService::new(
            connection,
            self.credentials.clone(),
        ))
    }

    /// Waits, until `deadline` at most, for what calls need before they can go: an OAuth
    /// token when the connection uses one. The error is `Unavailable` (the handler's fail
    /// policy applies) and says why no token is there.
    pub(crate) async fn ready(
        &self,
        handler: &str,
        deadline: tokio::time::Instant,
    ) -> Result<(), AdapterError> {
        self.credentials.ready(deadline).await.map_err(|why| {
            AdapterError::transient(
                ErrorKind::Unavailable,
                format!("adapter of handler {handler}: no OAuth token: {why}"),
            )
        })
    }

    /// Where the adapter is (scheme and authority), for logs.
    pub(crate) fn endpoint(&self) -> &Connector {
        &self.connector
    }
}

/// The TLS connector for `auth`, the server name it asks to check, and the token. The
/// error names the field at fault.
fn tls_config(
    auth: &Authentication,
    timeout: Duration,
) -> Result<(TlsConnector, Option<String>, Credentials), (String, String)> {
    let (ca, server_name, identity, credentials) = match auth {
        Authentication::Tls(t) => {
            let credentials = match &t.token {
                None => Credentials::none(),
                Some(TokenSource::File(token)) => Credentials::from_token(token)
                    .map_err(|m| ("connection.authentication.tls.tokenPath".to_string(), m))?,
                Some(TokenSource::OAuth(oauth)) => {
                    Credentials::from_oauth(oauth, t.ca_certificates.as_ref(), timeout)
                        .map_err(|m| ("connection.authentication.tls.oauth".to_string(), m))?
                }
            };
            let ca = (
                t.ca_certificates.as_ref(),
                "connection.authentication.tls.caCertificates",
            );
            (ca, &t.server_name, None, credentials)
        }
        Authentication::Mutual(m) => {
            let ca = (
                m.ca_certificates.as_ref(),
                "connection.authentication.mutual.caCertificates",
            );
            (ca, &m.server_name, Some(m), Credentials::none())
        }
    };
    let mut roots = RootCertStore::empty();
    roots.extend(trust_anchors(ca.0).map_err(|m| (ca.1.to_string(), m))?);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ("connection.authentication".to_string(), e.to_string()))?
        .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(m) => {
            let field = |f: &str| format!("connection.authentication.mutual.{f}");
            let certs = CertificateDer::pem_slice_iter(&m.client_certificate.pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| {
                    (
                        field("clientCertificate"),
                        format!("{}: {e}", m.client_certificate.path.display()),
                    )
                })?;
            if certs.is_empty() {
                return Err((
                    field("clientCertificate"),
                    format!(
                        "{}: no certificate in the file",
                        m.client_certificate.path.display()
                    ),
                ));
            }
            let key = PrivateKeyDer::from_pem_slice(&m.private_key.pem).map_err(|e| {
                (
                    field("privateKey"),
                    format!("{}: {e}", m.private_key.path.display()),
                )
            })?;
            // rustls refuses a key that does not match the certificate here.
            builder.with_client_auth_cert(certs, key).map_err(|e| {
                (
                    field("privateKey"),
                    format!("the key does not fit the client certificate: {e}"),
                )
            })?
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok((
        TlsConnector::from(Arc::new(config)),
        server_name.clone(),
        credentials,
    ))
}

/// A gRPC status from the adapter (or the transport) as an adapter error.
pub(crate) fn map_status(s: &tonic::Status) -> AdapterError {
    let message = format!("adapter answered {:?}: {}", s.code(), s.message());
    match s.code() {
        // tonic's own client-side deadline (the `grpc-timeout` we set) ends the call so.
        Code::Cancelled if s.message().contains("Timeout expired") => {
            AdapterError::transient(ErrorKind::Timeout, message)
        }
        Code::Unavailable | Code::Cancelled | Code::Aborted => {
            AdapterError::transient(ErrorKind::Unavailable, message)
        }
        Code::DeadlineExceeded => AdapterError::transient(ErrorKind::Timeout, message),
        Code::ResourceExhausted => AdapterError::transient(ErrorKind::Overloaded, message),
        Code::Unimplemented | Code::InvalidArgument | Code::OutOfRange => {
            AdapterError::permanent(ErrorKind::InvalidInstance, message)
        }
        Code::Internal | Code::Unknown | Code::DataLoss
            if s.message().contains("decode") || s.message().contains("protocol") =>
        {
            AdapterError::permanent(ErrorKind::InvalidResponse, message)
        }
        _ => AdapterError::permanent(ErrorKind::Internal, message),
    }
}

/// The error of a failed call, naming the handler. A status that tonic made from a
/// transport failure (refused connection, TLS handshake, dropped HTTP/2 connection) is
/// `Unavailable` whatever its code, because that is what the fail policy should see; its
/// causes are spelled out, since the status message alone often says only "transport error".
pub(crate) fn call_error(handler: &str, status: &tonic::Status) -> AdapterError {
    let mapped = map_status(status);
    let causes = causes(status);
    if mapped.kind != ErrorKind::Timeout && from_transport(status) {
        let hint = hint(&causes);
        return AdapterError::transient(
            ErrorKind::Unavailable,
            format!("cannot reach the adapter of handler {handler}: {causes}{hint}"),
        );
    }
    let message = if causes.is_empty() || mapped.message.contains(&causes) {
        mapped.message
    } else {
        format!("{}: {causes}", mapped.message)
    };
    AdapterError {
        message: format!("adapter of handler {handler}: {message}"),
        ..mapped
    }
}

/// The status's source chain, joined (tonic keeps transport details there).
pub(crate) fn causes(status: &tonic::Status) -> String {
    match std::error::Error::source(status) {
        Some(s) => describe(s),
        None => String::new(),
    }
}

/// Whether the call failed on a connection found broken before the request was written
/// ([`TransportError::unsent_on_a_broken_connection`]): the adapter cannot have acted on it.
pub(crate) fn unsent(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(s) = source {
        if let Some(t) = s.downcast_ref::<TransportError>() {
            return t.unsent_on_a_broken_connection();
        }
        source = s.source();
    }
    false
}

fn from_transport(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(s) = source {
        if s.is::<TransportError>() || s.is::<std::io::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// What to check, for the TLS failures whose rustls names are terse.
fn hint(causes: &str) -> &'static str {
    if causes.contains("UnknownIssuer") {
        " (the adapter's certificate is signed by none of caCertificates nor a system CA)"
    } else if causes.contains("CertificateRequired") {
        " (the adapter wants a client certificate: use authentication.mutual)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transport(address: &str) -> Result<Transport, (String, String)> {
        let connection = RemoteConnection {
            address: address.into(),
            timeout: None,
            authentication: None,
        };
        Transport::new(&connection, Duration::from_secs(1))
    }

    fn target(address: &str) -> (String, u16, String) {
        let c = transport(address).expect("valid address").connector;
        (c.host, c.port, format!("{}://{}", c.scheme, c.authority))
    }

    #[test]
    fn host_and_port_come_from_the_address_with_or_without_a_scheme() {
        assert_eq!(
            target("127.0.0.1:9070"),
            ("127.0.0.1".into(), 9070, "http://127.0.0.1:9070".into())
        );
        assert_eq!(
            target("adapter.istio-system:8080"),
            (
                "adapter.istio-system".into(),
                8080,
                "http://adapter.istio-system:8080".into()
            )
        );
        // The socket address and the TLS name of an IPv6 host have no brackets.
        assert_eq!(
            target("[::1]:9070"),
            ("::1".into(), 9070, "http://[::1]:9070".into())
        );
        assert_eq!(target("http://adapter").1, 80);
    }

    #[test]
    fn addresses_that_cannot_work_are_refused_with_the_field() {
        for bad in ["https://adapter:443", "ftp://adapter:21", "not an address"] {
            let (field, message) = transport(bad).expect_err(bad);
            assert_eq!(field, "connection.address", "{bad}");
            assert!(message.contains(bad), "{bad}: {message}");
        }
    }
}
