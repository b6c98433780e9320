//! TLS and mutual TLS on the gRPC and forward-auth listeners (`--tls-cert`, `--tls-key`,
//! `--tls-client-ca`), through the real binary and real clients: tonic's client generated
//! from Envoy's ext_authz definitions, Python's grpcio (gRPC core), curl, nginx calling the
//! mixer with `proxy_ssl_certificate`, and rustls for what the others do not show (which
//! certificate a handshake got). Certificates are made here with rcgen.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest};
use mixer_tests::nginx::Nginx;
use mixer_tests::poll::until;
use mixer_tests::{Mixer, free_addr, installed_tool};
use prost::Message;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

#[path = "support/authz.rs"]
mod authz;
#[path = "support/python.rs"]
mod python;

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

/// A certificate authority made for one test.
struct Ca(CertifiedIssuer<'static, KeyPair>);

/// A certificate and its key, in PEM.
#[derive(Clone)]
struct Leaf {
    cert: String,
    key: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Ca(CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA"))
    }

    fn pem(&self) -> String {
        self.0.as_ref().pem()
    }

    /// A certificate for `localhost` and 127.0.0.1 (a server's), with `spiffe` as its URI SAN
    /// when given (a workload's, as Istio's CA issues them).
    fn leaf(&self, spiffe: Option<&str>) -> Leaf {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        params
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        if let Some(uri) = spiffe {
            params
                .subject_alt_names
                .push(SanType::URI(uri.try_into().expect("IA5 URI")));
        }
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &*self.0).expect("sign");
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

const NGINX_ID: &str = "spiffe://cluster.local/ns/edge/sa/nginx";
const OTHER_ID: &str = "spiffe://cluster.local/ns/default/sa/other";

/// Forward-auth allows only callers presenting nginx's SPIFFE ID over mutual TLS; ext_authz
/// checks (marked `x-via: envoy`) are decided on the source the proxy describes (Envoy's
/// `source.principal`), which must be productpage's.
const CONFIG: &str = r#"
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: deny, namespace: istio-system}
spec:
  compiledAdapter: denier
  params:
    status: {code: PERMISSION_DENIED, message: not an allowed principal}
    validDuration: 1s
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {name: request, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata:
  name: forward-auth-callers
  namespace: istio-system
  annotations: {policy.istio.io/lang: CEL}
spec:
  match: >-
    !("x-via" in request.headers) && !(connection.mtls && has(source.principal) &&
    source.principal == "spiffe://cluster.local/ns/edge/sa/nginx")
  matchErrorPolicy: DENY
  actions:
  - {handler: deny, instances: [request]}
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata:
  name: proxied-sources
  namespace: istio-system
  annotations: {policy.istio.io/lang: CEL}
spec:
  match: >-
    "x-via" in request.headers && !(connection.mtls && has(source.principal) &&
    source.principal == "spiffe://cluster.local/ns/default/sa/productpage")
  matchErrorPolicy: DENY
  actions:
  - {handler: deny, instances: [request]}
"#;

/// The files of one test: config, certificates, keys.
struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Files {
        Files {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

fn start(files: &Files, server: &Leaf, client_ca: Option<&Ca>, extra: &[&str]) -> Mixer {
    files.write("config.yaml", CONFIG);
    files.write("tls.crt", &server.cert);
    files.write("tls.key", &server.key);
    let (config, cert, key) = (
        files.path("config.yaml"),
        files.path("tls.crt"),
        files.path("tls.key"),
    );
    let mut args = vec!["--config", &config, "--tls-cert", &cert, "--tls-key", &key];
    let ca_path;
    if let Some(ca) = client_ca {
        files.write("client-ca.crt", &ca.pem());
        ca_path = files.path("client-ca.crt");
        args.extend(["--tls-client-ca", &ca_path]);
    }
    args.extend_from_slice(extra);
    let mixer = Mixer::start(binary(), &args);
    mixer.wait_ready(Duration::from_secs(20));
    mixer
}

/// An ext_authz request whose source is `principal` (as Envoy sends a downstream's verified
/// identity), marked as coming through Envoy.
fn request_from(principal: &str) -> CheckRequest {
    let mut request = authz::authz_request(&[("x-via", "envoy")]);
    if let Some(attributes) = request.attributes.as_mut() {
        *attributes = AttributeContext {
            source: Some(mixer_frontends::ext_authz::socket_peer(
                "10.0.0.7", 40000, principal,
            )),
            ..attributes.clone()
        };
    }
    request
}

async fn tonic_client(
    mixer: &Mixer,
    ca: &Ca,
    identity: Option<&Leaf>,
) -> Result<AuthorizationClient<tonic::transport::Channel>, tonic::transport::Error> {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca.pem()))
        .domain_name("localhost");
    if let Some(leaf) = identity {
        tls = tls.identity(Identity::from_pem(&leaf.cert, &leaf.key));
    }
    let channel = Endpoint::from_shared(format!("https://{}", mixer.grpc))?
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    Ok(AuthorizationClient::new(channel))
}

/// The code of an ext_authz answer, or the error.
async fn check(
    client: &mut AuthorizationClient<tonic::transport::Channel>,
    request: CheckRequest,
) -> Result<i32, String> {
    let answer = client
        .check(request)
        .await
        .map_err(|s| format!("{s:?}"))?
        .into_inner();
    Ok(answer.status.map_or(-1, |s| s.code))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_mutual_tls_admits_only_certificates_from_the_client_ca() {
    let files = Files::new();
    let (mesh, other) = (Ca::new("mesh CA"), Ca::new("another CA"));
    let server = mesh.leaf(Some("spiffe://cluster.local/ns/istio-system/sa/mixer"));
    let envoy = mesh.leaf(Some("spiffe://cluster.local/ns/default/sa/envoy"));
    let stranger = other.leaf(Some("spiffe://cluster.local/ns/default/sa/envoy"));
    let mixer = tokio::task::block_in_place(|| start(&files, &server, Some(&mesh), &[]));

    // A client with a certificate from the client CA: checks are answered, and decided on
    // the source Envoy describes, not on the caller's own certificate.
    let mut client = tonic_client(&mixer, &mesh, Some(&envoy))
        .await
        .expect("connect with a certificate from the client CA");
    let productpage = "spiffe://cluster.local/ns/default/sa/productpage";
    assert_eq!(check(&mut client, request_from(productpage)).await, Ok(0));
    assert_eq!(check(&mut client, request_from(OTHER_ID)).await, Ok(7));
    // The caller (Envoy) is verified, but its identity does not stand in for the source's.
    assert_eq!(check(&mut client, request_from("")).await, Ok(7));

    // No client certificate, or one from another CA: refused at the handshake. With TLS 1.3
    // the client learns it at its first call.
    for (who, identity) in [("no certificate", None), ("another CA", Some(&stranger))] {
        let refused = match tonic_client(&mixer, &mesh, identity).await {
            Err(_) => true,
            Ok(mut client) => check(&mut client, request_from(productpage)).await.is_err(),
        };
        assert!(refused, "a client with {who} was served");
    }
    // Plaintext on the TLS port is not gRPC's either.
    let plaintext = AuthorizationClient::connect(format!("http://{}", mixer.grpc)).await;
    let refused = match plaintext {
        Err(_) => true,
        Ok(mut client) => check(&mut client, request_from(productpage)).await.is_err(),
    };
    assert!(refused, "a plaintext client was served on the TLS port");
    tokio::task::block_in_place(|| {
        let series = r#"mixer_connections_refused_total{listener="grpc",reason="tls_handshake"}"#;
        eventually(&mixer, series, |n| n >= 3.0);
    });
    // The first client's connection is still good.
    assert_eq!(check(&mut client, request_from(productpage)).await, Ok(0));
}

/// Calls ext_authz with `request` hex-encoded and prints `ok CODE` or `error CODE_NAME`.
const PYTHON_CLIENT: &str = r#"
import sys, grpc
ca, cert, key = (open(p, "rb").read() if p != "-" else None for p in sys.argv[2:5])
credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
channel = grpc.secure_channel(sys.argv[1], credentials)
check = channel.unary_unary("/envoy.service.auth.v3.Authorization/Check")
try:
    print("ok", check(bytes.fromhex(sys.argv[5]), timeout=10).hex())
except grpc.RpcError as e:
    print("error", e.code().name)
"#;

#[test]
fn python_grpcio_calls_over_mutual_tls_with_ssl_channel_credentials() {
    let Some(python) = python::python_or_skip() else {
        return;
    };
    let files = Files::new();
    let (mesh, other) = (Ca::new("mesh CA"), Ca::new("another CA"));
    let server = mesh.leaf(None);
    let envoy = mesh.leaf(Some("spiffe://cluster.local/ns/default/sa/envoy"));
    let stranger = other.leaf(None);
    let mixer = start(&files, &server, Some(&mesh), &[]);
    files.write("ca.crt", &mesh.pem());
    files.write("envoy.crt", &envoy.cert);
    files.write("envoy.key", &envoy.key);
    files.write("stranger.crt", &stranger.cert);
    files.write("stranger.key", &stranger.key);
    let call = |cert: &str, key: &str, principal: &str| {
        let hex: String = request_from(principal)
            .encode_to_vec()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let out = Command::new(&python)
            .args(["-c", PYTHON_CLIENT, &mixer.grpc.to_string()])
            .args([files.path("ca.crt"), cert.to_string(), key.to_string(), hex])
            .output()
            .expect("run python");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let decoded = |line: String| {
        let hex = line.strip_prefix("ok ").unwrap_or_else(|| panic!("{line}"));
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
        envoy_types::ext_authz::v3::pb::CheckResponse::decode(bytes.as_slice())
            .expect("a CheckResponse")
            .status
            .map_or(-1, |s| s.code)
    };
    let (cert, key) = (files.path("envoy.crt"), files.path("envoy.key"));
    let productpage = "spiffe://cluster.local/ns/default/sa/productpage";
    assert_eq!(decoded(call(&cert, &key, productpage)), 0);
    assert_eq!(decoded(call(&cert, &key, OTHER_ID)), 7);
    // gRPC core reports a refused handshake as UNAVAILABLE.
    assert_eq!(call("-", "-", productpage), "error UNAVAILABLE");
    let (cert, key) = (files.path("stranger.crt"), files.path("stranger.key"));
    assert_eq!(call(&cert, &key, productpage), "error UNAVAILABLE");
}

/// Waits (2 s at most) for `series` to satisfy `ok`: a connection is counted as it is
/// dropped, a moment after its client has seen it end.
fn eventually(mixer: &Mixer, series: &str, ok: impl Fn(f64) -> bool) {
    until(
        Duration::from_secs(2),
        Duration::from_millis(10),
        || match mixer.metric(series) {
            Some(value) if ok(value) => Ok(()),
            value => Err(format!("{series} is {value:?}")),
        },
    );
}

/// `curl` to forward-auth over TLS: (HTTP status, HTTP version), or curl's exit code when
/// it got no answer.
fn curl(curl: &Path, files: &Files, mixer: &Mixer, client: Option<&str>, http2: bool) -> String {
    let mut command = Command::new(curl);
    command
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{http_version}",
        ])
        .args(["--cacert", &files.path("ca.crt")])
        .arg(if http2 { "--http2" } else { "--http1.1" });
    if let Some(name) = client {
        command
            .args(["--cert", &files.path(&format!("{name}.crt"))])
            .args(["--key", &files.path(&format!("{name}.key"))]);
    }
    let out = command
        .arg(format!("https://localhost:{}/check", mixer.http.port()))
        .args([
            "--resolve",
            &format!("localhost:{}:127.0.0.1", mixer.http.port()),
        ])
        .output()
        .expect("run curl");
    match out.status.code() {
        Some(0) => String::from_utf8_lossy(&out.stdout).to_string(),
        code => format!("exit {code:?}"),
    }
}

#[test]
fn forward_auth_over_tls_gives_policies_the_callers_spiffe_id() {
    let Some(curl_path) = installed_tool(
        &["/usr/bin/curl", "/usr/local/bin/curl"],
        "apt-get install -y curl",
    ) else {
        return;
    };
    let files = Files::new();
    let (mesh, other) = (Ca::new("mesh CA"), Ca::new("another CA"));
    let server = mesh.leaf(None);
    let mixer = start(&files, &server, Some(&mesh), &[]);
    files.write("ca.crt", &mesh.pem());
    for (name, leaf) in [
        ("nginx", mesh.leaf(Some(NGINX_ID))),
        ("other", mesh.leaf(Some(OTHER_ID))),
        ("stranger", other.leaf(Some(NGINX_ID))),
    ] {
        files.write(&format!("{name}.crt"), &leaf.cert);
        files.write(&format!("{name}.key"), &leaf.key);
    }
    let curl = |client, http2| curl(&curl_path, &files, &mixer, client, http2);
    // ALPN gives curl HTTP/2 when it asks, HTTP/1.1 otherwise; the rule decides on the
    // certificate's SPIFFE ID either way.
    assert_eq!(curl(Some("nginx"), true), "200 2");
    assert_eq!(curl(Some("nginx"), false), "200 1.1");
    assert_eq!(curl(Some("other"), true), "403 2");
    assert_eq!(curl(Some("other"), false), "403 1.1");
    // No certificate, or one from another CA (with the allowed SPIFFE ID): no answer at all.
    // curl exits 56 (receive failure) when TLS 1.3's alert comes after its handshake.
    for (client, why) in [(None, "no certificate"), (Some("stranger"), "another CA")] {
        let answer = curl(client, false);
        assert!(answer.starts_with("exit "), "{why}: {answer}");
    }
    let series = r#"mixer_connections_refused_total{listener="http",reason="tls_handshake"}"#;
    eventually(&mixer, series, |n| n == 2.0);
}

#[test]
fn nginx_calls_forward_auth_over_mutual_tls_with_proxy_ssl_certificate() {
    let Some(nginx) = installed_tool(
        &["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"],
        "apt-get install -y nginx",
    ) else {
        return;
    };
    let files = Files::new();
    let mesh = Ca::new("mesh CA");
    let server = mesh.leaf(None);
    let mixer = start(&files, &server, Some(&mesh), &[]);
    files.write("ca.crt", &mesh.pem());
    for (name, leaf) in [
        ("nginx", mesh.leaf(Some(NGINX_ID))),
        ("other", mesh.leaf(Some(OTHER_ID))),
    ] {
        files.write(&format!("{name}.crt"), &leaf.cert);
        files.write(&format!("{name}.key"), &leaf.key);
    }
    std::fs::create_dir(files.dir.path().join("www")).expect("mkdir");
    files.write("www/index.html", "the app\n");
    let prefix = files.dir.path().display().to_string();
    // One server block per client certificate nginx presents to the mixer (none for the
    // last): each request is checked by forward-auth over mutual TLS first.
    let block = |listen: SocketAddr, client: Option<&str>| {
        let identity = client.map_or(String::new(), |name| {
            format!(
                "proxy_ssl_certificate {prefix}/{name}.crt;\n\
                 proxy_ssl_certificate_key {prefix}/{name}.key;"
            )
        });
        format!(
            r#"
    server {{
        listen {listen};
        root {prefix}/www;
        location / {{ auth_request /_mixer_check; }}
        location = /_mixer_check {{
            internal;
            proxy_pass https://127.0.0.1:{port}/check;
            proxy_ssl_trusted_certificate {prefix}/ca.crt;
            proxy_ssl_verify on;
            proxy_ssl_name localhost;
            proxy_ssl_server_name on;
            {identity}
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-URI $request_uri;
        }}
    }}"#,
            port = mixer.http.port()
        )
    };
    let listens = [free_addr(), free_addr(), free_addr()];
    let blocks = [
        block(listens[0], Some("nginx")),
        block(listens[1], Some("other")),
        block(listens[2], None),
    ]
    .concat();
    let _nginx = Nginx::start(&nginx, files.dir.path(), &blocks, &listens);
    let get = |listen| mixer_tests::http_request(listen, "GET", "/", &[]).expect("nginx");
    let (status, _, body) = get(listens[0]);
    assert_eq!((status, body.as_str()), (200, "the app\n"));
    // Verified, but not the identity the rule allows.
    assert_eq!(get(listens[1]).0, 403);
    // The mixer refuses nginx's handshake without a certificate: nginx's auth_request turns
    // the failed subrequest into 500.
    assert_eq!(get(listens[2]).0, 500);
}

/// A rustls client of forward-auth: the certificate the handshake got and the HTTP status,
/// or why there is none.
fn https_get(
    addr: SocketAddr,
    ca: &str,
    identity: Option<&Leaf>,
) -> Result<(Vec<u8>, u16), String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.as_bytes()).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some(leaf) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(leaf.cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| e.to_string())?,
                PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).map_err(|e| e.to_string())?,
            )
            .map_err(|e| e.to_string())?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let connection =
        rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let tcp =
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    tls.write_all(b"GET /check HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    let read = tls.read_to_end(&mut answer);
    let served = tls
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .ok_or("no server certificate")?;
    // The server closes without close_notify after `Connection: close` on some paths.
    if answer.is_empty() {
        read.map_err(|e| e.to_string())?;
        return Err("no answer".into());
    }
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not HTTP: {text}"))?;
    Ok((served, status))
}

fn der(leaf: &Leaf) -> Vec<u8> {
    CertificateDer::from_pem_slice(leaf.cert.as_bytes())
        .expect("pem")
        .to_vec()
}

/// Polls `https_get` until the handshake gets `expected`; how long that took.
fn until_served(addr: SocketAddr, ca: &str, identity: &Leaf, expected: &[u8]) -> Duration {
    until(
        Duration::from_secs(5),
        Duration::from_millis(20),
        || match https_get(addr, ca, Some(identity)) {
            Ok((served, _)) if served == expected => Ok(()),
            Ok(_) => Err("the old certificate is still served".to_owned()),
            Err(e) => Err(format!("the handshake failed: {e}")),
        },
    )
    .1
}

#[test]
fn rotated_certificates_are_served_to_new_handshakes_within_a_second() {
    let files = Files::new();
    let mesh = Ca::new("mesh CA");
    let first = mesh.leaf(None);
    let nginx = mesh.leaf(Some(NGINX_ID));
    let mixer = start(&files, &first, Some(&mesh), &[]);
    let (served, status) = https_get(mixer.http, &mesh.pem(), Some(&nginx)).expect("first");
    assert_eq!((served, status), (der(&first), 200));

    // cert-manager style: both files rewritten in place.
    let second = mesh.leaf(None);
    files.write("tls.key", &second.key);
    files.write("tls.crt", &second.cert);
    let took = until_served(mixer.http, &mesh.pem(), &nginx, &der(&second));
    eprintln!("in-place rewrite served after {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(
        mixer.metric(r#"mixer_tls_reloads_total{result="success"}"#),
        Some(1.0)
    );

    // A bad certificate: the second keeps being served, and the failure is counted.
    let failures = || mixer.metric(r#"mixer_tls_reloads_total{result="failure"}"#);
    let before = failures().expect("the failure series");
    files.write(
        "tls.crt",
        "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n",
    );
    let start = Instant::now();
    while failures() <= Some(before) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no failure counted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(mixer.metric("mixer_tls_reload_failing"), Some(1.0));
    let (served, status) =
        https_get(mixer.http, &mesh.pem(), Some(&nginx)).expect("after a bad cert");
    assert_eq!((served, status), (der(&second), 200));

    // A new client CA: certificates of the old one are refused from then on.
    let next = Ca::new("next mesh CA");
    let next_server = next.leaf(None);
    let next_nginx = next.leaf(Some(NGINX_ID));
    files.write("tls.crt", &next_server.cert);
    files.write("tls.key", &next_server.key);
    files.write("client-ca.crt", &next.pem());
    until_served(mixer.http, &next.pem(), &next_nginx, &der(&next_server));
    assert_eq!(mixer.metric("mixer_tls_reload_failing"), Some(0.0));
    assert!(
        https_get(mixer.http, &next.pem(), Some(&nginx)).is_err(),
        "a certificate of the retired CA was accepted"
    );
    // gRPC takes the same certificate.
    let grpc_served = tls_handshake(mixer.grpc, &next, &next_nginx, b"h2");
    assert_eq!(grpc_served, der(&next_server));
}

/// A finished mutual-TLS handshake with `addr` offering ALPN `alpn`.
fn tls_connect(
    addr: SocketAddr,
    ca: &Ca,
    identity: &Leaf,
    alpn: &[u8],
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).expect("pem"))
        .expect("root");
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from_pem_slice(identity.cert.as_bytes()).expect("pem")],
            PrivateKeyDer::from_pem_slice(identity.key.as_bytes()).expect("key"),
        )
        .expect("client auth");
    config.alpn_protocols = vec![alpn.to_vec()];
    let name = ServerName::try_from("localhost").expect("name");
    let mut connection = rustls::ClientConnection::new(Arc::new(config), name).expect("client");
    let mut tcp = TcpStream::connect(addr).expect("connect");
    while connection.is_handshaking() {
        connection.complete_io(&mut tcp).expect("handshake");
    }
    assert_eq!(connection.alpn_protocol(), Some(alpn));
    rustls::StreamOwned::new(connection, tcp)
}

/// The certificate a handshake with ALPN `alpn` gets from `addr`.
fn tls_handshake(addr: SocketAddr, ca: &Ca, identity: &Leaf, alpn: &[u8]) -> Vec<u8> {
    let tls = tls_connect(addr, ca, identity, alpn);
    tls.conn.peer_certificates().expect("certificates")[0].to_vec()
}

/// A Kubernetes Secret volume: `tls.crt -> ..data/tls.crt`, `..data -> ..<timestamp>`. The
/// kubelet writes a new timestamped directory, renames a new `..data` link over the old one
/// and removes the old directory.
#[test]
fn a_secret_volume_data_symlink_swap_is_followed() {
    use std::os::unix::fs::symlink;
    let files = Files::new();
    let volume = files.dir.path().join("secret");
    std::fs::create_dir(&volume).expect("mkdir");
    let mesh = Ca::new("mesh CA");
    let nginx = mesh.leaf(Some(NGINX_ID));
    let write_version = |name: &str, leaf: &Leaf| {
        let dir = volume.join(name);
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::write(dir.join("tls.crt"), &leaf.cert).expect("write");
        std::fs::write(dir.join("tls.key"), &leaf.key).expect("write");
        std::fs::write(dir.join("ca.crt"), mesh.pem()).expect("write");
    };
    let first = mesh.leaf(None);
    write_version("..2026_12_02_01_00_00.1", &first);
    symlink("..2026_12_02_01_00_00.1", volume.join("..data")).expect("symlink");
    for file in ["tls.crt", "tls.key", "ca.crt"] {
        symlink(format!("..data/{file}"), volume.join(file)).expect("symlink");
    }
    files.write("config.yaml", CONFIG);
    let path = |f: &str| volume.join(f).display().to_string();
    let (config, cert, key, ca) = (
        files.path("config.yaml"),
        path("tls.crt"),
        path("tls.key"),
        path("ca.crt"),
    );
    let mixer = Mixer::start(
        binary(),
        &[
            "--config",
            &config,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--tls-client-ca",
            &ca,
        ],
    );
    mixer.wait_ready(Duration::from_secs(20));
    assert_eq!(
        https_get(mixer.http, &mesh.pem(), Some(&nginx))
            .expect("first")
            .0,
        der(&first)
    );

    // Requests keep being answered while the volume changes.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = std::thread::spawn({
        let (stop, addr, nginx) = (stop.clone(), mixer.http, nginx.clone());
        let ca = mesh.pem();
        move || {
            let (mut ok, mut failed) = (0, 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match https_get(addr, &ca, Some(&nginx)) {
                    Ok((_, 200)) => ok += 1,
                    _ => failed += 1,
                }
            }
            (ok, failed)
        }
    });
    let second = mesh.leaf(None);
    write_version("..2026_12_02_02_00_00.2", &second);
    symlink("..2026_12_02_02_00_00.2", volume.join("..data_tmp")).expect("symlink");
    std::fs::rename(volume.join("..data_tmp"), volume.join("..data")).expect("rename");
    std::fs::remove_dir_all(volume.join("..2026_12_02_01_00_00.1")).expect("remove");
    let took = until_served(mixer.http, &mesh.pem(), &nginx, &der(&second));
    eprintln!("..data swap served after {took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = load.join().expect("load thread");
    assert!(ok > 0 && failed == 0, "{ok} answered, {failed} failed");
}

#[test]
fn a_certificate_that_cannot_be_served_stops_the_start_naming_the_file() {
    let files = Files::new();
    let mesh = Ca::new("mesh CA");
    let leaf = mesh.leaf(None);
    files.write("config.yaml", CONFIG);
    let cert = files.write("tls.crt", "not a certificate\n");
    let key = files.write("tls.key", &leaf.key);
    let out = Command::new(binary())
        .args(["serve", "--config", &files.path("config.yaml")])
        .args(["--grpc-addr", &free_addr().to_string()])
        .args(["--http-addr", &free_addr().to_string()])
        .args(["--admin-addr", &free_addr().to_string()])
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .output()
        .expect("run the mixer");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "--tls-cert {}: no certificate in the file",
            cert.display()
        )),
        "{stderr}"
    );
    // A key without its certificate is a usage error.
    let out = Command::new(binary())
        .args(["serve", "--tls-key"])
        .arg(&key)
        .output()
        .expect("run the mixer");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-cert"));
}

#[test]
fn the_handshake_timeout_covers_the_tls_handshake() {
    let files = Files::new();
    let mesh = Ca::new("mesh CA");
    let mixer = start(
        &files,
        &mesh.leaf(None),
        Some(&mesh),
        &[
            "--handshake-timeout",
            "500ms",
            "--header-read-timeout",
            "700ms",
        ],
    );
    for (addr, listener) in [(mixer.grpc, "grpc"), (mixer.http, "http")] {
        // Connected, and never a ClientHello.
        let mut silent = TcpStream::connect(addr).expect("connect");
        silent
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let start = Instant::now();
        let mut buf = [0u8; 16];
        let read = silent.read(&mut buf);
        let took = start.elapsed();
        assert!(
            matches!(read, Ok(0) | Err(_)) && took >= Duration::from_millis(400),
            "{listener}: {read:?} after {took:?}"
        );
        assert!(
            took < Duration::from_secs(3),
            "{listener}: closed after {took:?}"
        );
        let series = format!(
            r#"mixer_connections_timed_out_total{{listener="{listener}",timeout="handshake"}}"#
        );
        eventually(&mixer, &series, |n| n == 1.0);
    }
    // After the TLS handshake the other clocks run: forward-auth's header-read timeout on a
    // client that sends no request, and on gRPC the handshake timeout, which also covers the
    // HTTP/2 preface.
    let client = mesh.leaf(Some(NGINX_ID));
    for (addr, alpn, series) in [
        (
            mixer.http,
            &b"http/1.1"[..],
            r#"mixer_connections_timed_out_total{listener="http",timeout="header_read"}"#,
        ),
        (
            mixer.grpc,
            &b"h2"[..],
            r#"mixer_connections_timed_out_total{listener="grpc",timeout="handshake"}"#,
        ),
    ] {
        let mut tls = tls_connect(addr, &mesh, &client, alpn);
        tls.sock
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let start = Instant::now();
        let mut rest = Vec::new();
        let read = tls.read_to_end(&mut rest);
        let took = start.elapsed();
        // An HTTP/2 server speaks first: its SETTINGS frame (type 4), and nothing more.
        let said_nothing = rest.is_empty() || (alpn == b"h2" && rest.get(3) == Some(&4));
        assert!(
            said_nothing && took >= Duration::from_millis(400) && took < Duration::from_secs(3),
            "{series}: {read:?} {rest:?} after {took:?}"
        );
        let expected = if alpn == b"h2" { 2.0 } else { 1.0 };
        eventually(&mixer, series, |n| n == expected);
    }
    // The admin listener stays plaintext.
    let (status, _, _) =
        mixer_tests::http_request(mixer.admin, "GET", "/readyz", &[]).expect("admin");
    assert_eq!(status, 200);
}
