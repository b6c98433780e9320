//! The conformance kit (feature `testkit`): what every adapter owes the runtime, checked the
//! same way for each, whether it is built in, out of process or a Wasm plugin.
//!
//! An adapter's test gives a [`Case`] (params that build, an instance per template it
//! declares, and, for an adapter with a backend, params whose backend cannot answer) and calls
//! [`assert_conforms`], or, with the [`default_instance`] of each template and no backend,
//! calls [`assert_adapter_conforms`] with the adapter and its params: one call. Either gives
//! a [`Report`] that names each promise and whether it held (and how it was broken); `mixer
//! conformance` prints the same report for an adapter in another process or a Wasm plugin.
//! The kit checks that:
//!
//! - its info names it, describes it and declares each template once;
//! - `validate` of an empty config answers (errors, if any, say what is wrong) rather than
//!   panicking, and the case's params validate and build;
//! - the built handler offers the trait of every declared template, and no trait whose
//!   variety it declares no template for (the runtime routes by the declaration);
//! - one instance of each declared template gets an answer within the call limit;
//! - an attribute generator's answer names only its template's outputs, each once and of
//!   its declared type, and a denial in it has a status other than OK that says why
//!   ([`generated_violations`]);
//! - `close` may run twice, and the adapter builds again afterwards;
//! - with its backend unreachable, every call that goes to the backend at once fails within the
//!   limit with an error that says why, so the handler's fail policy can apply, and never
//!   answers as if it had decided.

use std::sync::Arc;
use std::time::Duration;

use mixer_model::{FieldValue, Instance, Template, Timestamp, Value, Variety};

use crate::adapter::BuildContext;
use crate::error::AdapterError;
use crate::handler::{Generated, Handler, QuotaArgs};
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

/// A promise of the kit, in the words its report uses.
pub mod promise {
    /// The adapter's info names it, describes it and declares each template once.
    pub const INFO: &str = "its info names it, describes it and declares each template once";
    /// Validating an empty config answers, and every error it gives says something.
    pub const EMPTY_CONFIG: &str =
        "validate of an empty config answers without panicking, each error saying what is wrong";
    /// The case's params validate and build a handler.
    pub const BUILDS: &str = "the params validate and build a handler";
    /// The handler offers the trait of each declared template, and no trait of a variety it
    /// declares no template of.
    pub const TRAITS: &str = "the handler offers the trait of each declared template, and no other";
    /// The case gives one instance of each declared template (a promise of the case itself).
    pub const INSTANCES: &str =
        "the case gives an instance of each declared template, and no other";
    /// A call of a template the adapter does not declare fails rather than answers.
    pub const UNDECLARED: &str = "a call of a template it does not declare fails";
    /// A call of each declared template answers within the call limit.
    pub const ANSWERS: &str = "a call of each declared template answers within the call limit";
    /// An attribute generator answers with its template's outputs, typed as declared, and
    /// a denial that is one.
    pub const GENERATED: &str = "a generator's answer gives only its template's outputs, once each and typed as declared, and a denial with a status other than OK that says why";
    /// `close` may run twice, and the adapter builds again afterwards.
    pub const CLOSE: &str = "close may run twice, and the adapter builds again afterwards";
    /// With the backend out of reach, every call that goes to it fails, in time, saying why.
    pub const UNREACHABLE: &str =
        "with its backend unreachable, each call that reaches it fails in time, saying why";
}

/// Whether one promise held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It held.
    Held,
    /// It was broken, each way in words.
    Broken(Vec<String>),
    /// It was not checked, and why (nothing to check it with, or an earlier step failed).
    NotChecked(String),
}

/// What the kit found: each promise and whether it held.
#[derive(Clone, Debug)]
pub struct Report {
    /// The adapter checked, in words (`adapter "denier"`).
    pub adapter: String,
    /// Each promise, in the order checked, with its outcome.
    pub promises: Vec<(&'static str, Outcome)>,
}

impl Report {
    fn new(adapter: &str) -> Report {
        Report {
            adapter: format!("adapter {adapter:?}"),
            promises: Vec::new(),
        }
    }

    fn add(&mut self, promise: &'static str, broken: Vec<String>) {
        let outcome = if broken.is_empty() {
            Outcome::Held
        } else {
            Outcome::Broken(broken)
        };
        self.promises.push((promise, outcome));
    }

    fn skip(&mut self, promise: &'static str, why: impl Into<String>) {
        self.promises
            .push((promise, Outcome::NotChecked(why.into())));
    }

    /// Whether no promise was broken (those not checked do not count against it).
    pub fn holds(&self) -> bool {
        self.broken().next().is_none()
    }

    /// The promises broken, each with how.
    pub fn broken(&self) -> impl Iterator<Item = (&'static str, &[String])> {
        self.promises.iter().filter_map(|(p, o)| match o {
            Outcome::Broken(how) => Some((*p, how.as_slice())),
            _ => None,
        })
    }
}

impl std::fmt::Display for Report {
    /// One line per promise (`held`, `BROKEN` with each way under it, or `not checked` with
    /// why), then a summary line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "conformance of {}:", self.adapter)?;
        for (promise, outcome) in &self.promises {
            match outcome {
                Outcome::Held => writeln!(f, "  held         {promise}")?,
                Outcome::Broken(how) => {
                    writeln!(f, "  BROKEN       {promise}")?;
                    for h in how {
                        writeln!(f, "                 - {h}")?;
                    }
                }
                Outcome::NotChecked(why) => writeln!(f, "  not checked  {promise} ({why})")?,
            }
        }
        let broken = self.broken().count();
        let checked = self
            .promises
            .iter()
            .filter(|(_, o)| !matches!(o, Outcome::NotChecked(_)))
            .count();
        if broken == 0 {
            write!(f, "all {checked} promises checked held")
        } else {
            write!(f, "{broken} of {checked} promises checked broken")
        }
    }
}

/// Runs every check of the kit and panics with its report when a promise is broken.
pub async fn assert_conforms(case: &Case) -> Report {
    let report = report(case).await;
    assert!(report.holds(), "the adapter does not conform:\n{report}");
    report
}

/// Every check of the kit the adapter fails, in words.
pub async fn violations(case: &Case) -> Vec<String> {
    report(case)
        .await
        .broken()
        .flat_map(|(_, how)| how.iter().cloned())
        .collect()
}

/// Checks each promise of the kit, in order; a step that needs a handler is not checked when
/// none builds.
pub async fn report(case: &Case) -> Report {
    let mut report = Report::new(case.adapter.info().name);
    let mut out = Vec::new();
    info(case, &mut out);
    report.add(promise::INFO, std::mem::take(&mut out));
    empty_config(case, &mut out);
    report.add(promise::EMPTY_CONFIG, std::mem::take(&mut out));
    templates_covered(case, &mut out);
    report.add(promise::INSTANCES, std::mem::take(&mut out));
    let handler = build(case, &case.params, "the case's params", &mut out);
    report.add(promise::BUILDS, std::mem::take(&mut out));
    let Some(handler) = handler else {
        let why = "no handler was built";
        for p in [
            promise::TRAITS,
            promise::UNDECLARED,
            promise::ANSWERS,
            promise::GENERATED,
            promise::CLOSE,
            promise::UNREACHABLE,
        ] {
            report.skip(p, why);
        }
        return report;
    };
    traits(case, handler.as_ref(), &mut out);
    report.add(promise::TRAITS, std::mem::take(&mut out));
    if case.offers_every_variety {
        undeclared(case, handler.as_ref(), &mut out).await;
        report.add(promise::UNDECLARED, std::mem::take(&mut out));
    } else {
        report.skip(
            promise::UNDECLARED,
            "the handler offers only the traits of its templates",
        );
    }
    answers(case, handler.as_ref(), &mut out).await;
    report.add(promise::ANSWERS, std::mem::take(&mut out));
    if case
        .instances
        .iter()
        .any(|i| i.template.variety() == Variety::AttributeGenerator)
    {
        generated(case, handler.as_ref(), &mut out).await;
        report.add(promise::GENERATED, std::mem::take(&mut out));
    } else {
        report.skip(
            promise::GENERATED,
            "the case gives no instance of an attribute-generating template",
        );
    }
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
    report.add(promise::CLOSE, std::mem::take(&mut out));
    match &case.unreachable {
        None => report.skip(promise::UNREACHABLE, "the case gives no unreachable params"),
        Some(unreachable) => {
            if let Some(handler) = build(
                case,
                &unreachable.params,
                "the unreachable params",
                &mut out,
            ) {
                failures(case, unreachable.immediate, handler.as_ref(), &mut out).await;
                handler.close().await;
            }
            report.add(promise::UNREACHABLE, std::mem::take(&mut out));
        }
    }
    report
}

/// A valid instance of `template`, as a rule would send it, named `<kind>.instance.default`
/// (`requestcount` for metric and quota, `entry` for listentry, `auth`, `accesslog`, `span`,
/// `nothing`), the names an adapter's params refer to when they name instances.
pub fn default_instance(template: Template) -> Instance {
    let (name, fields) = match template {
        Template::Authorization => (
            "auth.instance.default",
            vec![
                ("subject", map(&[("user", "alice")])),
                ("action", map(&[("method", "GET")])),
            ],
        ),
        Template::CheckNothing | Template::ReportNothing => ("nothing.instance.default", vec![]),
        Template::ListEntry => ("entry.instance.default", vec![("value", value("a"))]),
        Template::Quota => (
            "requestcount.instance.default",
            vec![("dimensions", map(&[("source", "reviews")]))],
        ),
        Template::Metric => (
            "requestcount.instance.default",
            vec![
                ("value", value(1_i64)),
                ("dimensions", map(&[("source", "reviews")])),
            ],
        ),
        Template::LogEntry => (
            "accesslog.instance.default",
            vec![
                ("variables", map(&[("source", "reviews")])),
                ("timestamp", FieldValue::Value(now())),
                ("severity", value("info")),
            ],
        ),
        Template::Kubernetes => (
            "attributes.instance.default",
            vec![
                (
                    "source_uid",
                    value("kubernetes://reviews-v1-5d8f7c9b4-x2x7z.default"),
                ),
                (
                    "destination_uid",
                    value("kubernetes://ratings-v1-6f9b8d7c5-q8j2k.default"),
                ),
                ("destination_port", value(9080_i64)),
            ],
        ),
        Template::Jwt => (
            "jwt.instance.default",
            vec![("token", value("Bearer x.y.z"))],
        ),
        Template::ApiKey => ("apikey.instance.default", vec![("key", value("k-123"))]),
        Template::TraceSpan => (
            "span.instance.default",
            vec![
                ("trace_id", value("0123456789abcdef0123456789abcdef")),
                ("span_id", value("0123456789abcdef")),
                ("span_name", value("GET /")),
                ("start_time", FieldValue::Value(now())),
                ("end_time", FieldValue::Value(now())),
            ],
        ),
    };
    Instance {
        name: name.into(),
        template,
        fields,
    }
}

fn value(v: impl Into<Value>) -> FieldValue {
    FieldValue::Value(v.into())
}

fn map(entries: &[(&str, &str)]) -> FieldValue {
    FieldValue::Map(
        entries
            .iter()
            .map(|(k, v)| (Arc::from(*k), Value::from(*v)))
            .collect(),
    )
}

fn now() -> Value {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    Value::Timestamp(Timestamp(nanos))
}

/// The case of `adapter` with `params`: the [`default_instance`] of each template those
/// params declare, no unreachable backend, and only the traits of its templates offered.
pub fn case(adapter: Arc<dyn AnyAdapter>, params: Params) -> Case {
    let templates = match adapter.compile(&params) {
        Ok(config) => adapter.templates_of(&config),
        Err(_) => adapter.info().templates.to_vec(),
    };
    let mut instances: Vec<Instance> = Vec::new();
    for t in templates {
        if !instances.iter().any(|i| i.template == t) {
            instances.push(default_instance(t));
        }
    }
    Case {
        adapter,
        params,
        unreachable: None,
        instances,
        offers_every_variety: false,
    }
}

/// The kit in one call, for an adapter crate's own test: checks `adapter` built from
/// `params` with the [`default_instance`] of each template it declares, prints the report,
/// and panics with it when a promise is broken.
///
/// ```no_run
/// # async fn t(adapter: impl mixer_adapter_api::host::AnyAdapter + 'static) {
/// mixer_adapter_api::testkit::assert_adapter_conforms(adapter, serde_json::json!({})).await;
/// # }
/// ```
pub async fn assert_adapter_conforms<A: AnyAdapter + 'static>(
    adapter: A,
    params: Params,
) -> Report {
    let report = report(&case(Arc::new(adapter), params)).await;
    eprintln!("{report}");
    assert!(report.holds(), "the adapter does not conform:\n{report}");
    report
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
    for variety in [
        Variety::Check,
        Variety::Quota,
        Variety::Report,
        Variety::AttributeGenerator,
    ] {
        let offered = match variety {
            Variety::Check => handler.as_check().is_some(),
            Variety::Quota => handler.as_quota().is_some(),
            Variety::Report => handler.as_report().is_some(),
            Variety::AttributeGenerator => handler.as_attributes().is_some(),
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
        Variety::AttributeGenerator => {
            let h = handler.as_attributes()?;
            tokio::time::timeout(CALL_LIMIT, h.generate(instance))
                .await
                .map(|r| r.map(|g| format!("{g:?}")))
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
/// What is wrong with `answer`, a generator's answer to an instance of `template`: an output
/// the template does not declare, one given twice or of another type than declared, a
/// denial whose status is OK or says nothing. Empty when nothing is. For an adapter's own
/// tests of its answers, beside [`report`].
pub fn generated_violations(template: Template, answer: &Generated) -> Vec<String> {
    let mut out = Vec::new();
    let name = template.name();
    for (i, (output, value)) in answer.outputs.iter().enumerate() {
        let Some(spec) = template.output(output) else {
            out.push(format!(
                "{name} answered output {output:?}, which the template does not declare"
            ));
            continue;
        };
        if answer.outputs[..i].iter().any(|(o, _)| o == output) {
            out.push(format!("{name} answered output {output} twice"));
        }
        if let mixer_model::FieldKind::Value(Some(ty)) = spec.kind
            && value.value_type() != ty
        {
            out.push(format!(
                "{name} answered output {output} as a {}, declared {ty}",
                value.value_type()
            ));
        }
    }
    if let Some(denial) = &answer.denial {
        if denial.status.is_ok() {
            out.push(format!("{name} answered a denial whose status is OK"));
        } else if denial.status.message.trim().is_empty() {
            out.push(format!(
                "{name} answered a denial ({:?}) that does not say why",
                denial.status.code
            ));
        }
    }
    out
}

/// Each attribute-generating instance of the case, generated once more and its answer
/// checked by [`generated_violations`]; a failure or a hang is [`promise::ANSWERS`]'s.
async fn generated(case: &Case, handler: &dyn Handler, out: &mut Vec<String>) {
    let Some(generator) = handler.as_attributes() else {
        return;
    };
    for instance in case
        .instances
        .iter()
        .filter(|i| i.template.variety() == Variety::AttributeGenerator)
    {
        if let Ok(Ok(answer)) = tokio::time::timeout(CALL_LIMIT, generator.generate(instance)).await
        {
            out.extend(generated_violations(instance.template, &answer));
        }
    }
}

async fn undeclared(case: &Case, handler: &dyn Handler, out: &mut Vec<String>) {
    let declared = declared(case);
    for template in [
        Template::CheckNothing,
        Template::Quota,
        Template::ReportNothing,
        Template::ApiKey,
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
        let report = report(&case).await;
        assert!(!report.holds());
        let broken: Vec<&str> = report.broken().map(|(p, _)| p).collect();
        assert_eq!(
            broken,
            [
                promise::INFO,
                promise::EMPTY_CONFIG,
                promise::INSTANCES,
                promise::TRAITS,
                promise::UNREACHABLE
            ]
        );
        let printed = report.to_string();
        for line in [
            format!("  BROKEN       {}", promise::TRAITS),
            format!("  held         {}", promise::ANSWERS),
            format!("  not checked  {}", promise::UNDECLARED),
            "5 of 8 promises checked broken".to_owned(),
        ] {
            assert!(printed.contains(&line), "{line:?} not in:\n{printed}");
        }
    }

    #[test]
    fn a_generators_answer_is_checked_against_its_templates_outputs() {
        use crate::handler::Denial;
        use mixer_model::{Code, Status};
        let sloppy = Generated {
            outputs: vec![
                ("principal", Value::from("team-a")),
                ("tier", Value::from("gold")),
                ("principal", Value::from("team-b")),
                ("claims", Value::from("tier=gold")),
            ],
            valid_duration: None,
            denial: Some(Denial {
                status: Status::new(Code::Unauthenticated, " "),
                response_headers: vec![],
            }),
        };
        let found = generated_violations(Template::ApiKey, &sloppy);
        assert_eq!(
            found,
            [
                "apikey answered output \"tier\", which the template does not declare",
                "apikey answered output principal twice",
                "apikey answered output claims as a STRING, declared STRING_MAP",
                "apikey answered a denial (Unauthenticated) that does not say why",
            ]
        );
        let ok_denial = Generated::denied(Denial {
            status: Status::OK,
            response_headers: vec![],
        });
        assert_eq!(
            generated_violations(Template::Jwt, &ok_denial),
            ["jwt answered a denial whose status is OK"]
        );
        let fine = Generated::outputs(vec![("source_workload_name", Value::from("reviews-v1"))]);
        assert!(generated_violations(Template::Kubernetes, &fine).is_empty());
    }
}
