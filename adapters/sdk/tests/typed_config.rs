//! An adapter with its own config message (`testadapter.config.Params`, generated from
//! `proto/testdata/typed_params.proto`): the SDK hands it the params the mixer sends as that
//! message, in Validate, through a session, and on calls without one.

use mixer_adapter_sdk::proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_adapter_sdk::proto::listentry;
use mixer_adapter_sdk::{
    Adapter, CheckResult, Code, Config, Error, ListEntry, ListEntryInstance, Server,
};
use mixer_proto::testdata::{Params, params};
use model::infrastructure_backend_client::InfrastructureBackendClient;
use prost::Message;
use tonic::transport::Channel;

const TYPE_URL: &str = "type.googleapis.com/testadapter.config.Params";

struct Typed;

impl Adapter for Typed {
    fn validate(&self, config: &Config) -> Result<(), String> {
        if config.type_url() != Some(TYPE_URL) {
            return Err(format!("expected {TYPE_URL}, got {:?}", config.type_url()));
        }
        let params: Params = config.decode()?;
        if params.backend.is_none_or(|b| b.host.is_empty()) {
            return Err("backend.host: required".into());
        }
        Ok(())
    }
}

impl ListEntry for Typed {
    async fn check(
        &self,
        instance: &ListEntryInstance,
        config: &Config,
    ) -> Result<CheckResult, Error> {
        let params: Params = config.decode().map_err(Error::invalid)?;
        let mode = params::Mode::try_from(params.mode).unwrap_or_default();
        Ok(
            if params.allowed.contains(&instance.value) || mode == params::Mode::Allow {
                CheckResult::ok()
            } else {
                CheckResult::deny(format!("{} is not allowed", instance.value))
            },
        )
    }
}

fn typed(params: &Params) -> prost_types::Any {
    prost_types::Any {
        type_url: TYPE_URL.into(),
        value: params.encode_to_vec(),
    }
}

/// Params the adapter accepts. Every byte of their encoding is below 0x80, valid UTF-8: the
/// SDK must not take them for a session id.
fn good() -> Params {
    Params {
        mode: params::Mode::Deny as i32,
        allowed: vec!["alice".into()],
        backend: Some(params::Backend {
            host: "db".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn start() -> (Channel, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(
        Server::new(Typed)
            .list_entry()
            .serve_with_shutdown(listener, async {
                let _ = stopped.await;
            }),
    );
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (channel, stop)
}

async fn check(channel: &Channel, value: &str, config: prost_types::Any) -> i32 {
    let mut client = listentry::handle_list_entry_service_client::HandleListEntryServiceClient::new(
        channel.clone(),
    );
    let result = client
        .handle_list_entry(listentry::HandleListEntryRequest {
            instance: Some(listentry::InstanceMsg {
                name: "user.instance.istio-system".into(),
                value: value.into(),
            }),
            adapter_config: Some(config),
            dedup_id: String::new(),
        })
        .await
        .expect("answer")
        .into_inner();
    result.status.map_or(0, |s| s.code)
}

#[tokio::test]
async fn the_adapter_reads_its_own_message_everywhere() {
    let (channel, _stop) = start().await;
    let mut backend = InfrastructureBackendClient::new(channel.clone());

    let ok = backend
        .validate(model::ValidateRequest {
            adapter_config: Some(typed(&good())),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ok.status.is_none_or(|s| s.code == 0));
    let bad = backend
        .validate(model::ValidateRequest {
            adapter_config: Some(typed(&Params::default())),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .expect("refused");
    assert_eq!(bad.code, Code::InvalidArgument as i32);
    assert!(bad.message.contains("backend.host: required"), "{bad:?}");

    // Calls without a session carry the message.
    assert_eq!(check(&channel, "alice", typed(&good())).await, 0);
    assert_eq!(
        check(&channel, "mallory", typed(&good())).await,
        Code::PermissionDenied as i32
    );

    // A session stores it.
    let session = backend
        .create_session(model::CreateSessionRequest {
            adapter_config: Some(typed(&good())),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let by_id = prost_types::Any {
        type_url: "google.protobuf.Any.type_url".into(),
        value: session.session_id.into_bytes(),
    };
    assert_eq!(check(&channel, "alice", by_id.clone()).await, 0);
    assert_eq!(
        check(&channel, "mallory", by_id).await,
        Code::PermissionDenied as i32
    );
}
