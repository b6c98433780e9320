//! An adapter that records the token headers each call carried: a tonic `listentry` service
//! over TLS with the test PKI's server certificate. Handlers for it are built from a `tls`
//! block as written in a config, through mixer-config, as the server builds them.

use std::sync::{Arc, Mutex};

use mixer_adapter_api::AdapterError;
use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile};
use mixer_model::{FieldValue, Instance, Template, Value};
use mixer_oop::{OopOptions, RemoteAdapterFactory, RemoteHandler};
use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_proto::listentry;
use mixer_remote::{RemoteConnection, RemoteHandlerSpec};
use tonic::transport::{Identity, ServerTlsConfig};
use tonic::{Request, Response, Status};

use super::Pki;

/// The `authorization` and `x-api-key` values of one call.
pub type Seen = (Option<String>, Option<String>);

/// What each call carried.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<Seen>>>);

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
    /// The headers of the last call.
    pub fn last(&self) -> Seen {
        self.0
            .lock()
            .expect("lock")
            .last()
            .cloned()
            .expect("a call")
    }

    /// How many calls arrived.
    pub fn calls(&self) -> usize {
        self.0.lock().expect("lock").len()
    }
}

/// Serves `recorder` over TLS on a free port until the test ends; returns the port.
pub async fn serve(pki: &Pki, recorder: Recorder) -> u16 {
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

/// A handler `h.istio-system` whose `tls` block is `tls_yaml` (one-second call deadline),
/// parsed and checked by mixer-config.
pub fn handler(port: u16, tls_yaml: &str) -> Arc<RemoteHandler> {
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
            declared_templates: None,
        })
        .expect("build")
}

/// One listentry check through `h`; the adapter's answer is always OK.
pub async fn check(h: &RemoteHandler) -> Result<(), AdapterError> {
    let instance = Instance {
        name: "user.instance.istio-system".into(),
        template: Template::ListEntry,
        fields: vec![("value", FieldValue::Value(Value::string("alice")))],
    };
    let checker = mixer_adapter_api::Handler::as_check(h).expect("check");
    let result = checker.check(&instance).await?;
    assert!(result.status.is_ok());
    Ok(())
}
