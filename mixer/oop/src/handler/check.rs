//! Check and quota calls: one Handle call each, not retried after a failure the adapter may
//! have acted on (a late answer is useless to the caller and the handler's fail policy
//! decides what a failure means). Only a call the adapter cannot have acted on (a lost
//! session, a dead connection) is sent once more, within the same deadline.

use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, CheckHandler, QuotaArgs, QuotaHandler};
use mixer_model::{CheckResult, Instance, InstanceView, QuotaInstance, QuotaResult};
use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_proto::{authorization, checknothing, listentry, quota};
use tonic::Request;

use super::{RemoteHandler, wrong_variety};
use crate::convert;

#[async_trait]
impl CheckHandler for RemoteHandler {
    /// One Handle call, bounded by the deadline; sent again only when the adapter cannot
    /// have acted on it (see `RemoteHandler::call`).
    async fn check(&self, instance: &Instance) -> Result<CheckResult, AdapterError> {
        macro_rules! check {
            ($module:ident, $($client:ident)::+, $req:ident, $method:ident, $msg:expr) => {
                self.call("check", |ch, cfg, t| {
                    let mut req = Request::new($module::$req {
                        instance: Some($msg),
                        adapter_config: Some(cfg),
                        // Made here, per attempt: a check is not deduplicated, and the
                        // first attempt costs no copy kept for a second.
                        dedup_id: self.next_dedup_id(),
                    });
                    req.set_timeout(t);
                    async move {
                        let mut client = $module::$($client)::+::new(ch);
                        client.$method(req).await.map(|r| r.into_inner())
                    }
                })
                .await
            };
        }
        let result = match instance.view() {
            InstanceView::Authorization(authorization) => check!(
                authorization,
                handle_authorization_service_client::HandleAuthorizationServiceClient,
                HandleAuthorizationRequest,
                handle_authorization,
                convert::authorization(&authorization)
            ),
            InstanceView::CheckNothing(_) => check!(
                checknothing,
                handle_check_nothing_service_client::HandleCheckNothingServiceClient,
                HandleCheckNothingRequest,
                handle_check_nothing,
                checknothing::InstanceMsg {
                    name: instance.name.to_string()
                }
            ),
            InstanceView::ListEntry(entry) => check!(
                listentry,
                handle_list_entry_service_client::HandleListEntryServiceClient,
                HandleListEntryRequest,
                handle_list_entry,
                convert::listentry(&entry)
            ),
            _ => return Err(wrong_variety(instance.template, "check")),
        }?;
        Ok(convert::check_result(&result))
    }
}

#[async_trait]
impl QuotaHandler for RemoteHandler {
    /// One HandleQuota call keyed by the instance name, bounded by the deadline; sent again
    /// (same dedup id) only when the adapter cannot have charged it: NOT_FOUND for the
    /// session, or a connection found dead before the request was written. Otherwise the
    /// front end's caller may retry with the same dedup id.
    async fn allocate(
        &self,
        instance: &Instance,
        args: &QuotaArgs,
    ) -> Result<QuotaResult, AdapterError> {
        let Some(quota_instance) = QuotaInstance::of(instance) else {
            return Err(wrong_variety(instance.template, "quota"));
        };
        let dedup_id = if args.deduplication_id.is_empty() {
            self.next_dedup_id()
        } else {
            args.deduplication_id.clone()
        };
        let name = instance.name.to_string();
        let result = self
            .call("quota", |ch, cfg, t| {
                let mut req = Request::new(quota::HandleQuotaRequest {
                    instance: Some(convert::quota(&quota_instance)),
                    adapter_config: Some(cfg),
                    dedup_id: dedup_id.clone(),
                    quota_request: Some(model::QuotaRequest {
                        quotas: [(
                            name.clone(),
                            model::quota_request::QuotaParams {
                                amount: args.amount,
                                best_effort: args.best_effort,
                            },
                        )]
                        .into(),
                    }),
                });
                req.set_timeout(t);
                async move {
                    let mut client =
                        quota::handle_quota_service_client::HandleQuotaServiceClient::new(ch);
                    client.handle_quota(req).await.map(|r| r.into_inner())
                }
            })
            .await?;
        // An adapter that keyed its only answer differently still answered this quota.
        if !result.quotas.contains_key(&name) && result.quotas.len() == 1 {
            let only = result.quotas.keys().next().cloned().unwrap_or_default();
            return Ok(convert::quota_result(&result, &only));
        }
        Ok(convert::quota_result(&result, &name))
    }
}
