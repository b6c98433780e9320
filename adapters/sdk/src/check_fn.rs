//! [`check_fn`]: a check handler from a plain function, for adapters whose check does not
//! wait on anything (the handler and its `CheckHandler` impl written for you).

use std::sync::Arc;

use async_trait::async_trait;
use mixer_adapter_api::{AdapterError, CheckHandler, Handler};
use mixer_model::{CheckResult, Instance};

/// A handler whose checks `check` answers: what [`Adapter::build`] returns for a check
/// adapter that needs no `.await` (it reads memory, or a file through
/// [`WatchedFile`](crate::WatchedFile)). An adapter that calls a backend writes its own
/// handler with `#[async_trait] impl CheckHandler`.
///
/// [`Adapter::build`]: mixer_adapter_api::Adapter::build
pub fn check_fn<F>(check: F) -> Arc<dyn Handler>
where
    F: Fn(&Instance) -> Result<CheckResult, AdapterError> + Send + Sync + 'static,
{
    Arc::new(CheckFn(check))
}

struct CheckFn<F>(F);

impl<F> Handler for CheckFn<F>
where
    F: Fn(&Instance) -> Result<CheckResult, AdapterError> + Send + Sync + 'static,
{
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }
}

#[async_trait]
impl<F> CheckHandler for CheckFn<F>
where
    F: Fn(&Instance) -> Result<CheckResult, AdapterError> + Send + Sync + 'static,
{
    async fn check(&self, instance: &Instance) -> Result<CheckResult, AdapterError> {
        (self.0)(instance)
    }
}

#[cfg(test)]
mod tests {
    use mixer_model::{Code, Status, Template};

    use super::*;

    #[tokio::test]
    async fn the_function_answers_checks_and_nothing_else() {
        let handler = check_fn(|instance| {
            let mut answer = CheckResult::ok(std::time::Duration::from_secs(1), 1);
            answer.status = Status::new(Code::PermissionDenied, instance.name.to_string());
            Ok(answer)
        });
        let instance = Instance {
            name: "nothing.instance.istio-system".into(),
            template: Template::CheckNothing,
            fields: vec![],
        };
        let answer = handler
            .as_check()
            .expect("a check handler")
            .check(&instance)
            .await
            .expect("answered");
        assert_eq!(answer.status.code, Code::PermissionDenied);
        assert_eq!(answer.status.message, "nothing.instance.istio-system");
        assert!(handler.as_report().is_none() && handler.as_quota().is_none());
    }
}
