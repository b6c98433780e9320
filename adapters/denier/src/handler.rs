//! The denier's handler.

use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, CheckHandler, Handler, QuotaArgs, QuotaHandler};
use mixer_model::{CheckResult, Instance, QuotaResult, Status};

use crate::config::DenierParams;

/// Answers every check with the configured status and grants no quota.
pub struct DenierHandler {
    result: CheckResult,
}

impl DenierHandler {
    /// From validated params; anything invalid falls back to the default.
    pub fn new(params: &DenierParams) -> DenierHandler {
        let message = params
            .status
            .as_ref()
            .map(|s| s.message.clone())
            .unwrap_or_default();
        DenierHandler {
            result: CheckResult {
                status: Status::new(
                    params
                        .code()
                        .unwrap_or(mixer_model::Code::FailedPrecondition),
                    message,
                ),
                valid_duration: params
                    .duration()
                    .unwrap_or(std::time::Duration::from_secs(5)),
                valid_use_count: params.use_count().unwrap_or(1000),
            },
        }
    }
}

impl Handler for DenierHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }

    fn as_quota(&self) -> Option<&dyn QuotaHandler> {
        Some(self)
    }
}

#[async_trait]
impl CheckHandler for DenierHandler {
    async fn check(&self, _instance: &Instance) -> Result<CheckResult, AdapterError> {
        Ok(self.result.clone())
    }
}

#[async_trait]
impl QuotaHandler for DenierHandler {
    async fn allocate(
        &self,
        _instance: &Instance,
        _args: &QuotaArgs,
    ) -> Result<QuotaResult, AdapterError> {
        Ok(QuotaResult {
            status: self.result.status.clone(),
            valid_duration: self.result.valid_duration,
            granted_amount: 0,
            limit: None,
        })
    }
}
