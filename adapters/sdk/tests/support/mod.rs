//! The adapters these tests serve: each takes no params and differs from the others only in
//! its templates and its check, so one adapter type wraps any check handler.

use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_sdk::api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, CheckHandler, Handler, ParamError,
};
use mixer_adapter_sdk::async_trait;
use mixer_adapter_sdk::model::{CheckResult, Instance};

/// An adapter without params whose every handler answers checks with `check`.
pub struct CheckAdapter<C> {
    info: &'static AdapterInfo,
    check: Arc<C>,
}

impl<C: CheckHandler + 'static> CheckAdapter<C> {
    /// `info` declares the templates; `check` answers them.
    pub fn new(info: &'static AdapterInfo, check: C) -> CheckAdapter<C> {
        CheckAdapter {
            info,
            check: Arc::new(check),
        }
    }
}

impl<C: CheckHandler + 'static> Adapter for CheckAdapter<C> {
    type Config = serde_json::Value;
    type Compiled = ();

    fn info(&self) -> &AdapterInfo {
        self.info
    }

    fn compile(&self, _: serde_json::Value) -> Result<(), Vec<ParamError>> {
        Ok(())
    }

    fn build(&self, _: &(), _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(Checks(self.check.clone())))
    }
}

struct Checks<C>(Arc<C>);

impl<C: CheckHandler + 'static> Handler for Checks<C> {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(&*self.0)
    }
}

/// Allows every check.
#[allow(dead_code)] // Not every test target that includes this module allows everything.
pub struct AllowAll;

#[async_trait]
impl CheckHandler for AllowAll {
    async fn check(&self, _: &Instance) -> Result<CheckResult, AdapterError> {
        Ok(CheckResult::ok(Duration::from_secs(5), 1000))
    }
}
