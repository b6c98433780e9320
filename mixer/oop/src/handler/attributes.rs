//! Attribute generation: one `Handle<Template>` call per instance, answered by the
//! template's `OutputMsg`. Like a check, it is not retried after a failure the adapter may
//! have seen (the handler's fail policy decides what a failure means); only a call the
//! adapter cannot have acted on is sent once more, within the same deadline.

use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, AttributeHandler, Generated};
use mixer_model::{Instance, InstanceView};
use mixer_proto::adapter::template::kubernetes;
use mixer_proto::{apikey, jwt};
use tonic::Request;

use super::{RemoteHandler, wrong_variety};
use crate::convert;

#[async_trait]
impl AttributeHandler for RemoteHandler {
    async fn generate(&self, instance: &Instance) -> Result<Generated, AdapterError> {
        macro_rules! generate {
            ($module:ident, $($client:ident)::+, $req:ident, $method:ident, $msg:expr, $read:path) => {{
                let output = self
                    .call("generate", |ch, cfg, t| {
                        let mut req = Request::new($module::$req {
                            instance: Some($msg),
                            adapter_config: Some(cfg),
                            dedup_id: self.next_dedup_id(),
                        });
                        req.set_timeout(t);
                        async move {
                            let mut client = $module::$($client)::+::new(ch);
                            client.$method(req).await.map(|r| r.into_inner())
                        }
                    })
                    .await?;
                $read(output)
            }};
        }
        match instance.view() {
            InstanceView::Kubernetes(k) => generate!(
                kubernetes,
                handle_kubernetes_service_client::HandleKubernetesServiceClient,
                HandleKubernetesRequest,
                handle_kubernetes,
                convert::kubernetes(&k),
                convert::kubernetes_generated
            ),
            InstanceView::Jwt(j) => generate!(
                jwt,
                handle_jwt_service_client::HandleJwtServiceClient,
                HandleJwtRequest,
                handle_jwt,
                convert::jwt(&j),
                convert::jwt_generated
            ),
            InstanceView::ApiKey(a) => generate!(
                apikey,
                handle_api_key_service_client::HandleApiKeyServiceClient,
                HandleApiKeyRequest,
                handle_api_key,
                convert::apikey(&a),
                convert::apikey_generated
            ),
            _ => Err(wrong_variety(instance.template, "generate")),
        }
    }
}
