//! The conformance kit (feature `testkit`): what every adapter owes the runtime, checked the
//! same way for each, whether it is built in, out of process or a Wasm plugin.
//!
//! An adapter's test gives a [`Case`] (params that build, an instance per template it
//! declares, and, for an adapter with a backend, params whose backend cannot answer) and calls
//! [`assert_conforms`]. The kit checks that:
//!
//! - its info names it, describes it and declares each template once;
//! - `validate` of an empty config answers (errors, if any, say what is wrong) rather than
//!   panicking, and the case's params validate and build;
//! - the built handler offers the trait of every declared template, and no trait whose
//!   variety it declares no template for (the runtime routes by the declaration);
//! - one instance of each declared template gets an answer within the call limit;
//! - `close` may run twice, and the adapter builds again afterwards;
//! - with its backend unreachable, every call that goes to the backend at once fails within the
//!   limit with an error that says why, so the handler's fail policy can apply, and never
//!   answers as if it had decided.

use std::sync::Arc;
use std::time::Duration;

use mixer_model::{Instance, Template, Variety};

use crate::adapter::BuildContext;
use crate::error::AdapterError;
use crate::handler::{Handler, QuotaArgs};
use crate::host::{AnyAdapter, Params};

/// How long one call may take before the kit calls it hung.
pub const CALL_LIMIT: Duration = Duration::from_secs(5);

/// One adapter under test.
pub struct Case {
    /// The adapter.
    pub adapter: Arc<dyn AnyAdapter>,
    /// Params that validate and build, with a backend that answers.
    pub params: Params,
    /// For adapters with a backend: params whose backend cannot answer.
    pub unreachable: Option<Unreachable>,
    /// An instance of each template the adapter declares.
    pub instances: Vec<Instance>,
    /// The handler learns what its peer serves only when it calls (an out-of-process
    /// adapter): it offers every variety, and a call of a template the peer does not serve
    /// must fail rather than answer. `false` for adapters whose info is the whole truth.
    pub offers_every_variety: bool,
}

/// An adapter's backend out of reach.
pub struct Unreachable {
    /// Params that validate and build but whose backend cannot answer (a closed port).
    pub params: Params,
    /// The templates whose calls go to the backend at once, and so must fail while it is out
    /// of reach; the others are aggregated and sent later (OTLP metrics), or stay local.
    pub immediate: &'static [Template],
}

/// Runs every check of the kit and panics listing each one the adapter fails.
pub async fn assert_conforms(case: &Case) {
    let violations = violations(case).await;
    assert!(
        violations.is_empty(),
        "adapter {:?} does not conform:\n  {}",
        case.adapter.info().name,
        violations.join("\n  ")
    );
}

/// Every check of the kit the adapter fails, in words.
pub async fn violations(case: &Case) -> Vec<String> {
    let mut out = Vec::new();
    info(case, &mut out);
    empty_config(case, &mut out);
    let Some(handler) = build(case, &case.params, "the case's params", &mut out) else {
        return out;
    };
    traits(case, handler.as_ref(), &mut out);
    answers(case, handler.as_ref(), &mut out).await;
    handler.close().await;
    handler.close().await;
    if let Some(again) = build(
        case,
        &case.params,
        "the case's params, after close",
        &mut out,
    ) {
        again.close().await;
    }
    if let Some(unreachable) = &case.unreachable
        && let Some(handler) = build(
            case,
            &unreachable.params,
            "the unreachable params",
            &mut out,
        )
    {
        failures(case, unreachable.immediate, handler.as_ref(), &mut out).await;
        handler.close().await;
    }
    out
}

/// The templates the case's handler accepts: its params' own, for an adapter whose templates
/// depend on them (a Wasm plugin), or the adapter's.
fn declared(case: &Case) -> Vec<Template> {
    match case.adapter.compile(&case.params) {
        Ok(config) => case.adapter.templates_of(&config),
        Err(_) => case.adapter.info().templates.to_vec(),
    }
}

fn info(case: &Case, out: &mut Vec<String>) {
    let info = case.adapter.info();
    if info.name.is_empty() {
        out.push("info: the name is empty".into());
    }
    if info.description.trim().is_empty() {
        out.push("info: the description is empty".into());
    }
    if info.templates.is_empty() {
        out.push("info: no template is declared".into());
    }
    for (i, t) in info.templates.iter().enumerate() {
        if info.templates[..i].contains(t) {
            out.push(format!("info: template {} is declared twice", t.name()));
        }
    }
}

fn empty_config(case: &Case, out: &mut Vec<String>) {
    for empty in [Params::Null, Params::Object(Default::default())] {
        let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            case.adapter.compile(&empty).map(drop)
        }));
        match answer {
            Err(_) => out.push(format!("validate({empty}) panicked")),
            Ok(Err(errors)) => {
                if errors.is_empty() {
                    out.push(format!("validate({empty}) failed with no error"));
                }
                for e in errors.iter().filter(|e| e.message.trim().is_empty()) {
                    out.push(format!(
                        "validate({empty}): an error at {:?} says nothing",
                        e.path
                    ));
                }
            }
            Ok(Ok(())) => {}
        }
    }
}

fn build(
    case: &Case,
    params: &Params,
    what: &str,
    out: &mut Vec<String>,
) -> Option<Arc<dyn Handler>> {
    let config = match case.adapter.compile(params) {
        Ok(config) => config,
        Err(errors) => {
            let said: Vec<String> = errors.iter().map(ToString::to_string).collect();
            out.push(format!("{what} do not validate: {}", said.join("; ")));
            return None;
        }
    };
    let ctx = BuildContext {
        handler_name: Arc::from(format!("conformance.{}", case.adapter.info().name)),
    };
    match case.adapter.build_compiled(&config, &ctx) {
        Ok(h) => Some(h),
        Err(e) => {
            out.push(format!("{what} validate but do not build: {}", e.message));
            None
        }
    }
}

fn traits(case: &Case, handler: &dyn Handler, out: &mut Vec<String>) {
    let declared = declared(case);
    for variety in [Variety::Check, Variety::Quota, Variety::Report] {
        let offered = match variety {
            Variety::Check => handler.as_check().is_some(),
            Variety::Quota => handler.as_quota().is_some(),
            Variety::Report => handler.as_report().is_some(),
        };
        let wanted: Vec<&str> = declared
            .iter()
            .filter(|t| t.variety() == variety)
            .map(|t| t.name())
            .collect();
        if !offered && !wanted.is_empty() {
            out.push(format!(
                "templates {} are declared but the handler offers no {variety:?} trait",
                wanted.join(", ")
            ));
        }
        if offered && wanted.is_empty() && !case.offers_every_variety {
            out.push(format!(
                "the handler offers the {variety:?} trait but declares no template of it"
            ));
        }
    }
}

/// What one call of `instance`'s variety gave: `None` when the handler lacks its trait.
async fn call(
    handler: &dyn Handler,
    instance: &Instance,
) -> Option<Result<Result<String, AdapterError>, ()>> {
    let args = QuotaArgs {
        amount: 1,
        ..QuotaArgs::default()
    };
    let answer = match instance.template.variety() {
        Variety::Check => {
            let h = handler.as_check()?;
            tokio::time::timeout(CALL_LIMIT, h.check(instance))
                .await
                .map(|r| r.map(|c| format!("{c:?}")))
        }
        Variety::Quota => {
            let h = handler.as_quota()?;
            tokio::time::timeout(CALL_LIMIT, h.allocate(instance, &args))
                .await
                .map(|r| r.map(|q| format!("{q:?}")))
        }
        Variety::Report => {
            let h = handler.as_report()?;
            tokio::time::timeout(CALL_LIMIT, h.report(std::slice::from_ref(instance)))
                .await
                .map(|r| r.map(|()| "reported".to_owned()))
        }
    };
    Some(answer.map_err(|_| ()))
}

fn templates_covered(case: &Case, out: &mut Vec<String>) {
    let declared = declared(case);
    for i in &case.instances {
        if !declared.contains(&i.template) {
            out.push(format!(
                "the case gives an instance of {}, which the adapter does not declare",
                i.template.name()
            ));
        }
    }
    let mut missing: Vec<Template> = declared
        .iter()
        .copied()
        .filter(|t| !case.instances.iter().any(|i| i.template == *t))
        .collect();
    missing.dedup();
    for t in &missing {
        out.push(format!("the case gives no instance of {}", t.name()));
    }
}

async fn answers(case: &Case, handler: &dyn Handler, out: &mut Vec<String>) {
    templates_covered(case, out);
    if case.offers_every_variety {
        undeclared(case, handler, out).await;
    }
    for instance in &case.instances {
        let name = instance.template.name();
        match call(handler, instance).await {
            None => {}
            Some(Err(())) => out.push(format!(
                "a {name} call did not answer within {CALL_LIMIT:?}"
            )),
            Some(Ok(Err(e))) => out.push(format!("a {name} call failed: {}", e.message)),
            Some(Ok(Ok(_))) => {}
        }
    }
}

/// Calls of one template of each variety the adapter declares none of: each must fail.
async fn undeclared(case: &Case, handler: &dyn Handler, out: &mut Vec<String>) {
    let declared = declared(case);
    for template in [
        Template::CheckNothing,
        Template::Quota,
        Template::ReportNothing,
    ] {
        if declared.iter().any(|t| t.variety() == template.variety()) {
            continue;
        }
        let probe = Instance {
            name: "undeclared.instance.default".into(),
            template,
            fields: Vec::new(),
        };
        match call(handler, &probe).await {
            None => out.push(format!(
                "the handler does not offer the {:?} trait, though the case says it offers every variety",
                template.variety()
            )),
            Some(Err(())) => out.push(format!(
                "a call of undeclared {} did not answer within {CALL_LIMIT:?}",
                template.name()
            )),
            Some(Ok(Ok(answer))) => out.push(format!(
                "a call of undeclared {} answered {answer} instead of failing",
                template.name()
            )),
            Some(Ok(Err(_))) => {}
        }
    }
}

async fn failures(
    case: &Case,
    immediate: &[Template],
    handler: &dyn Handler,
    out: &mut Vec<String>,
) {
    if immediate.is_empty() {
        out.push("the unreachable backend names no template whose calls reach it".into());
    }
    let declared = declared(case);
    for t in immediate {
        if !declared.contains(t) {
            out.push(format!(
                "the unreachable backend names {}, which the adapter does not declare",
                t.name()
            ));
        }
    }
    for instance in case
        .instances
        .iter()
        .filter(|i| immediate.contains(&i.template))
    {
        let name = instance.template.name();
        match call(handler, instance).await {
            None => {}
            Some(Err(())) => out.push(format!(
                "with the backend unreachable, a {name} call did not answer within {CALL_LIMIT:?}"
            )),
            Some(Ok(Ok(answer))) => out.push(format!(
                "with the backend unreachable, a {name} call answered {answer} instead of failing"
            )),
            Some(Ok(Err(e))) if e.message.trim().is_empty() => out.push(format!(
                "with the backend unreachable, a {name} call failed with an empty message"
            )),
            Some(Ok(Err(_))) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use mixer_model::CheckResult;

    use super::*;
    use crate::adapter::{Adapter, AdapterInfo, Stability};
    use crate::error::ParamError;
    use crate::handler::CheckHandler;

    /// Declares checknothing and a report template but implements only the check side, and
    /// panics on an empty config.
    struct Sloppy;
    static SLOPPY: AdapterInfo = AdapterInfo {
        name: "sloppy",
        description: "breaks the rules on purpose",
        templates: &[Template::CheckNothing, Template::Metric, Template::Metric],
        cacheable: true,
        stability: Stability::Alpha,
    };
    #[derive(serde::Deserialize)]
    struct SloppyConfig {
        a: Option<u32>,
    }
    impl Adapter for Sloppy {
        type Config = SloppyConfig;
        type Compiled = SloppyConfig;
        fn info(&self) -> &AdapterInfo {
            &SLOPPY
        }
        fn compile(&self, config: SloppyConfig) -> Result<SloppyConfig, Vec<ParamError>> {
            assert!(config.a.is_some(), "no params");
            Ok(config)
        }
        fn build(
            &self,
            _: &SloppyConfig,
            _: &BuildContext,
        ) -> Result<Arc<dyn Handler>, AdapterError> {
            Ok(Arc::new(SloppyHandler))
        }
    }
    struct SloppyHandler;
    impl Handler for SloppyHandler {
        fn as_check(&self) -> Option<&dyn CheckHandler> {
            Some(self)
        }
    }
    #[async_trait]
    impl CheckHandler for SloppyHandler {
        async fn check(&self, _: &Instance) -> Result<CheckResult, AdapterError> {
            // Answers even when its "backend" is unreachable.
            Ok(CheckResult::ok(Duration::from_secs(1), 1))
        }
    }

    fn instance(template: Template) -> Instance {
        Instance {
            name: "i.default".into(),
            template,
            fields: Vec::new(),
        }
    }

    #[tokio::test]
    async fn each_broken_rule_is_named() {
        let case = Case {
            adapter: Arc::new(Sloppy),
            params: serde_json::json!({"a": 1}),
            unreachable: Some(Unreachable {
                params: serde_json::json!({"a": 2}),
                immediate: &[Template::CheckNothing],
            }),
            instances: vec![instance(Template::CheckNothing)],
            offers_every_variety: false,
        };
        let found = violations(&case).await.join("\n");
        for expected in [
            "template metric is declared twice",
            "validate(null) panicked",
            "templates metric, metric are declared but the handler offers no Report trait",
            "the case gives no instance of metric",
            "with the backend unreachable, a checknothing call answered",
        ] {
            assert!(found.contains(expected), "{expected:?} not in:\n{found}");
        }
    }
}
