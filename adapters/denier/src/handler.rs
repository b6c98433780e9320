//! The denier's handler.

use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, CheckHandler, Handler, QuotaArgs, QuotaHandler};
use mixer_model::{CheckResult, Instance, QuotaResult};

/// Answers every check with the configured status and grants no quota.
pub struct DenierHandler {
    result: CheckResult,
}

impl DenierHandler {
    /// Answers with `result`, what [`DenierParams::compile`](crate::DenierParams::compile)
    /// made of the params.
    pub fn new(result: CheckResult) -> DenierHandler {
        DenierHandler { result }
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
