//! `mixer test PATH`: declarative policy tests.
//!
//! A test file (`*_test.yaml`) names the config it tests and lists cases: an attribute bag and
//! what the mixer must decide for it.
//!
//! ```yaml
//! config: ../config          # file or folder, relative to this file
//! tests:
//! - name: a denied request
//!   attributes:              # attribute name -> value (maps for STRING_MAP attributes)
//!     request.headers: {x-mixer-deny: "true"}
//!   expect:
//!     allowed: false
//!     code: PERMISSION_DENIED           # name or number
//!     message: x-mixer-deny             # a substring of the status message, as Istio words it (handler:message)
//!     matchedRules: [deny-on-header]    # exactly these, in order (short or full names)
//!     instances:                        # each must be produced, with these field values
//!     - name: denyrequest
//!     requestHeaders: {x-mixer-user: anonymous}
//!     validDuration: 300s               # how long, and how often, the proxy may reuse it
//!     validUseCount: 10000
//! ```
//!
//! `dryRun: {RULE: allow|deny|error}` (checks and quotas) names exactly the dry-run rules
//! (annotation `istio.io/dry-run: "true"`) that matched, each with what it would have
//! decided had it been enforced; `allowed`, `code` and `message` are the answer actually
//! given, which dry-run rules never change.
//!
//! `error: TEXT` expects the mixer not to decide (a handler failing closed, an instance that
//! cannot be built), with an error containing `TEXT`.
//! `variety: ratelimit` sends Envoy's `RateLimitRequest` (`domain`, `descriptors`: a list of
//! descriptors, each a list of `{key, value}`) through the rate limit front end's decision,
//! `repeat` times, and compares the last response's `overallCode` and per-descriptor `codes`
//! (`OK`, `OVER_LIMIT`): what a request of several descriptors comes to, with
//! envoyproxy/ratelimit's `replaces` and `quota_mode`.
//!
//! `variety: report` evaluates the report rules instead and checks `matchedRules` and
//! `instances`; the usage of quota instances with a `charge` is charged at once (so the next
//! case's quota sees it), and `charged` compares the units charged (0 for a charge dropped as
//! not a valid amount).
//!
//! `variety: quota` evaluates the quota rules (`matchedRules`, `instances`) and then allocates
//! through the handlers: `amount` units (default 1) of the quota named `quota` (default: every
//! quota instance of the matched rules, as the rate limit front end asks), one allocation per
//! `repeat` (default 1); `allowed`, `code` and `message` are compared with what a proxy makes
//! of the last allocation (a refusal with status OK and less granted than asked, as Istio's
//! memquota answers, is RESOURCE_EXHAUSTED "Quota is exhausted for: INSTANCES", the Istio
//! proxy's words) and `granted` with its granted amount. Counters live as long as the test
//! file: cases run in order on one snapshot.
//!
//! `variety: rlqs` sends usage reports of Envoy's rate limit quota filter (RLQS) through the
//! RLQS front end, in order, each on its proxy's stream (`proxy`: its `x-rlqs-proxy-id`),
//! with `domain`; a proxy's clock moves on by each of its reports' `elapsed` (default 1s).
//! `assignments` lists exactly the buckets the case's last report is answered with, each
//! with its `requestsPerTimeUnit` and `timeUnit` (default `SECOND`), its `blanketRule`
//! (`ALLOW_ALL`, `DENY_ALL`) or `abandon: true`; `[]` when it is answered with nothing (the
//! proxy's own behaviours decide). Every case starts with no demands known.
//!
//! ```yaml
//! - name: three proxies wanting 200 a second each share 300
//!   variety: rlqs
//!   domain: rlqs
//!   reports:
//!   - {proxy: a, usages: [{bucket: {name: shared}, allowed: 200}]}
//!   - {proxy: b, usages: [{bucket: {name: shared}, allowed: 150, denied: 50}]}
//!   expect:
//!     assignments:
//!     - {bucket: {name: shared}, requestsPerTimeUnit: 150}
//! ```
//!
//! ```yaml
//! - name: the fourth request in a minute is refused
//!   variety: quota
//!   attributes:
//!     ratelimit.domain: edge
//!     ratelimit.descriptor: {remote_address: 10.0.0.1}
//!     ratelimit.descriptor_keys: remote_address
//!   repeat: 4
//!   expect:
//!     allowed: false
//!     code: RESOURCE_EXHAUSTED
//!     granted: 0
//!     matchedRules: [edge-remote_address]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mixer_adapter_api::QuotaArgs;
use mixer_model::{
    AttributeBag, Code, DryRunOutcome, FieldValue, HeaderOp, Instance, Status, StringMap, Value,
    Variety, Verdict,
};
use mixer_runtime::{RuntimeMetrics, Snapshot};
use serde::Deserialize;

use crate::ConfigArgs;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TestFile {
    config: ConfigPaths,
    tests: Vec<TestCase>,
}

/// `config:` one path, or several whose files are served together (a bundle beside the
/// rules it is meant to go with, as `policies/decision-log` is tested).
#[derive(Deserialize)]
#[serde(untagged)]
enum ConfigPaths {
    One(String),
    Several(Vec<String>),
}

impl ConfigPaths {
    fn paths(&self) -> &[String] {
        match self {
            ConfigPaths::One(p) => std::slice::from_ref(p),
            ConfigPaths::Several(p) => p,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TestCase {
    name: String,
    #[serde(default)]
    variety: Option<String>,
    #[serde(default)]
    attributes: BTreeMap<String, serde_json::Value>,
    /// `variety: quota`: the quota asked for (default: any).
    #[serde(default)]
    quota: Option<String>,
    /// `variety: quota`: units per allocation (default 1).
    #[serde(default)]
    amount: Option<i64>,
    /// `variety: quota` and `ratelimit`: allocations made (default 1).
    #[serde(default)]
    repeat: Option<u32>,
    /// `variety: ratelimit`: the request's domain.
    #[serde(default)]
    domain: Option<String>,
    /// `variety: ratelimit`: the request's descriptors, each a list of entries.
    #[serde(default)]
    descriptors: Vec<Vec<DescriptorEntry>>,
    /// `variety: rlqs`: usage reports, in order.
    #[serde(default)]
    reports: Vec<RlqsReport>,
    expect: Expect,
}

/// `variety: rlqs`: one usage report of one proxy.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RlqsReport {
    proxy: String,
    usages: Vec<RlqsUsage>,
}

/// One bucket's usage in a report.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RlqsUsage {
    bucket: BTreeMap<String, String>,
    #[serde(default)]
    allowed: u64,
    #[serde(default)]
    denied: u64,
    /// The reported `time_elapsed` (default 1s).
    #[serde(default)]
    elapsed: Option<String>,
}

/// `variety: rlqs`: what one bucket is answered.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ExpectAssignment {
    bucket: BTreeMap<String, String>,
    requests_per_time_unit: Option<u64>,
    time_unit: Option<String>,
    blanket_rule: Option<String>,
    #[serde(default)]
    abandon: bool,
}

/// One entry of a rate limit descriptor.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DescriptorEntry {
    key: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Expect {
    allowed: Option<bool>,
    code: Option<serde_json::Value>,
    message: Option<String>,
    matched_rules: Option<Vec<String>>,
    instances: Option<Vec<ExpectInstance>>,
    request_headers: Option<BTreeMap<String, String>>,
    response_headers: Option<BTreeMap<String, String>>,
    /// `variety: quota`: the granted amount of the last allocation.
    granted: Option<i64>,
    /// `variety: report`: units the report charged to quota instances with a `charge`.
    charged: Option<i64>,
    /// How long the verdict may be reused (`300s`).
    valid_duration: Option<String>,
    /// How many times the verdict may be reused.
    valid_use_count: Option<i32>,
    /// The check is not decided: its error contains this text.
    error: Option<String>,
    /// `variety: ratelimit`: the last response's `overall_code` (`OK`, `OVER_LIMIT`).
    overall_code: Option<String>,
    /// `variety: ratelimit`: the last response's code of each descriptor.
    codes: Option<Vec<String>>,
    /// The decision log records the check gives, in rule order: each record's listed
    /// fields (`attributes` a mapping of what the decision read); `[]` for none.
    decision_log: Option<Vec<ExpectInstance>>,
    /// Checks and quotas: the would-be verdict (`allow`, `deny`, `error`) of each dry-run
    /// rule that matched, by rule name; exactly these rules.
    dry_run: Option<BTreeMap<String, String>>,
    /// `variety: rlqs`: the answer to the last report, bucket by bucket; exactly these.
    assignments: Option<Vec<ExpectAssignment>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectInstance {
    name: String,
    #[serde(default)]
    fields: BTreeMap<String, serde_json::Value>,
}

/// Runs every test file at `path`; exit status 1 when any case fails or cannot run.
pub fn run(path: &Path, args: &ConfigArgs) -> ExitCode {
    let files = match test_files(path) {
        Ok(f) if f.is_empty() => {
            eprintln!("{}: no *_test.yaml files", path.display());
            return ExitCode::FAILURE;
        }
        Ok(f) => f,
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (mut passed, mut failed) = (0usize, 0usize);
    for file in files {
        match rt.block_on(run_file(&file, args)) {
            Ok(results) => {
                for (name, problems) in results {
                    if problems.is_empty() {
                        passed += 1;
                        println!("ok   {}: {name}", file.display());
                    } else {
                        failed += 1;
                        println!("FAIL {}: {name}", file.display());
                        for p in problems {
                            println!("       {p}");
                        }
                    }
                }
            }
            Err(e) => {
                failed += 1;
                println!("FAIL {}: {e}", file.display());
            }
        }
    }
    println!("policy tests: {passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn test_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut dirs = vec![path.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let p = entry?.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with("_test.yaml"))
            {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

async fn run_file(file: &Path, args: &ConfigArgs) -> Result<Vec<(String, Vec<String>)>, String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let spec: TestFile =
        serde_saphyr::from_str(&text).map_err(|e| format!("not a test file: {e}"))?;
    let dir = file.parent().unwrap_or(Path::new("."));
    let paths = spec.config.paths();
    let Some(first) = paths.first() else {
        return Err("config: give at least one path".into());
    };
    let config_path = dir.join(first);
    let mut sources = Vec::new();
    for path in paths {
        let path = dir.join(path);
        let read =
            mixer_config::read_sources(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if paths.len() == 1 {
            sources = read;
        } else {
            // Each file named by its path, so that two paths' files of one name both stay.
            sources.extend(read.into_iter().map(|f| mixer_config::SourceFile {
                name: format!("{}/{}", path.display(), f.name),
                text: f.text,
            }));
        }
    }
    // One registry for validating and building: a Wasm module is compiled once.
    let registry = crate::adapters::builtin();
    let validated = mixer_config::validate(
        &sources,
        &registry,
        &mixer_config::ConfigOptions {
            config_root: crate::validate::config_root(&config_path),
            ..crate::validate::config_options(args)
        },
    )
    .map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        format!(
            "config {} is invalid:\n       {}",
            config_path.display(),
            lines.join("\n       ")
        )
    })?;
    let metrics = RuntimeMetrics::unregistered();
    // Every case is decided by its handlers: a verdict cached for an earlier case must not
    // answer a later one.
    let options = mixer_runtime::RuntimeOptions {
        cache: mixer_runtime::CacheOptions {
            max_entries: 0,
            ..mixer_runtime::CacheOptions::default()
        },
        ..crate::validate::runtime_options(args)
    };
    let built = Snapshot::build(1, validated.config, &registry, None, &options, &metrics).map_err(
        |errors| {
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        },
    )?;
    let snapshot = built.snapshot;
    // RLQS streams answer from a runtime of their own over the same files, made for the
    // first rlqs case.
    let mut rlqs_runtime = None;
    let mut results = Vec::new();
    for case in spec.tests {
        let problems = if case.variety.as_deref() == Some("rlqs") {
            let runtime = match &rlqs_runtime {
                Some(r) => Ok(std::sync::Arc::clone(r)),
                None => rlqs_runtime_of(&sources, &config_path, args, options.clone()),
            };
            match runtime {
                Ok(runtime) => {
                    let problems = run_rlqs(&runtime, &case).await;
                    rlqs_runtime = Some(runtime);
                    problems
                }
                Err(e) => vec![e],
            }
        } else {
            run_case(&snapshot, &case).await
        };
        results.push((case.name, problems));
    }
    Ok(results)
}

/// A runtime serving `sources`, for the RLQS front end.
fn rlqs_runtime_of(
    sources: &[mixer_config::SourceFile],
    config_path: &Path,
    args: &ConfigArgs,
    options: mixer_runtime::RuntimeOptions,
) -> Result<std::sync::Arc<mixer_runtime::Runtime>, String> {
    let runtime = mixer_runtime::Runtime::new(
        mixer_runtime::ConfigOrigin::Embedded(sources.to_vec()),
        crate::adapters::builtin(),
        mixer_config::ConfigOptions {
            config_root: crate::validate::config_root(config_path),
            ..crate::validate::config_options(args)
        },
        options,
        RuntimeMetrics::unregistered(),
    );
    runtime
        .reload()
        .map_err(|e| format!("config for rlqs cases: {e}"))?;
    Ok(std::sync::Arc::new(runtime))
}

/// A `variety: rlqs` case: its reports through the RLQS front end, each on its proxy's
/// stream, and the last answer compared with `assignments`.
async fn run_rlqs(
    runtime: &std::sync::Arc<mixer_runtime::Runtime>,
    case: &TestCase,
) -> Vec<String> {
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::BucketId;
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;

    let Some(domain) = &case.domain else {
        return vec!["variety rlqs needs a domain".to_string()];
    };
    if case.reports.is_empty() || !case.attributes.is_empty() {
        return vec!["variety rlqs takes reports, not attributes".to_string()];
    }
    let Some(want) = &case.expect.assignments else {
        return vec!["variety rlqs expects assignments".to_string()];
    };
    let rlqs = mixer_frontends::rlqs::Rlqs::new(runtime.clone());
    let start = std::time::Instant::now();
    let mut streams: BTreeMap<&str, (mixer_frontends::rlqs::ReportStream, std::time::Duration)> =
        BTreeMap::new();
    let mut last = None;
    for report in &case.reports {
        let mut usages = Vec::new();
        let mut step = std::time::Duration::ZERO;
        for u in &report.usages {
            let elapsed = match u.elapsed.as_deref().map(mixer_model::Duration::parse) {
                None => std::time::Duration::from_secs(1),
                Some(Some(d)) if d.0 > 0 => d.to_std(),
                Some(_) => return vec![format!("elapsed: {:?} is not a duration", u.elapsed)],
            };
            step = step.max(elapsed);
            usages.push(BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: u.bucket.clone().into_iter().collect(),
                }),
                time_elapsed: Some(envoy_types::pb::google::protobuf::Duration {
                    seconds: i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX),
                    nanos: i32::try_from(elapsed.subsec_nanos()).unwrap_or(0),
                }),
                num_requests_allowed: u.allowed,
                num_requests_denied: u.denied,
            });
        }
        let (stream, clock) = streams
            .entry(report.proxy.as_str())
            .or_insert_with(|| (rlqs.open(Some(&report.proxy)), std::time::Duration::ZERO));
        *clock += step;
        let message = RateLimitQuotaUsageReports {
            domain: domain.clone(),
            bucket_quota_usages: usages,
        };
        last = Some(stream.answer(&message, start + *clock).await);
    }
    let got: Vec<(BTreeMap<String, String>, String)> = last
        .flatten()
        .map(|answer| answer.bucket_action.iter().map(describe_action).collect())
        .unwrap_or_default();
    let want: Vec<(BTreeMap<String, String>, String)> = want
        .iter()
        .map(|w| {
            let shape = if w.abandon {
                "abandon".to_string()
            } else if let Some(rule) = &w.blanket_rule {
                rule.clone()
            } else {
                format!(
                    "{}/{}",
                    w.requests_per_time_unit
                        .map_or("?".to_string(), |n| n.to_string()),
                    w.time_unit.as_deref().unwrap_or("SECOND")
                )
            };
            (w.bucket.clone(), shape)
        })
        .collect();
    if got == want {
        Vec::new()
    } else {
        vec![format!("assignments: expected {want:?}, got {got:?}")]
    }
}

/// One bucket's action as `(bucket, shape)`: `N/UNIT`, a blanket rule's name, `abandon`.
fn describe_action(
    action: &envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction,
) -> (BTreeMap<String, String>, String) {
    use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
    use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
    use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;

    let bucket = action
        .bucket_id
        .as_ref()
        .map(|b| b.bucket.clone().into_iter().collect())
        .unwrap_or_default();
    let shape = match &action.bucket_action {
        Some(Action::AbandonAction(_)) => "abandon".to_string(),
        Some(Action::QuotaAssignmentAction(q)) => {
            match q.rate_limit_strategy.as_ref().and_then(|s| s.strategy) {
                Some(Strategy::RequestsPerTimeUnit(r)) => format!(
                    "{}/{}",
                    r.requests_per_time_unit,
                    RateLimitUnit::try_from(r.time_unit).map_or("UNKNOWN", |u| u.as_str_name())
                ),
                Some(Strategy::BlanketRule(b)) => BlanketRule::try_from(b)
                    .map_or("UNKNOWN", |b| b.as_str_name())
                    .to_string(),
                other => format!("{other:?}"),
            }
        }
        None => "none".to_string(),
    };
    (bucket, shape)
}

async fn run_case(snapshot: &Snapshot, case: &TestCase) -> Vec<String> {
    if case.variety.as_deref() == Some("ratelimit") {
        return run_ratelimit(snapshot, case).await;
    }
    let mut problems = Vec::new();
    let mut bag = AttributeBag::new(snapshot.vocabulary().clone());
    for (name, value) in &case.attributes {
        match to_value(value) {
            Some(v) => {
                if let Err(e) = bag.set(name, v) {
                    problems.push(format!("attributes: {e}"));
                }
            }
            None => problems.push(format!("attributes: {name}: unsupported value {value}")),
        }
    }
    if !problems.is_empty() {
        return problems;
    }
    let variety = match case.variety.as_deref() {
        None | Some("check") => Variety::Check,
        Some("report") => Variety::Report,
        Some("quota") => Variety::Quota,
        Some(other) => {
            return vec![format!(
                "variety: {other:?} is not check, report, quota, ratelimit or rlqs"
            )];
        }
    };
    let eval = mixer_runtime::evaluate_preprocessed(snapshot, &bag, variety).await;
    let expect = &case.expect;
    if let Some(want) = &expect.matched_rules {
        let got: Vec<&str> = eval.matched_rules.iter().map(|r| r.as_ref()).collect();
        let same = want.len() == got.len() && want.iter().zip(&got).all(|(w, g)| same_name(w, g));
        if !same {
            problems.push(format!("matchedRules: expected {want:?}, got {got:?}"));
        }
    }
    if let Some(want) = &expect.instances {
        let got: Vec<&Instance> = eval.dispatches.iter().map(|d| &d.instance).collect();
        for w in want {
            match got.iter().find(|i| same_name(&w.name, &i.name)) {
                None => problems.push(format!(
                    "instances: expected {:?}, got {:?}",
                    w.name,
                    got.iter().map(|i| i.name.as_ref()).collect::<Vec<_>>()
                )),
                Some(instance) => compare_fields(w, instance, &mut problems),
            }
        }
    }
    if variety == Variety::Check {
        let started = std::time::Instant::now();
        let checked = mixer_runtime::check(snapshot, &bag, mixer_runtime::Wants::Reads).await;
        if let Some(want) = &expect.decision_log {
            let outcome = match &checked {
                Ok(c) => mixer_runtime::DecisionOutcome::Verdict {
                    verdict: &c.verdict,
                    cache: mixer_runtime::CacheTier::None,
                },
                Err(e) => mixer_runtime::DecisionOutcome::Undecided(e),
            };
            let decision = mixer_runtime::Decision {
                id: mixer_runtime::DecisionId::next(),
                front_end: "mixer-test",
                started,
                outcome,
            };
            let got = snapshot.decision_records(&bag, &decision);
            compare_decision_log(want, &got, &mut problems);
        }
        match (checked.map(|c| c.verdict), &expect.error) {
            (Ok(verdict), None) => compare_verdict(expect, &verdict, &mut problems),
            (Ok(verdict), Some(want)) => problems.push(format!(
                "error: expected the mixer not to decide ({want:?}), got {}",
                verdict.status
            )),
            (Err(e), Some(want)) if e.to_string().contains(want.as_str()) => {}
            (Err(e), Some(want)) => {
                problems.push(format!("error: expected to contain {want:?}, got {e:?}"))
            }
            (Err(e), None) => problems.push(format!("the mixer could not decide: {e}")),
        }
    }
    if variety == Variety::Quota {
        run_quota(snapshot, case, &bag, &mut problems).await;
    }
    if variety == Variety::Report {
        // Charged at once, so that the next case's check sees it.
        let charged = mixer_runtime::charge_now(snapshot, &eval.dispatches).await;
        problems.extend(charged.errors.iter().map(|e| format!("charge failed: {e}")));
        if let Some(want) = expect.charged
            && want != charged.units
        {
            problems.push(format!("charged: expected {want}, got {}", charged.units));
        }
    }
    problems
}

async fn run_quota(
    snapshot: &Snapshot,
    case: &TestCase,
    bag: &AttributeBag,
    problems: &mut Vec<String>,
) {
    let args = QuotaArgs {
        amount: case.amount.unwrap_or(1),
        best_effort: false,
        deduplication_id: String::new(),
        limit_override: None,
    };
    let mut last = None;
    for _ in 0..case.repeat.unwrap_or(1).max(1) {
        let ask = mixer_runtime::QuotaAsk {
            bag,
            quota: case.quota.as_deref(),
            args: &args,
        };
        match mixer_runtime::quota::ask(snapshot, &[ask]).await.pop() {
            Some(Ok(outcome)) => last = Some(outcome),
            None => return,
            Some(Err(e)) => {
                problems.push(format!("the mixer could not decide: {e}"));
                return;
            }
        }
    }
    let Some(outcome) = last else { return };
    let result = &outcome.result;
    let status = if outcome.refused && result.status.is_ok() {
        Status::new(
            Code::ResourceExhausted,
            format!("Quota is exhausted for: {}", outcome.instances.join(", ")),
        )
    } else {
        result.status.clone()
    };
    let verdict = Verdict {
        status,
        dry_run: outcome.dry_run.clone(),
        ..Verdict::default()
    };
    compare_verdict(&case.expect, &verdict, problems);
    if let Some(want) = case.expect.granted
        && want != result.granted_amount
    {
        problems.push(format!(
            "granted: expected {want}, got {}",
            result.granted_amount
        ));
    }
}

/// A `variety: ratelimit` case: Envoy's `RateLimitRequest` through the rate limit front end's
/// own decision (replaces, unlimited and quota_mode included), `repeat` times.
async fn run_ratelimit(snapshot: &Snapshot, case: &TestCase) -> Vec<String> {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

    let Some(domain) = &case.domain else {
        return vec!["variety ratelimit needs a domain".to_string()];
    };
    if case.descriptors.is_empty() || !case.attributes.is_empty() {
        return vec!["variety ratelimit takes descriptors, not attributes".to_string()];
    }
    let request = RateLimitRequest {
        domain: domain.clone(),
        descriptors: case
            .descriptors
            .iter()
            .map(|entries| RateLimitDescriptor {
                entries: entries
                    .iter()
                    .map(|e| Entry {
                        key: e.key.clone(),
                        value: e.value.clone(),
                    })
                    .collect(),
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 0,
    };
    let mut last = None;
    for _ in 0..case.repeat.unwrap_or(1).max(1) {
        match mixer_frontends::ratelimit::decide_on(
            snapshot,
            &request,
            mixer_model::Timestamp::now(),
        )
        .await
        {
            Ok(r) => last = Some(r),
            Err(status) => return vec![format!("the mixer could not decide: {status}")],
        }
    }
    let Some(response) = last else {
        return Vec::new();
    };
    let name = |code: i32| {
        Code::try_from(code).map_or_else(|_| code.to_string(), |c| c.as_str_name().to_string())
    };
    let mut problems = Vec::new();
    if let Some(want) = &case.expect.overall_code
        && *want != name(response.overall_code)
    {
        problems.push(format!(
            "overallCode: expected {want}, got {}",
            name(response.overall_code)
        ));
    }
    if let Some(want) = &case.expect.codes {
        let got: Vec<String> = response.statuses.iter().map(|s| name(s.code)).collect();
        if *want != got {
            problems.push(format!("codes: expected {want:?}, got {got:?}"));
        }
    }
    problems
}

fn same_name(want: &str, got: &str) -> bool {
    got == want
        || got
            .strip_prefix(want)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// `dryRun`: the would-be verdicts of exactly the dry-run rules named.
fn compare_dry_run(want: &BTreeMap<String, String>, got: &[DryRunOutcome]) -> Option<String> {
    let shown: BTreeMap<&str, &str> = got
        .iter()
        .map(|d| (d.rule.as_ref(), d.would_be.label()))
        .collect();
    let same = want.len() == got.len()
        && want.iter().all(|(rule, verdict)| {
            got.iter()
                .any(|d| same_name(rule, &d.rule) && d.would_be.label() == verdict.as_str())
        });
    (!same).then(|| format!("dryRun: expected {want:?}, got {shown:?}"))
}

fn compare_verdict(expect: &Expect, verdict: &Verdict, problems: &mut Vec<String>) {
    if let Some(want) = &expect.dry_run
        && let Some(problem) = compare_dry_run(want, &verdict.dry_run)
    {
        problems.push(problem);
    }
    if let Some(want) = expect.allowed
        && want != verdict.is_allowed()
    {
        problems.push(format!(
            "allowed: expected {want}, got {} ({})",
            verdict.is_allowed(),
            verdict.status
        ));
    }
    if let Some(code) = &expect.code {
        let text = match code {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        match mixer_model::Code::parse(&text) {
            Some(c) if c == verdict.status.code => {}
            Some(c) => problems.push(format!("code: expected {c}, got {}", verdict.status.code)),
            None => problems.push(format!("code: {text:?} is not a status code")),
        }
    }
    if let Some(want) = &expect.message
        && !verdict.istio_message().contains(want.as_str())
    {
        problems.push(format!(
            "message: expected to contain {want:?}, got {:?}",
            verdict.istio_message()
        ));
    }
    if let Some(want) = &expect.valid_duration {
        match mixer_model::Duration::parse(want) {
            Some(d) if d.to_std() == verdict.valid_duration => {}
            Some(_) => problems.push(format!(
                "validDuration: expected {want}, got {:?}",
                verdict.valid_duration
            )),
            None => problems.push(format!("validDuration: {want:?} is not a duration")),
        }
    }
    if let Some(want) = expect.valid_use_count
        && want != verdict.valid_use_count
    {
        problems.push(format!(
            "validUseCount: expected {want}, got {}",
            verdict.valid_use_count
        ));
    }
    let headers = |ops: &[mixer_model::HeaderOperation]| -> BTreeMap<String, String> {
        ops.iter()
            .filter(|o| o.op != HeaderOp::Remove)
            .map(|o| (o.name.clone(), o.value.clone()))
            .collect()
    };
    if let Some(want) = &expect.request_headers {
        let got = headers(&verdict.request_header_ops);
        if &got != want {
            problems.push(format!("requestHeaders: expected {want:?}, got {got:?}"));
        }
    }
    if let Some(want) = &expect.response_headers {
        let got = headers(&verdict.response_header_ops);
        if &got != want {
            problems.push(format!("responseHeaders: expected {want:?}, got {got:?}"));
        }
    }
}

fn compare_fields(want: &ExpectInstance, got: &Instance, problems: &mut Vec<String>) {
    for (field, expected) in &want.fields {
        let snake = mixer_model::camel_to_snake(field);
        match (got.field(&snake), expected) {
            (None, _) => problems.push(format!(
                "instance {}: field {field}: expected {expected}, got nothing",
                want.name
            )),
            (Some(FieldValue::Value(v)), e) => {
                if v.to_string() != json_text(e) {
                    problems.push(format!(
                        "instance {}: field {field}: expected {}, got {v}",
                        want.name,
                        json_text(e)
                    ));
                }
            }
            (Some(map), serde_json::Value::Object(e)) if map.entries().is_some() => {
                let got: BTreeMap<String, String> = map
                    .entries()
                    .unwrap_or_default()
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                let want_map: BTreeMap<String, String> =
                    e.iter().map(|(k, v)| (k.clone(), json_text(v))).collect();
                if got != want_map {
                    problems.push(format!(
                        "instance {}: field {field}: expected {want_map:?}, got {got:?}",
                        want.name
                    ));
                }
            }
            (Some(FieldValue::Map(_) | FieldValue::Decision(_)), e) => {
                problems.push(format!(
                    "instance {}: field {field} is a map; expected value {e} is not",
                    want.name
                ));
            }
        }
    }
}

/// The decision records `got` against the expected ones: the same number, each with the
/// listed fields of its `variables` (names compared as `matchedRules` are, so that a rule may
/// be named without its kind and namespace).
fn compare_decision_log(want: &[ExpectInstance], got: &[Instance], problems: &mut Vec<String>) {
    if want.len() != got.len() {
        problems.push(format!(
            "decisionLog: expected {} records, got {}",
            want.len(),
            got.len()
        ));
        return;
    }
    for (w, g) in want.iter().zip(got) {
        if !same_name(&w.name, &g.name) {
            problems.push(format!(
                "decisionLog: expected a record of {}, got {}",
                w.name, g.name
            ));
        }
        let Some(variables) = g.field("variables").and_then(FieldValue::entries) else {
            problems.push(format!("decisionLog: {} has no variables", g.name));
            continue;
        };
        for (field, expected) in &w.fields {
            let found = variables
                .iter()
                .find(|(k, _)| &**k == field)
                .map(|(_, v)| v);
            match (found, expected) {
                (Some(Value::StringMap(map)), serde_json::Value::Object(e)) => {
                    for (k, v) in e {
                        let want_text = (!v.is_null()).then(|| json_text(v));
                        let got_text = map.get(k).map(str::to_string);
                        if want_text != got_text {
                            problems.push(format!(
                                "decisionLog: {}: {field}[{k}]: expected {want_text:?}, got {got_text:?}",
                                w.name
                            ));
                        }
                    }
                }
                (Some(v), e) => {
                    let (want_text, got_text) = (json_text(e), v.to_string());
                    if want_text != got_text && !same_name(&want_text, &got_text) {
                        problems.push(format!(
                            "decisionLog: {}: {field}: expected {want_text}, got {got_text}",
                            w.name
                        ));
                    }
                }
                (None, serde_json::Value::Null) => {}
                (None, e) => problems.push(format!(
                    "decisionLog: {}: {field}: expected {e}, got nothing",
                    w.name
                )),
            }
        }
    }
}

fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn to_value(v: &serde_json::Value) -> Option<Value> {
    Some(match v {
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int64(i),
            None => Value::Double(n.as_f64()?),
        },
        serde_json::Value::Object(map) => {
            StringMap::from_pairs(map.iter().map(|(k, v)| (k.as_str(), json_text(v)))).into()
        }
        _ => return None,
    })
}
