//! The `noop` adapter: accepts every template and does nothing, allowing every check,
//! granting every quota and generating no attributes (their bindings take their defaults). Useful to wire rules up and to measure the pipeline's own cost.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, AttributeHandler, BuildContext, CheckHandler, Generated,
    Handler, ParamError, QuotaArgs, QuotaHandler, ReportHandler, Stability,
};
use mixer_model::{CheckResult, Instance, QuotaResult, Status, Template};
use serde::Deserialize;

static INFO: AdapterInfo = AdapterInfo {
    name: "noop",
    description: "Does nothing: allows checks, grants quota, drops reports",
    templates: &Template::ALL,
    cacheable: true,
    stability: Stability::Stable,
};

// Istio's noop answered with validity long enough to mean "for ever".
const FOREVER: Duration = Duration::from_secs(1_000_000_000);
const MANY_USES: i32 = 1_000_000_000;

/// `params` of a noop handler: none.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoopParams {}

/// The noop adapter.
#[derive(Debug, Default, Clone, Copy)]
pub struct Noop;

impl Adapter for Noop {
    type Config = NoopParams;
    type Compiled = NoopParams;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, params: NoopParams) -> Result<NoopParams, Vec<ParamError>> {
        Ok(params)
    }

    fn build(
        &self,
        _params: &NoopParams,
        _ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(NoopHandler))
    }
}

/// The noop handler.
pub struct NoopHandler;

impl Handler for NoopHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }

    fn as_quota(&self) -> Option<&dyn QuotaHandler> {
        Some(self)
    }

    fn as_report(&self) -> Option<&dyn ReportHandler> {
        Some(self)
    }

    fn as_attributes(&self) -> Option<&dyn AttributeHandler> {
        Some(self)
    }
}

#[async_trait]
impl AttributeHandler for NoopHandler {
    async fn generate(&self, _instance: &Instance) -> Result<Generated, AdapterError> {
        Ok(Generated::default())
    }
}

#[async_trait]
impl CheckHandler for NoopHandler {
    async fn check(&self, _instance: &Instance) -> Result<CheckResult, AdapterError> {
        Ok(CheckResult::ok(FOREVER, MANY_USES))
    }
}

#[async_trait]
impl QuotaHandler for NoopHandler {
    async fn allocate(
        &self,
        _instance: &Instance,
        args: &QuotaArgs,
    ) -> Result<QuotaResult, AdapterError> {
        Ok(QuotaResult {
            status: Status::OK,
            valid_duration: FOREVER,
            granted_amount: args.amount,
            limit: None,
        })
    }
}

#[async_trait]
impl ReportHandler for NoopHandler {
    async fn report(&self, _instances: &[Instance]) -> Result<(), AdapterError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn allows_grants_and_accepts() {
        let h = Noop
            .build(
                &NoopParams {},
                &BuildContext {
                    handler_name: "n".into(),
                },
            )
            .expect("builds");
        let i = Instance {
            name: "i".into(),
            template: Template::CheckNothing,
            fields: vec![],
        };
        assert!(
            h.as_check()
                .expect("check")
                .check(&i)
                .await
                .expect("ok")
                .status
                .is_ok()
        );
        let args = QuotaArgs {
            amount: 7,
            best_effort: false,
            deduplication_id: String::new(),
            limit_override: None,
        };
        assert_eq!(
            h.as_quota()
                .expect("quota")
                .allocate(&i, &args)
                .await
                .expect("ok")
                .granted_amount,
            7
        );
        h.as_report()
            .expect("report")
            .report(std::slice::from_ref(&i))
            .await
            .expect("ok");
        assert_eq!(
            h.as_attributes()
                .expect("attributes")
                .generate(&i)
                .await
                .expect("ok"),
            Generated::default()
        );
        assert!(
            mixer_adapter_api::host::AnyAdapter::compile(&Noop, &serde_json::json!({"x": 1}))
                .is_err()
        );
    }
}
