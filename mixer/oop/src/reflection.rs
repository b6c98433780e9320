//! Which templates an adapter serves, as its gRPC server reflection lists them: one
//! `Handle<Template>Service` per template (`checknothing.HandleCheckNothingService`).

use futures_util::stream;
use mixer_model::Template;
use tonic_reflection::pb::{v1, v1alpha};

use crate::transport::{AdapterChannel, Transport};

/// The templates the adapter at `connection` serves, as its gRPC server reflection lists
/// them, over the same transport (TLS, token) its handlers use; `Ok(None)` when it serves no
/// reflection. For tools (`mixer conformance`) that ask outside a config load.
pub async fn templates_served(
    connection: &mixer_remote::RemoteConnection,
    timeout: std::time::Duration,
) -> Result<Option<Vec<Template>>, String> {
    let transport =
        Transport::new(connection, timeout).map_err(|(field, m)| format!("{field}: {m}"))?;
    let deadline = tokio::time::Instant::now() + timeout;
    let channel = transport
        .connect_by(&connection.address, deadline, timeout)
        .await?;
    tokio::time::timeout_at(deadline, served_templates(channel))
        .await
        .map_err(|_| format!("reflection did not answer within {timeout:?}"))?
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
}

/// The templates whose service `channel`'s adapter lists through gRPC server reflection
/// (v1, else v1alpha); `Ok(None)` when it serves neither (an `adapter` document may say
/// instead). Services that are no template's (`InfrastructureBackend`, health) are skipped.
pub(crate) async fn served_templates(
    channel: AdapterChannel,
) -> Result<Option<Vec<Template>>, tonic::Status> {
    let names = match list_v1(channel.clone()).await {
        Err(s) if s.code() == tonic::Code::Unimplemented => match list_v1alpha(channel).await {
            Err(s) if s.code() == tonic::Code::Unimplemented => return Ok(None),
            other => other?,
        },
        other => other?,
    };
    let mut templates: Vec<Template> = names.iter().filter_map(|n| template_of(n)).collect();
    templates.sort_by_key(|t| t.name());
    templates.dedup();
    Ok(Some(templates))
}

/// The template whose handler service is called `service`, if any.
pub(crate) fn template_of(service: &str) -> Option<Template> {
    let (package, name) = service.rsplit_once('.')?;
    let template = Template::ALL
        .into_iter()
        .find(|t| crate::convert::package(*t) == package)?;
    (name.starts_with("Handle") && name.ends_with("Service")).then_some(template)
}

/// The services `channel`'s reflection service lists, in version `$v` of the protocol
/// (`v1`, `v1alpha`: the same messages in two packages).
macro_rules! list_services {
    ($v:ident, $channel:expr) => {{
        use $v::server_reflection_request::MessageRequest;
        use $v::server_reflection_response::MessageResponse;
        let mut client = $v::server_reflection_client::ServerReflectionClient::new($channel);
        let request = $v::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut answers = client
            .server_reflection_info(stream::iter([request]))
            .await?
            .into_inner();
        match answers.message().await?.and_then(|a| a.message_response) {
            Some(MessageResponse::ListServicesResponse(list)) => {
                Ok(list.service.into_iter().map(|s| s.name).collect())
            }
            Some(MessageResponse::ErrorResponse(e)) => Err(tonic::Status::new(
                tonic::Code::from(e.error_code),
                e.error_message,
            )),
            _ => Err(tonic::Status::unknown(
                "reflection answered no service list",
            )),
        }
    }};
}

async fn list_v1(channel: AdapterChannel) -> Result<Vec<String>, tonic::Status> {
    list_services!(v1, channel)
}

async fn list_v1alpha(channel: AdapterChannel) -> Result<Vec<String>, tonic::Status> {
    list_services!(v1alpha, channel)
}

#[cfg(test)]
mod tests {
    use super::template_of;
    use mixer_model::Template;

    #[test]
    fn template_services_are_recognised_and_others_skipped() {
        assert_eq!(
            template_of("checknothing.HandleCheckNothingService"),
            Some(Template::CheckNothing)
        );
        assert_eq!(
            template_of("listentry.HandleListEntryService"),
            Some(Template::ListEntry)
        );
        assert_eq!(
            template_of("adapter.template.kubernetes.HandleKubernetesService"),
            Some(Template::Kubernetes)
        );
        assert_eq!(
            template_of("apikey.HandleApiKeyService"),
            Some(Template::ApiKey)
        );
        assert_eq!(template_of("kubernetes.HandleKubernetesService"), None);
        assert_eq!(template_of("grpc.health.v1.Health"), None);
        assert_eq!(
            template_of("istio.mixer.adapter.model.v1beta1.InfrastructureBackend"),
            None
        );
    }
}
