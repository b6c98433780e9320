//! TLS and mutual TLS on the gRPC and forward-auth listeners (`--tls-cert`, `--tls-key`,
//! `--tls-client-ca`; README, "TLS on the mixer's listeners").
//!
//! Both listeners share one [`TlsState`]: the served certificate behind a
//! [`ResolvesServerCert`] and the client CA behind a [`ClientCertVerifier`], each an
//! `ArcSwap` that [`crate::tls_reload`] replaces when the files change, so that every new
//! handshake uses what is on disk without rebuilding the listeners' `ServerConfig`s.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

/// The TLS flags of `serve`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// PEM certificate chain (leaf first) the gRPC and forward-auth listeners present; with
    /// `--tls-key` they serve TLS only. Re-read when the file changes.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of `--tls-cert`.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates: with it, the listeners refuse at the handshake every client
    /// without a certificate that chains to one of them (mutual TLS).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
}

impl TlsArgs {
    /// The files to serve with, or `None` for plaintext listeners.
    pub fn files(&self) -> Option<TlsFiles> {
        Some(TlsFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: self.tls_client_ca.clone(),
        })
    }
}

/// The files TLS is served from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// `--tls-cert`.
    pub cert: PathBuf,
    /// `--tls-key`.
    pub key: PathBuf,
    /// `--tls-client-ca`.
    pub client_ca: Option<PathBuf>,
}

/// Why the TLS files cannot be served: always names the flag and the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{flag} {}: {source}", path.display())]
    Read {
        /// The flag naming the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file holds nothing usable.
    #[error("{flag} {}: {reason}", path.display())]
    Content {
        /// The flag naming the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// The bytes of the TLS files as last read: what a reload compares, and what a load parses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileContents {
    cert: Result<Vec<u8>, String>,
    key: Result<Vec<u8>, String>,
    client_ca: Option<Result<Vec<u8>, String>>,
}

impl FileContents {
    /// Reads the files (through symlinks, so a Kubernetes `..data` swap is read as a change
    /// of content); a file that cannot be read is kept as its error, to compare and report.
    pub fn read(files: &TlsFiles) -> FileContents {
        let read = |path: &Path| std::fs::read(path).map_err(|e| e.to_string());
        FileContents {
            cert: read(&files.cert),
            key: read(&files.key),
            client_ca: files.client_ca.as_deref().map(read),
        }
    }
}

/// A certificate and client CA parsed and checked, ready to serve.
pub struct Material {
    /// The chain and key the listeners present.
    pub certified: Arc<CertifiedKey>,
    /// The client CA's verifier, when mutual TLS is on.
    pub verifier: Option<Arc<dyn ClientCertVerifier>>,
    /// The leaf certificate's notAfter, in seconds since the epoch.
    pub not_after: i64,
}

/// The crypto of every TLS connection the mixer makes or takes: ring, as tonic's and the
/// out-of-process adapter client's.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Parses `contents` (read from `files`): a certificate chain, its matching private key and,
/// with mutual TLS, at least one CA certificate.
pub fn load(files: &TlsFiles, contents: &FileContents) -> Result<Material, TlsError> {
    let provider = provider();
    let bytes = |flag: &'static str, path: &Path, read: &Result<Vec<u8>, String>| {
        read.clone().map_err(|e| TlsError::Read {
            flag,
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        })
    };
    let content = |flag: &'static str, path: &Path, reason: String| TlsError::Content {
        flag,
        path: path.to_path_buf(),
        reason,
    };
    let cert_pem = bytes("--tls-cert", &files.cert, &contents.cert)?;
    let chain =
        certificates(&cert_pem).map_err(|reason| content("--tls-cert", &files.cert, reason))?;
    let key_pem = bytes("--tls-key", &files.key, &contents.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        content(
            "--tls-key",
            &files.key,
            format!("no PEM private key (PKCS#8, PKCS#1 or SEC1) in the file: {e}"),
        )
    })?;
    let not_after =
        leaf_not_after(&chain[0]).map_err(|reason| content("--tls-cert", &files.cert, reason))?;
    let certified = CertifiedKey::from_der(chain, key, &provider).map_err(|e| {
        let reason = match e {
            rustls::Error::InconsistentKeys(_) => format!(
                "the key does not match the certificate of --tls-cert {}",
                files.cert.display()
            ),
            e => format!("the key cannot be used: {e}"),
        };
        content("--tls-key", &files.key, reason)
    })?;
    let verifier = match (&files.client_ca, &contents.client_ca) {
        (Some(path), Some(read)) => {
            let pem = bytes("--tls-client-ca", path, read)?;
            let reason = |reason| content("--tls-client-ca", path, reason);
            let mut roots = RootCertStore::empty();
            for (i, cert) in certificates(&pem).map_err(reason)?.into_iter().enumerate() {
                roots.add(cert).map_err(|e| {
                    content(
                        "--tls-client-ca",
                        path,
                        format!("certificate {} is not a usable CA: {e}", i + 1),
                    )
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                .build()
                .map_err(|e| content("--tls-client-ca", path, e.to_string()))?;
            Some(verifier)
        }
        _ => None,
    };
    Ok(Material {
        certified: Arc::new(certified),
        verifier,
        not_after,
    })
}

/// The PEM `CERTIFICATE` blocks of a file, at least one.
fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the PEM does not parse: {e}"))?;
    if chain.is_empty() {
        return Err("no certificate in the file (PEM CERTIFICATE blocks expected)".into());
    }
    Ok(chain)
}

fn leaf_not_after(leaf: &CertificateDer<'_>) -> Result<i64, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| format!("the first certificate does not parse: {e}"))?;
    Ok(cert.validity().not_after.timestamp())
}

/// What the handshake verified about a client: mutual TLS and the first URI SAN of its
/// certificate.
pub fn peer(connection: &rustls::ServerConnection) -> mixer_frontends::forward_auth::TlsPeer {
    let Some(leaf) = connection.peer_certificates().and_then(|c| c.first()) else {
        return mixer_frontends::forward_auth::TlsPeer::default();
    };
    mixer_frontends::forward_auth::TlsPeer {
        mtls: true,
        principal: uri_san(leaf).map(Arc::from),
    }
}

/// The first URI subject alternative name of `cert` (a SPIFFE ID, in a mesh).
pub fn uri_san(cert: &CertificateDer<'_>) -> Option<String> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(cert).ok()?;
    let san = cert.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|name| match name {
        GeneralName::URI(uri) => Some((*uri).to_string()),
        _ => None,
    })
}

/// The certificate and client CA every new handshake of both listeners uses.
pub struct TlsState {
    certified: Arc<ArcSwap<CertifiedKey>>,
    verifier: Option<Arc<ArcSwap<Arc<dyn ClientCertVerifier>>>>,
}

impl TlsState {
    /// Serves `material` until [`TlsState::replace`]d.
    pub fn new(material: &Material) -> TlsState {
        TlsState {
            certified: Arc::new(ArcSwap::new(material.certified.clone())),
            verifier: material
                .verifier
                .clone()
                .map(|v| Arc::new(ArcSwap::from_pointee(v))),
        }
    }

    /// New handshakes use `material` from now on; connections open keep theirs.
    pub fn replace(&self, material: &Material) {
        self.certified.store(material.certified.clone());
        if let (Some(current), Some(new)) = (&self.verifier, &material.verifier) {
            current.store(Arc::new(new.clone()));
        }
    }

    /// The certificate new handshakes get.
    #[cfg(test)]
    pub(crate) fn served(&self) -> Arc<CertifiedKey> {
        self.certified.load_full()
    }

    /// Whether clients must present a certificate.
    pub fn mutual(&self) -> bool {
        self.verifier.is_some()
    }

    /// A `ServerConfig` offering `alpn` (most preferred first) over the shared certificate
    /// and client CA.
    /// TLS 1.2 stays on beside 1.3: Envoy's upstream TLS tops out at 1.2 unless told
    /// otherwise.
    pub fn server_config(
        &self,
        alpn: &[&[u8]],
    ) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
        let builder = match &self.verifier {
            Some(verifier) => builder.with_client_cert_verifier(Arc::new(Reloaded {
                current: verifier.clone(),
            })),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(Arc::new(Resolver {
            current: self.certified.clone(),
        }));
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        // Every connection is a full handshake against the files as they are now: a resumed
        // session would skip the client certificate's check against a rotated CA.
        config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
        Ok(Arc::new(config))
    }
}

/// The served certificate, as last loaded.
#[derive(Debug)]
struct Resolver {
    current: Arc<ArcSwap<CertifiedKey>>,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// The client CA's verifier, as last loaded.
struct Reloaded {
    current: Arc<ArcSwap<Arc<dyn ClientCertVerifier>>>,
}

impl std::fmt::Debug for Reloaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reloaded client CA verifier")
    }
}

impl ClientCertVerifier for Reloaded {
    fn client_auth_mandatory(&self) -> bool {
        true
    }

    // No hints: the CA can change under a handshake, and the hints would be borrowed from
    // it. An empty list asks the client for whatever certificate it has (RFC 8446 4.2.4),
    // which is what proxies configured with one certificate send anyway.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.current
            .load()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current
            .load()
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current
            .load()
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current.load().supported_verify_schemes()
    }
}

/// Certificates made for tests: a CA, and leaves it signs.
#[cfg(test)]
pub(crate) mod test_pki {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose,
        SanType,
    };

    /// A CA that signs leaves.
    pub struct Ca(CertifiedIssuer<'static, KeyPair>);

    impl Ca {
        pub fn new(name: &str) -> Ca {
            let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            let key = KeyPair::generate().expect("key");
            Ca(CertifiedIssuer::self_signed(params, key).expect("CA"))
        }

        pub fn pem(&self) -> String {
            self.0.as_ref().pem()
        }

        /// A leaf for `localhost` and 127.0.0.1, with `uri` as a URI SAN: (cert PEM, key PEM).
        pub fn leaf(&self, uri: Option<&str>) -> (String, String) {
            let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
            params
                .subject_alt_names
                .push(SanType::IpAddress([127, 0, 0, 1].into()));
            if let Some(uri) = uri {
                params
                    .subject_alt_names
                    .push(SanType::URI(uri.try_into().expect("IA5 URI")));
            }
            let key = KeyPair::generate().expect("key");
            let cert = params.signed_by(&key, &*self.0).expect("sign");
            (cert.pem(), key.serialize_pem())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_pki::Ca;
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn a_certificate_and_ca_load_and_the_spiffe_id_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("mesh CA");
        let spiffe = "spiffe://cluster.local/ns/istio-system/sa/mixer";
        let (cert, key) = ca.leaf(Some(spiffe));
        let files = TlsFiles {
            cert: write(dir.path(), "tls.crt", &cert),
            key: write(dir.path(), "tls.key", &key),
            client_ca: Some(write(dir.path(), "ca.crt", &ca.pem())),
        };
        let material = load(&files, &FileContents::read(&files)).expect("load");
        assert!(material.verifier.is_some());
        assert!(material.not_after > 0);
        let leaf = material.certified.end_entity_cert().expect("leaf");
        assert_eq!(uri_san(leaf).as_deref(), Some(spiffe));
        let (no_uri, _) = ca.leaf(None);
        let der = CertificateDer::from_pem_slice(no_uri.as_bytes()).expect("pem");
        assert_eq!(uri_san(&der), None);
    }

    #[test]
    fn each_bad_file_is_refused_naming_its_flag_and_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::new("mesh CA");
        let (cert, key) = ca.leaf(None);
        let (_, other_key) = ca.leaf(None);
        let good = TlsFiles {
            cert: write(dir.path(), "tls.crt", &cert),
            key: write(dir.path(), "tls.key", &key),
            client_ca: Some(write(dir.path(), "ca.crt", &ca.pem())),
        };
        let error = |files: &TlsFiles| match load(files, &FileContents::read(files)) {
            Ok(_) => panic!("{files:?} loaded"),
            Err(e) => e.to_string(),
        };
        let missing = TlsFiles {
            cert: dir.path().join("absent.crt"),
            ..good.clone()
        };
        let text = error(&missing);
        assert!(
            text.starts_with(&format!("--tls-cert {}: ", missing.cert.display())),
            "{text}"
        );
        let garbage = TlsFiles {
            cert: write(dir.path(), "garbage.crt", "not a certificate\n"),
            ..good.clone()
        };
        assert!(error(&garbage).contains("no certificate in the file"));
        let mismatched = TlsFiles {
            key: write(dir.path(), "other.key", &other_key),
            ..good.clone()
        };
        let text = error(&mismatched);
        assert!(
            text.starts_with("--tls-key ") && text.contains("does not match the certificate"),
            "{text}"
        );
        let no_key = TlsFiles {
            key: write(dir.path(), "cert-as-key.pem", &cert),
            ..good.clone()
        };
        assert!(error(&no_key).contains("no PEM private key"));
        let empty_ca = TlsFiles {
            client_ca: Some(write(dir.path(), "empty-ca.crt", "")),
            ..good.clone()
        };
        assert!(error(&empty_ca).starts_with("--tls-client-ca "));
    }
}
