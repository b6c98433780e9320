//! The conformance kit in one call, as an adapter crate's own test would use it: only the
//! SDK's public API (`mixer_adapter_sdk::testkit`, feature `testkit`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_sdk::api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, CheckHandler, Handler, ParamError, Stability,
};
use mixer_adapter_sdk::model::{CheckResult, Code, Instance, ListEntryInstance, Status, Template};
use mixer_adapter_sdk::testkit::{assert_adapter_conforms, promise};
use mixer_adapter_sdk::{async_trait, testkit};
use serde_json::json;

/// Lets through the values in `params.allowed`; with `hang`, never answers.
struct Allow;

static INFO: AdapterInfo = AdapterInfo {
    name: "allow",
    description: "lets through the values listed in params.allowed",
    templates: &[Template::ListEntry],
    cacheable: true,
    stability: Stability::Alpha,
};

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    allowed: Vec<String>,
    #[serde(default)]
    hang: bool,
}

impl Adapter for Allow {
    type Config = Config;
    type Compiled = (HashSet<String>, bool);

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, config: Config) -> Result<(HashSet<String>, bool), Vec<ParamError>> {
        if config.allowed.is_empty() {
            return Err(vec![ParamError::new("allowed", "name at least one value")]);
        }
        Ok((config.allowed.into_iter().collect(), config.hang))
    }

    fn build(
        &self,
        config: &(HashSet<String>, bool),
        _: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(AllowHandler(config.clone())))
    }
}

struct AllowHandler((HashSet<String>, bool));

impl Handler for AllowHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }
}

#[async_trait]
impl CheckHandler for AllowHandler {
    async fn check(&self, instance: &Instance) -> Result<CheckResult, AdapterError> {
        let (allowed, hang) = &self.0;
        if *hang {
            std::future::pending::<()>().await;
        }
        let value = ListEntryInstance::of(instance)
            .and_then(|entry| entry.value)
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        let mut answer = CheckResult::ok(Duration::from_secs(5), 1000);
        if !allowed.contains(value) {
            answer.status = Status::new(Code::PermissionDenied, format!("{value} is not allowed"));
        }
        Ok(answer)
    }
}

#[tokio::test]
async fn an_adapter_conforms_in_one_call() {
    let report = assert_adapter_conforms(Allow, json!({"allowed": ["a"]})).await;
    assert!(report.holds());
    assert!(
        report
            .promises
            .iter()
            .any(|(p, o)| *p == promise::ANSWERS && *o == testkit::Outcome::Held),
        "{report}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hanging_adapter_is_named_by_the_promise_it_breaks() {
    let case = testkit::case(Arc::new(Allow), json!({"allowed": ["a"], "hang": true}));
    let report = testkit::report(&case).await;
    let broken: Vec<(&str, Vec<String>)> =
        report.broken().map(|(p, how)| (p, how.to_vec())).collect();
    assert_eq!(
        broken,
        [(
            promise::ANSWERS,
            vec!["a listentry call did not answer within 5s".to_owned()]
        )],
        "{report}"
    );
}
