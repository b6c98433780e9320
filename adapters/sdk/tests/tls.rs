//! `Server::tls`: the adapter serves over TLS, and with a client CA it refuses a client
//! that has no certificate. Real handshakes on 127.0.0.1 with rcgen certificates.

mod support;

use mixer_adapter_sdk::api::{AdapterInfo, Stability};
use mixer_adapter_sdk::model::Template;
use mixer_adapter_sdk::proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_adapter_sdk::{Server, ServerTls};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use support::{AllowAll, CheckAdapter};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// Serves checknothing, allowing everything; takes no params.
static NOTHING: AdapterInfo = AdapterInfo {
    name: "nothing",
    description: "allows everything",
    templates: &[Template::CheckNothing],
    cacheable: true,
    stability: Stability::Alpha,
};

struct Pki {
    ca: String,
    server: (String, String),
    client: (String, String),
}

fn pki() -> Pki {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA");
    let leaf = |name: &str, usage| {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(vec![name.to_string()]).expect("params");
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &ca).expect("signed");
        (cert.pem(), key.serialize_pem())
    };
    Pki {
        server: leaf("127.0.0.1", ExtendedKeyUsagePurpose::ServerAuth),
        client: leaf("mixer", ExtendedKeyUsagePurpose::ClientAuth),
        ca: ca.pem(),
    }
}

async fn serve(tls: ServerTls) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = Server::new(CheckAdapter::new(&NOTHING, AllowAll)).tls(tls);
    tokio::spawn(server.serve_with_shutdown(listener, std::future::pending()));
    format!("https://{addr}")
}

/// Calls `Validate` over TLS trusting `ca`, presenting `identity` if any.
async fn validate(
    uri: String,
    ca: &str,
    identity: Option<&(String, String)>,
) -> Result<(), String> {
    let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let endpoint = Endpoint::from_shared(uri)
        .expect("uri")
        .tls_config(tls)
        .expect("tls");
    let channel = endpoint.connect().await.map_err(|e| format!("{e:?}"))?;
    let mut client =
        model::infrastructure_backend_client::InfrastructureBackendClient::new(channel);
    client
        .validate(model::ValidateRequest::default())
        .await
        .map(|_| ())
        .map_err(|s| format!("{s:?}"))
}

#[tokio::test]
async fn tls_serves_clients_that_trust_its_ca() {
    let pki = pki();
    let uri = serve(ServerTls::new(pki.server.0.clone(), pki.server.1.clone())).await;
    validate(uri, &pki.ca, None).await.expect("TLS call");
}

#[tokio::test]
async fn mutual_tls_needs_a_client_certificate_from_the_ca() {
    let pki = pki();
    let tls = ServerTls::new(pki.server.0.clone(), pki.server.1.clone()).client_ca(pki.ca.clone());
    assert!(tls.is_mutual());
    let uri = serve(tls).await;
    validate(uri.clone(), &pki.ca, Some(&pki.client))
        .await
        .expect("mutual TLS call");
    let refused = validate(uri, &pki.ca, None)
        .await
        .expect_err("no client cert");
    assert!(
        refused.contains("CertificateRequired") || refused.contains("connection"),
        "{refused}"
    );
}

#[tokio::test]
async fn unreadable_files_name_the_path() {
    let err = ServerTls::from_files("/nonexistent/cert.pem", "/nonexistent/key.pem")
        .expect_err("missing");
    assert!(err.to_string().contains("/nonexistent/cert.pem"), "{err}");
}
