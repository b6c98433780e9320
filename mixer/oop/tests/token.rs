//! The access token of a `tls` connection arrives in the adapter's metadata, in the header
//! Istio's `authHeader` / `customHeader` say, and a rotated token file is picked up without
//! a config reload. The adapter is a tonic server over TLS that records what it received.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mixer_adapter_api::{AdapterRegistry, RemoteConnection, RemoteHandlerSpec};
use mixer_config::{ConfigOptions, SourceFile};
use mixer_model::{FieldValue, Instance, Template, Value};
use mixer_oop::{OopOptions, RemoteAdapterFactory, RemoteHandler};
use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_proto::listentry;
use support::Pki;
use tonic::transport::{Identity, ServerTlsConfig};
use tonic::{Request, Response, Status};

/// The `authorization` and `x-api-key` values of one call.
type Seen = (Option<String>, Option<String>);

/// What each call carried.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Seen>>>);

#[tonic::async_trait]
impl listentry::handle_list_entry_service_server::HandleListEntryService for Recorder {
    async fn handle_list_entry(
        &self,
        request: Request<listentry::HandleListEntryRequest>,
    ) -> Result<Response<model::CheckResult>, Status> {
        let get = |k: &str| {
            request
                .metadata()
                .get(k)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let seen = (get("authorization"), get("x-api-key"));
        self.0.lock().expect("lock").push(seen);
        Ok(Response::new(model::CheckResult::default()))
    }
}

impl Recorder {
    fn last(&self) -> Seen {
        self.0
            .lock()
            .expect("lock")
            .last()
            .cloned()
            .expect("a call")
    }
}

async fn serve(pki: &Pki, recorder: Recorder) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let tls = ServerTlsConfig::new().identity(Identity::from_pem(
        pki.read("server.pem"),
        pki.read("server.key"),
    ));
    let server = tonic::transport::Server::builder()
        .tls_config(tls)
        .expect("tls")
        .add_service(
            listentry::handle_list_entry_service_server::HandleListEntryServiceServer::new(
                recorder,
            ),
        )
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    tokio::spawn(server);
    port
}

/// A handler whose `tls` block is `tls_yaml`, parsed and checked by mixer-config.
fn handler(port: u16, tls_yaml: &str) -> Arc<RemoteHandler> {
    let yaml = format!(
        "kind: handler\nmetadata: {{name: h, namespace: istio-system}}\nspec:\n  adapter: recorder\n  connection:\n    address: 127.0.0.1:{port}\n    authentication: {{tls: {tls_yaml}}}\n"
    );
    let sources = [SourceFile::new("token.yaml", yaml)];
    let config =
        mixer_config::validate(&sources, &AdapterRegistry::new(), &ConfigOptions::default())
            .unwrap_or_else(|e| panic!("invalid config: {e:?}"))
            .config;
    let c = config.handlers[0].connection.clone().expect("connection");
    let connection = RemoteConnection {
        address: c.address,
        timeout: c.timeout,
        authentication: c.authentication,
    };
    let factory = RemoteAdapterFactory::new(OopOptions {
        sessions: false,
        validate: false,
        ..OopOptions::default()
    });
    factory
        .build_handler(&RemoteHandlerSpec {
            handler_name: "h.istio-system".into(),
            adapter: "recorder",
            params: &serde_json::Value::Null,
            params_descriptor: None,
            session_based: None,
            connection: &connection,
            instances: &[],
        })
        .expect("build")
}

async fn check(h: &RemoteHandler) {
    let instance = Instance {
        name: "user.instance.istio-system".into(),
        template: Template::ListEntry,
        fields: vec![("value", FieldValue::Value(Value::string("alice")))],
    };
    let checker = mixer_adapter_api::Handler::as_check(h).expect("check");
    let result = checker.check(&instance).await.expect("answered");
    assert!(result.status.is_ok());
}

#[tokio::test]
async fn a_bearer_token_arrives_and_a_rotated_one_follows_within_a_second() {
    let pki = Pki::new();
    pki.write("token", "first-token\n");
    let recorder = Recorder::default();
    let port = serve(&pki, recorder.clone()).await;
    let h = handler(
        port,
        &format!(
            "{{caCertificates: {}, tokenPath: {}, authHeader: BEARER}}",
            pki.path("ca.pem"),
            pki.path("token")
        ),
    );
    check(&h).await;
    assert_eq!(recorder.last(), (Some("Bearer first-token".into()), None));

    pki.write("token", "second-token");
    tokio::time::sleep(mixer_oop::TOKEN_REFRESH + Duration::from_millis(100)).await;
    check(&h).await;
    assert_eq!(recorder.last(), (Some("Bearer second-token".into()), None));

    // A token file that disappears: the last good token goes on being sent.
    std::fs::remove_file(pki.path("token")).expect("remove");
    tokio::time::sleep(mixer_oop::TOKEN_REFRESH + Duration::from_millis(100)).await;
    check(&h).await;
    assert_eq!(recorder.last(), (Some("Bearer second-token".into()), None));
}

#[tokio::test]
async fn plain_and_custom_headers_carry_the_token_as_it_is() {
    let pki = Pki::new();
    pki.write("token", "k-123");
    let recorder = Recorder::default();
    let port = serve(&pki, recorder.clone()).await;
    let ca = pki.path("ca.pem");
    let token = pki.path("token");
    let h = handler(
        port,
        &format!("{{caCertificates: {ca}, tokenPath: {token}, authHeader: PLAIN}}"),
    );
    check(&h).await;
    assert_eq!(recorder.last(), (Some("k-123".into()), None));
    let h = handler(
        port,
        &format!("{{caCertificates: {ca}, tokenPath: {token}, customHeader: X-Api-Key}}"),
    );
    check(&h).await;
    assert_eq!(recorder.last(), (None, Some("k-123".into())));
    // No token configured: no header.
    let h = handler(port, &format!("{{caCertificates: {ca}}}"));
    check(&h).await;
    assert_eq!(recorder.last(), (None, None));
}
