//! The `denier` adapter: answers every check with one fixed status, as Istio's denier did.
//!
//! See README.md beside this crate for the params and behaviour.

mod config;
mod handler;

use std::sync::Arc;

use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, Stability,
};
use mixer_model::{CheckResult, Template};

pub use config::DenierParams;

static INFO: AdapterInfo = AdapterInfo {
    name: "denier",
    description: "Rejects every check and quota request with a fixed status",
    templates: &[Template::CheckNothing, Template::ListEntry, Template::Quota],
    cacheable: true,
    stability: Stability::Stable,
};

/// The denier adapter.
#[derive(Debug, Default, Clone, Copy)]
pub struct Denier;

impl Adapter for Denier {
    type Config = DenierParams;
    /// The answer every check gets.
    type Compiled = CheckResult;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, params: DenierParams) -> Result<CheckResult, Vec<ParamError>> {
        params.compile()
    }

    fn build(
        &self,
        result: &CheckResult,
        _ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(handler::DenierHandler::new(result.clone())))
    }
}

#[cfg(test)]
mod tests {
    // Only the erased trait: these tests start from params, as the config loader does.
    use super::{Denier, Template};
    use mixer_adapter_api::BuildContext;
    use mixer_adapter_api::host::AnyAdapter;
    use mixer_model::{Code, Instance};
    use serde_json::json;

    fn instance(template: Template) -> Instance {
        Instance {
            name: "i.istio-system".into(),
            template,
            fields: vec![],
        }
    }

    #[tokio::test]
    async fn denies_with_configured_status() {
        let params = json!({"status": {"code": 7, "message": "not allowed"}, "validDuration": "10s", "validUseCount": 3});
        Denier.compile(&params).expect("valid");
        let ctx = BuildContext {
            handler_name: "d".into(),
        };
        let handler = Denier.compile_and_build(&params, &ctx).expect("builds");
        let check = handler.as_check().expect("check handler");
        let result = check
            .check(&instance(Template::CheckNothing))
            .await
            .expect("decides");
        assert_eq!(result.status.code, Code::PermissionDenied);
        assert_eq!(result.status.message, "not allowed");
        assert_eq!(result.valid_duration, std::time::Duration::from_secs(10));
        assert_eq!(result.valid_use_count, 3);
        let quota = handler.as_quota().expect("quota handler");
        let args = mixer_adapter_api::QuotaArgs {
            amount: 5,
            best_effort: false,
            deduplication_id: String::new(),
            limit_override: None,
        };
        let granted = quota
            .allocate(&instance(Template::Quota), &args)
            .await
            .expect("decides");
        assert_eq!(granted.granted_amount, 0);
    }

    #[tokio::test]
    async fn defaults_follow_istio() {
        let handler = Denier
            .compile_and_build(
                &json!(null),
                &BuildContext {
                    handler_name: "d".into(),
                },
            )
            .expect("builds");
        let result = handler
            .as_check()
            .expect("check")
            .check(&instance(Template::ListEntry))
            .await
            .expect("ok");
        assert_eq!(result.status.code, Code::FailedPrecondition);
        assert_eq!(result.valid_duration, std::time::Duration::from_secs(5));
        assert_eq!(result.valid_use_count, 1000);
    }

    #[test]
    fn rejects_bad_params_with_paths() {
        let errs = Denier
            .compile(&json!({"status": {"code": 99}}))
            .expect_err("bad code");
        assert_eq!(errs[0].path, "status.code");
        let errs = Denier
            .compile(&json!({"validDuration": "soon"}))
            .expect_err("bad duration");
        assert_eq!(errs[0].path, "validDuration");
        let errs = Denier
            .compile(&json!({"statuss": {}}))
            .expect_err("unknown field");
        assert!(errs[0].message.contains("statuss"), "{}", errs[0].message);
        let errs = Denier
            .compile(&json!({"validUseCount": -1}))
            .expect_err("negative");
        assert_eq!(errs[0].path, "validUseCount");
    }
}
