//! `connection.authentication` end to end, with real TLS on 127.0.0.1: the config is
//! validated by mixer-config (files read, PEM checked), the snapshot is built by the runtime
//! with the OOP factory, and checks go through the dispatcher to an adapter served by the
//! SDK over TLS or mutual TLS. Certificates come from rcgen (see `support`).

mod support;

use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_sdk::{Server, ServerTls};
use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile};
use mixer_model::{AttributeBag, StringMap, Value};
use mixer_oop::{OopOptions, RemoteAdapterFactory, ValidateOutcome};
use mixer_remote::{RemoteAdapter, RemoteConnection, RemoteHandlerSpec};
use mixer_runtime::{RuntimeMetrics, RuntimeOptions, Snapshot};
use support::Pki;
use support::allow::Allow;
use support::token_endpoint::TokenEndpoint;

/// Serves `Allow` with `tls` on a free port until the test ends; returns the port.
async fn serve(tls: ServerTls) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = Server::new(Allow::only("good")).tls(tls);
    tokio::spawn(server.serve_with_shutdown(listener, std::future::pending()));
    port
}

fn server_tls(pki: &Pki) -> ServerTls {
    ServerTls::from_files(pki.path("server.pem"), pki.path("server.key")).expect("server files")
}

/// One handler `h` (with this authentication block and fail policy), one listentry instance
/// from the `x-user` header, one rule.
fn yaml(address: &str, authentication: &str, fail_policy: &str) -> String {
    format!(
        r#"kind: handler
metadata: {{name: h, namespace: istio-system}}
spec:
  adapter: allow
  failPolicy: {fail_policy}
  connection:
    address: "{address}"
    timeout: 2s
    authentication: {authentication}
---
kind: instance
metadata: {{name: user, namespace: istio-system}}
spec:
  compiledTemplate: listentry
  params: {{value: 'request.headers["x-user"] | ""'}}
---
kind: rule
metadata: {{name: r, namespace: istio-system}}
spec:
  actions: [{{handler: h, instances: [user]}}]
"#
    )
}

fn factory() -> Arc<RemoteAdapterFactory> {
    Arc::new(RemoteAdapterFactory::new(OopOptions {
        validate_timeout: Duration::from_secs(2),
        ..OopOptions::default()
    }))
}

fn config(yaml: &str, registry: &AdapterRegistry) -> mixer_config::Config {
    let sources = [SourceFile::new("tls.yaml", yaml)];
    mixer_config::validate(&sources, registry, &ConfigOptions::default())
        .unwrap_or_else(|e| panic!("invalid config: {e:?}"))
        .config
}

/// Loads and builds the snapshot off the async workers (loading calls the adapter's Validate
/// and waits for it).
async fn snapshot(yaml: String, metrics: Arc<RuntimeMetrics>) -> Snapshot {
    tokio::task::spawn_blocking(move || {
        let mut registry = AdapterRegistry::new();
        registry.register_remote(factory());
        Snapshot::build(
            1,
            config(&yaml, &registry),
            &registry,
            None,
            // Every check asks the adapter: these tests are about its transport.
            &RuntimeOptions {
                cache: mixer_runtime::CacheOptions {
                    max_entries: 0,
                    ..mixer_runtime::CacheOptions::default()
                },
                ..RuntimeOptions::default()
            },
            &metrics,
        )
        .unwrap_or_else(|e| panic!("build failed: {e:?}"))
        .snapshot
    })
    .await
    .expect("build thread")
}

/// The verdict on a request from `user`.
async fn decide(
    snap: &Snapshot,
    user: &str,
) -> Result<Arc<mixer_model::Verdict>, mixer_runtime::Undecided> {
    mixer_runtime::check(snap, &bag(snap, user), mixer_runtime::Wants::Reads)
        .await
        .map(|checked| checked.verdict)
}

fn bag(snap: &Snapshot, user: &str) -> AttributeBag {
    let mut bag = AttributeBag::new(snap.vocabulary().clone());
    let headers: Value = StringMap::from_pairs([("x-user", user)]).into();
    bag.set("request.headers", headers).expect("fits");
    bag
}

fn errors_counted(metrics: &RuntimeMetrics, kind: &str) -> u64 {
    metrics
        .handler_calls
        .with_label_values(&["h.handler.istio-system", "check", kind])
        .get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_the_ca_reaches_the_adapter_and_server_name_overrides_the_host() {
    let pki = Pki::new();
    let port = serve(server_tls(&pki)).await;
    let metrics = Arc::new(RuntimeMetrics::unregistered());
    let auth = format!("{{tls: {{caCertificates: {}}}}}", pki.path("ca.pem"));
    let snap = snapshot(
        yaml(&format!("127.0.0.1:{port}"), &auth, "CLOSED"),
        metrics.clone(),
    )
    .await;
    assert!(decide(&snap, "good").await.expect("decided").is_allowed());
    let denied = decide(&snap, "eve").await.expect("decided");
    assert_eq!(denied.status.message, "eve is not listed");
    assert_eq!(errors_counted(&metrics, "ok"), 1);

    // The certificate names localhost too: connect by IP, verify (and send SNI) as localhost.
    let auth = format!(
        "{{tls: {{caCertificates: {}, serverName: localhost}}}}",
        pki.path("ca.pem")
    );
    let snap = snapshot(
        yaml(&format!("127.0.0.1:{port}"), &auth, "CLOSED"),
        metrics.clone(),
    )
    .await;
    assert!(decide(&snap, "good").await.expect("decided").is_allowed());
    // A name the certificate does not carry is refused.
    let auth = format!(
        "{{tls: {{caCertificates: {}, serverName: adapter.example}}}}",
        pki.path("ca.pem")
    );
    let snap = snapshot(
        yaml(&format!("127.0.0.1:{port}"), &auth, "CLOSED"),
        metrics.clone(),
    )
    .await;
    let err = decide(&snap, "good").await.expect_err("wrong name");
    let (_, error) = handler_failure(err);
    assert!(
        error
            .message
            .contains("not valid for name \"adapter.example\""),
        "{}",
        error.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_works_and_a_client_without_a_certificate_is_refused() {
    let pki = Pki::new();
    let tls = server_tls(&pki)
        .client_ca_file(pki.path("ca.pem"))
        .expect("client CA");
    let port = serve(tls).await;
    let address = format!("localhost:{port}");
    let metrics = Arc::new(RuntimeMetrics::unregistered());
    let mutual = format!(
        "{{mutual: {{clientCertificate: {}, privateKey: {}, caCertificates: {}}}}}",
        pki.path("client.pem"),
        pki.path("client.key"),
        pki.path("ca.pem")
    );
    let snap = snapshot(yaml(&address, &mutual, "CLOSED"), metrics.clone()).await;
    assert!(decide(&snap, "good").await.expect("decided").is_allowed());

    // Same adapter, TLS without a client certificate: the handshake fails, the closed
    // handler fails the check, and the failure is counted.
    let tls_only = format!("{{tls: {{caCertificates: {}}}}}", pki.path("ca.pem"));
    let snap = snapshot(yaml(&address, &tls_only, "CLOSED"), metrics.clone()).await;
    let err = decide(&snap, "good").await.expect_err("refused");
    let (handler, error) = handler_failure(err);
    assert_eq!(&*handler, "h.handler.istio-system");
    assert_eq!(error.kind, mixer_adapter_api::ErrorKind::Unavailable);
    assert_eq!(errors_counted(&metrics, "unavailable"), 1);
    // An open handler lets the request through, and the failure is still counted.
    let snap = snapshot(yaml(&address, &tls_only, "OPEN"), metrics.clone()).await;
    assert!(
        decide(&snap, "good")
            .await
            .expect("fails open")
            .is_allowed()
    );
    assert_eq!(errors_counted(&metrics, "unavailable"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_fails_with_an_error_naming_the_handler_and_the_cause() {
    let pki = Pki::new();
    let port = serve(server_tls(&pki)).await;
    let metrics = Arc::new(RuntimeMetrics::unregistered());
    let auth = format!("{{tls: {{caCertificates: {}}}}}", pki.path("other-ca.pem"));
    let snap = snapshot(
        yaml(&format!("127.0.0.1:{port}"), &auth, "CLOSED"),
        metrics.clone(),
    )
    .await;
    let err = decide(&snap, "good").await.expect_err("untrusted");
    let (_, error) = handler_failure(err);
    let message = &error.message;
    assert!(message.contains("h.handler.istio-system"), "{message}");
    assert!(message.contains("UnknownIssuer"), "{message}");
    assert_eq!(errors_counted(&metrics, "unavailable"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_oauth_token_the_fail_policy_decides() {
    let pki = Pki::new();
    pki.write("client-secret", "s3cret");
    let idp = TokenEndpoint::start("mixer", "another-secret", 60, None).await;
    let port = serve(server_tls(&pki)).await;
    let address = format!("127.0.0.1:{port}");
    let metrics = Arc::new(RuntimeMetrics::unregistered());
    let auth = format!(
        "{{tls: {{caCertificates: {}, oauth: {{clientId: mixer, clientSecret: {}, tokenUrl: '{}'}}}}}}",
        pki.path("ca.pem"),
        pki.path("client-secret"),
        idp.url()
    );
    // The endpoint refuses the secret: a closed handler fails the check (Validate could not
    // be called either, which only warns), and the failure is counted as unavailable.
    let snap = snapshot(yaml(&address, &auth, "CLOSED"), metrics.clone()).await;
    let err = decide(&snap, "good").await.expect_err("no token");
    let (_, error) = handler_failure(err);
    assert_eq!(error.kind, mixer_adapter_api::ErrorKind::Unavailable);
    assert!(
        error.message.contains("invalid_client"),
        "{}",
        error.message
    );
    assert_eq!(errors_counted(&metrics, "unavailable"), 1);
    // An open one lets the request through.
    let snap = snapshot(yaml(&address, &auth, "OPEN"), metrics.clone()).await;
    assert!(
        decide(&snap, "good")
            .await
            .expect("fails open")
            .is_allowed()
    );
    assert_eq!(errors_counted(&metrics, "unavailable"), 2);
    // Once the endpoint takes the secret, the adapter decides.
    idp.set_secret("s3cret");
    let snap = snapshot(yaml(&address, &auth, "CLOSED"), metrics.clone()).await;
    let denied = decide(&snap, "eve").await.expect("decided");
    assert_eq!(denied.status.message, "eve is not listed");
    assert!(idp.issued() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_goes_over_tls_and_rustls_refusals_are_config_errors() {
    let pki = Pki::new();
    let port = serve(server_tls(&pki)).await;
    let params = serde_json::json!({});
    let spec_for = |yaml: &str| {
        let c = config(yaml, &AdapterRegistry::new()).handlers[0]
            .connection
            .clone()
            .expect("connection");
        RemoteConnection {
            address: c.address,
            timeout: c.timeout,
            authentication: c.authentication,
        }
    };
    let auth = format!("{{tls: {{caCertificates: {}}}}}", pki.path("ca.pem"));
    let connection = spec_for(&yaml(&format!("127.0.0.1:{port}"), &auth, "CLOSED"));
    let spec = RemoteHandlerSpec {
        handler_name: "h.handler.istio-system".into(),
        adapter: "allow",
        params: &params,
        params_descriptor: None,
        session_based: None,
        connection: &connection,
        instances: &[],
        declared_templates: None,
    };
    let f = factory();
    let outcome = tokio::task::block_in_place(|| f.validate_blocking(&spec));
    assert_eq!(outcome, ValidateOutcome::Accepted);

    // A key that does not belong to the certificate: rustls refuses it when the handler is
    // validated, so the config is rejected at load with the field at fault.
    let mismatched = format!(
        "{{mutual: {{clientCertificate: {}, privateKey: {}}}}}",
        pki.path("client.pem"),
        pki.path("server.key")
    );
    let connection = spec_for(&yaml("127.0.0.1:1", &mismatched, "CLOSED"));
    let spec = RemoteHandlerSpec {
        connection: &connection,
        ..spec
    };
    let errors = tokio::task::block_in_place(|| f.compile_remote(&spec)).expect_err("refused");
    assert_eq!(
        errors[0].path,
        "connection.authentication.mutual.privateKey"
    );
    assert!(errors[0].message.contains("key"), "{}", errors[0].message);

    // An http:// address would make tonic speak plaintext: refused.
    let connection = RemoteConnection {
        address: format!("http://127.0.0.1:{port}"),
        ..spec_for(&yaml("127.0.0.1:1", &auth, "CLOSED"))
    };
    let spec = RemoteHandlerSpec {
        connection: &connection,
        ..spec
    };
    let errors = tokio::task::block_in_place(|| f.compile_remote(&spec)).expect_err("refused");
    assert_eq!(errors[0].path, "connection.address");
}

/// The handler and error of a check a handler could not decide.
fn handler_failure(
    err: mixer_runtime::Undecided,
) -> (std::sync::Arc<str>, mixer_adapter_api::AdapterError) {
    match err {
        mixer_runtime::Undecided::Handler { handler, error } => (handler, error),
        other => panic!("a handler should have failed: {other}"),
    }
}
