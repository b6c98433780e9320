//! Trust for the TLS clients of this crate (the adapter's HTTP/2 connection and an OAuth
//! token endpoint): the system's CAs and a connection's `caCertificates`; and the wording of
//! errors whose cause is deep in their chain (a handshake refused).

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, TrustAnchor};

use mixer_remote::PemFile;

/// Where system CA bundles live (Debian/Ubuntu, Fedora/RHEL, Alpine/macOS); `SSL_CERT_FILE`
/// comes first. Istio 1.4 trusted the system's CAs as well as `caCertificates`.
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// The system's CAs (unparsable ones skipped, as the system may hold odd ones) and every
/// certificate of `ca` (each must parse: a typo in the mixer's own config is an error).
pub(crate) fn trust_anchors(ca: Option<&PemFile>) -> Result<Vec<TrustAnchor<'static>>, String> {
    let mut roots = RootCertStore::empty();
    if let Some(bundle) = system_bundle() {
        let certs = CertificateDer::pem_slice_iter(&bundle).filter_map(Result::ok);
        roots.add_parsable_certificates(certs);
    }
    if let Some(ca) = ca {
        for (i, cert) in CertificateDer::pem_slice_iter(&ca.pem).enumerate() {
            let cert = cert.map_err(|e| format!("{}: {e}", ca.path.display()))?;
            roots.add(cert).map_err(|e| {
                format!(
                    "{}: certificate {} is not a usable CA certificate: {e}",
                    ca.path.display(),
                    i + 1
                )
            })?;
        }
    }
    Ok(roots.roots)
}

fn system_bundle() -> Option<Vec<u8>> {
    let from_env = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
    from_env
        .into_iter()
        .chain(SYSTEM_BUNDLES.iter().map(std::path::PathBuf::from))
        .find_map(|p| std::fs::read(p).ok())
}

/// A tonic transport error with its causes: the outermost one alone says only "transport
/// error", while the cause says what went wrong (an unknown issuer, a refused certificate).
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}
