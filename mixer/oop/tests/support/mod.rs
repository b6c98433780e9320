//! A throwaway PKI for the TLS tests, generated with rcgen: a CA, a server certificate for
//! 127.0.0.1 and localhost, a client certificate, and an unrelated CA, written as PEM files
//! into a temporary directory (the config names files, as in production).
#![allow(dead_code)]

pub mod allow;
pub mod recorder;
pub mod token_endpoint;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// The files: `ca.pem`, `server.pem` + `server.key`, `client.pem` + `client.key`,
/// `other-ca.pem` (a CA that signed nothing we serve).
pub struct Pki {
    dir: tempfile::TempDir,
}

fn new_ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA")
}

fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .expect("params");
    params.distinguished_name.push(DnType::CommonName, names[0]);
    params.extended_key_usages = vec![usage];
    let cert = params.signed_by(&key, issuer).expect("signed");
    (cert.pem(), key.serialize_pem())
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = new_ca("mixer test CA");
        let other = new_ca("some other CA");
        let (server, server_key) = leaf(
            &ca,
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client, client_key) = leaf(
            &ca,
            &["mixer.istio-system"],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        for (name, text) in [
            ("ca.pem", ca.pem()),
            ("other-ca.pem", other.pem()),
            ("server.pem", server),
            ("server.key", server_key),
            ("client.pem", client),
            ("client.key", client_key),
        ] {
            std::fs::write(dir.path().join(name), text).expect("write");
        }
        Pki { dir }
    }

    /// The path of one of the files (or of a new one in the same directory).
    pub fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("read")
    }

    pub fn write(&self, name: &str, text: &str) {
        std::fs::write(self.path(name), text).expect("write");
    }
}
