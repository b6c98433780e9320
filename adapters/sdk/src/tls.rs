//! Serving over TLS: the adapter's certificate and key, and for mutual TLS the CA that
//! signed the mixer's client certificate. The mixer side is the handler's
//! `connection.authentication` (`tls` or `mutual`).

use std::path::Path;

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// TLS settings of an adapter's server, given to [`Server::tls`](crate::Server::tls).
///
/// ```no_run
/// # use mixer_adapter_sdk::ServerTls;
/// # fn main() -> std::io::Result<()> {
/// // `tls` on the mixer side: the adapter proves itself, any client may connect.
/// let tls = ServerTls::from_files("/etc/adapter/cert.pem", "/etc/adapter/key.pem")?;
/// // `mutual`: only clients with a certificate signed by this CA get through.
/// let mtls = tls.clone().client_ca_file("/etc/adapter/mixer-ca.pem")?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ServerTls {
    certificate: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl ServerTls {
    /// From PEM text: the certificate chain (leaf first) and its private key.
    pub fn new(certificate_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> ServerTls {
        ServerTls {
            certificate: certificate_pem.into(),
            key: key_pem.into(),
            client_ca: None,
        }
    }

    /// From PEM files; an unreadable file is an error that names it.
    pub fn from_files(
        certificate: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> std::io::Result<ServerTls> {
        Ok(ServerTls::new(
            read(certificate.as_ref())?,
            read(key.as_ref())?,
        ))
    }

    /// From the environment, for adapters configured by their deployment:
    /// `ADAPTER_TLS_CERT` and `ADAPTER_TLS_KEY` (files), plus `ADAPTER_TLS_CLIENT_CA` for
    /// mutual TLS. `Ok(None)` when `ADAPTER_TLS_CERT` is not set (serve plaintext).
    pub fn from_env() -> std::io::Result<Option<ServerTls>> {
        let Some(cert) = std::env::var_os("ADAPTER_TLS_CERT") else {
            return Ok(None);
        };
        let key = std::env::var_os("ADAPTER_TLS_KEY").ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "ADAPTER_TLS_CERT is set but ADAPTER_TLS_KEY is not",
            )
        })?;
        let tls = ServerTls::from_files(cert, key)?;
        match std::env::var_os("ADAPTER_TLS_CLIENT_CA") {
            Some(ca) => tls.client_ca_file(ca).map(Some),
            None => Ok(Some(tls)),
        }
    }

    /// Requires a client certificate signed by one of the CAs in `ca_pem` (mutual TLS):
    /// a client without one is refused during the handshake.
    pub fn client_ca(mut self, ca_pem: impl Into<Vec<u8>>) -> ServerTls {
        self.client_ca = Some(ca_pem.into());
        self
    }

    /// [`ServerTls::client_ca`] from a file.
    pub fn client_ca_file(self, ca: impl AsRef<Path>) -> std::io::Result<ServerTls> {
        Ok(self.client_ca(read(ca.as_ref())?))
    }

    /// True when client certificates are required.
    pub fn is_mutual(&self) -> bool {
        self.client_ca.is_some()
    }

    /// The TLS side of the server: the certificate chain and key, ALPN `h2` (gRPC needs
    /// HTTP/2), and under mutual TLS a verifier that refuses clients without a certificate
    /// from the CA. Bad PEM is an error that says which part.
    pub(crate) fn acceptor(&self) -> std::io::Result<TlsAcceptor> {
        let invalid = |what: &str, e: &dyn std::fmt::Display| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{what}: {e}"))
        };
        let chain = CertificateDer::pem_slice_iter(&self.certificate)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid("the adapter's certificate", &e))?;
        if chain.is_empty() {
            return Err(invalid(
                "the adapter's certificate",
                &"no PEM certificate found",
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(&self.key)
            .map_err(|e| invalid("the adapter's private key", &e))?;
        // rustls 0.23.48 deprecates ring's provider (no post-quantum key exchange) without a
        // ring replacement; the SDK stays on ring (no aws-lc build), so an adapter crate whose
        // own lock picks 0.23.48+ would warn on every build without this.
        #[allow(deprecated)]
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid("TLS", &e))?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(ca) {
                    let cert = cert.map_err(|e| invalid("the client CA", &e))?;
                    roots.add(cert).map_err(|e| invalid("the client CA", &e))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                        .build()
                        .map_err(|e| invalid("the client CA", &e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| invalid("the adapter's certificate and key", &e))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    std::fs::read(path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}
