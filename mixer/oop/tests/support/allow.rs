//! An adapter built on the SDK, for the tests that serve one: `listentry` checks allowed
//! when the value is the one it was made with (any value, for [`Allow::everything`]).

use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_sdk::api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, CheckHandler, Handler, ParamError, Stability,
};
use mixer_adapter_sdk::async_trait;
use mixer_adapter_sdk::model::{CheckResult, Code, Instance, ListEntryInstance, Status, Template};

/// Allows one value, or every value.
#[derive(Clone, Copy)]
pub struct Allow(Option<&'static str>);

impl Allow {
    /// Allows `value` only; others are denied as "`<value>` is not listed".
    pub fn only(value: &'static str) -> Allow {
        Allow(Some(value))
    }

    /// Allows every value.
    pub fn everything() -> Allow {
        Allow(None)
    }
}

static INFO: AdapterInfo = AdapterInfo {
    name: "allow",
    description: "allows one value, or every value",
    templates: &[Template::ListEntry],
    cacheable: true,
    stability: Stability::Alpha,
};

impl Adapter for Allow {
    type Config = serde_json::Value;
    type Compiled = ();

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, _: serde_json::Value) -> Result<(), Vec<ParamError>> {
        Ok(())
    }

    fn build(&self, _: &(), _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(*self))
    }
}

impl Handler for Allow {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }
}

#[async_trait]
impl CheckHandler for Allow {
    async fn check(&self, instance: &Instance) -> Result<CheckResult, AdapterError> {
        let value = ListEntryInstance::of(instance)
            .and_then(|i| i.value)
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        let mut answer = CheckResult::ok(Duration::from_secs(5), 1000);
        if self.0.is_some_and(|only| only != value) {
            answer.status = Status::new(Code::PermissionDenied, format!("{value} is not listed"));
        }
        Ok(answer)
    }
}
