//! `oop`: what the out-of-process hop costs. The same `listentry` check rule is decided once by
//! the built-in listchecker and once by an out-of-process adapter (mixer-bench's own
//! `oop-adapter`, in a process of its own, built on the adapter SDK), with the mixer's check
//! cache off so that every check reaches the handler. One caller gives the latency the hop
//! adds; many callers give the throughput. A no-op ext_authz server at one caller shows what
//! a single loopback gRPC round trip costs on this machine, the floor of any remote hop.
//! Last, report records go to a `metric` handler, remote and then the built-in no-op, and the
//! records per second delivered are compared.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mixer_adapter_sdk::api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, CheckHandler, Handler, ParamError,
    ReportHandler, Stability,
};
use mixer_adapter_sdk::model::{
    CheckResult, Code, Instance, ListEntryInstance, Status, Template, Value,
};
use mixer_adapter_sdk::{Server, async_trait};

use crate::load::{self, Report, Spec};
use crate::observe;
use crate::platform;
use crate::process::{Mixer, TempDir, bench_server};
use crate::{LoadArgs, Target, bags, drive, report};

/// The `oop` subcommand's flags.
#[derive(clap::Args)]
pub struct Args {
    /// The mixer binary.
    #[arg(long)]
    mixer_bin: PathBuf,
    /// Callers for the latency runs: with one, each check waits for no other.
    #[arg(long, default_value_t = 1)]
    latency_callers: usize,
    /// Latency runs per handler, built-in and remote alternating, so that a slow moment of a
    /// shared machine lands on both; the hop is the median of the rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Concurrent Mixer v1 reporters in the report run.
    #[arg(long, default_value_t = 4)]
    reporters: usize,
    /// Records per Report request.
    #[arg(long, default_value_t = 3)]
    records: usize,
    /// Worker threads of the mixers, the adapter and the no-op server (default: one per
    /// core). Generator, mixer and adapter share the machine; on 2 cores, one thread each
    /// (with `mixer-bench --threads 1`) keeps them from waking idle siblings on a busy core.
    #[arg(long)]
    server_threads: Option<u16>,
    #[command(flatten)]
    load: LoadArgs,
}

/// The adapter: a `listentry` handler denying the values in `params.denied`, and a `metric`
/// handler that accepts every batch.
#[derive(Default)]
pub struct Lists;

static LISTS: AdapterInfo = AdapterInfo {
    name: "bench-lists",
    description: "denies the values in params.denied; takes every metric batch",
    templates: &[Template::ListEntry, Template::Metric],
    cacheable: true,
    stability: Stability::Alpha,
};

/// [`Lists`]' params.
#[derive(Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListsConfig {
    /// The values denied.
    denied: Vec<String>,
}

impl Adapter for Lists {
    type Config = ListsConfig;
    type Compiled = Arc<HashSet<String>>;

    fn info(&self) -> &AdapterInfo {
        &LISTS
    }

    fn compile(&self, config: ListsConfig) -> Result<Self::Compiled, Vec<ParamError>> {
        Ok(Arc::new(config.denied.into_iter().collect()))
    }

    fn build(
        &self,
        denied: &Self::Compiled,
        _: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(ListsHandler(denied.clone())))
    }
}

/// Denies the values it holds.
struct ListsHandler(Arc<HashSet<String>>);

impl Handler for ListsHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }

    fn as_report(&self) -> Option<&dyn ReportHandler> {
        Some(self)
    }
}

#[async_trait]
impl CheckHandler for ListsHandler {
    async fn check(&self, instance: &Instance) -> Result<CheckResult, AdapterError> {
        let value = ListEntryInstance::of(instance)
            .and_then(|i| i.value)
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut answer = CheckResult::ok(Duration::from_secs(5), 1000);
        if self.0.contains(value) {
            answer.status = Status::new(Code::PermissionDenied, format!("{value} is blocked"));
        }
        Ok(answer)
    }
}

#[async_trait]
impl ReportHandler for ListsHandler {
    async fn report(&self, _instances: &[Instance]) -> Result<(), AdapterError> {
        Ok(())
    }
}

/// Serves [`Lists`] until the process ends.
pub async fn serve_adapter(addr: SocketAddr) -> anyhow::Result<()> {
    Server::new(Lists)
        .serve(addr)
        .await
        .context("serving the adapter")
}

const BLOCKED: &str = "[sqlmap, nikto, masscan]";

/// The check rule and the report rule, with the handlers built in or out of process.
fn config(adapter: Option<SocketAddr>) -> String {
    let (check_handler, metric_handler) = match adapter {
        None => (
            format!(
                "compiledAdapter: listchecker\n  params: {{overrides: {BLOCKED}, blacklist: true}}"
            ),
            "compiledAdapter: noop".to_string(),
        ),
        Some(addr) => (
            format!(
                "adapter: bench-lists\n  connection: {{address: \"{addr}\", timeout: 1s}}\n  params: {{denied: {BLOCKED}}}"
            ),
            format!("adapter: bench-lists\n  connection: {{address: \"{addr}\", timeout: 5s}}"),
        ),
    };
    format!(
        r#"# Written by mixer-bench oop.
kind: handler
metadata: {{name: agents, namespace: istio-system}}
spec:
  {check_handler}
---
kind: handler
metadata: {{name: metrics, namespace: istio-system}}
spec:
  {metric_handler}
---
kind: instance
metadata: {{name: agent, namespace: istio-system}}
spec:
  compiledTemplate: listentry
  params: {{value: request.useragent | ""}}
---
kind: instance
metadata: {{name: requestcount, namespace: istio-system}}
spec:
  compiledTemplate: metric
  params:
    value: "1"
    dimensions: {{method: request.method | "unknown", response_code: response.code | 200}}
---
kind: rule
metadata: {{name: agents, namespace: istio-system}}
spec:
  actions: [{{handler: agents, instances: [agent]}}]
---
kind: rule
metadata: {{name: count, namespace: istio-system}}
spec:
  actions: [{{handler: metrics, instances: [requestcount]}}]
"#
    )
}

/// What one kind of handler measured under load.
struct Measured {
    loaded: Report,
    /// The mixer's CPU time per check of the many-callers run, in microseconds.
    mixer_cpu_us: f64,
    reports: Report,
    delivered_per_second: f64,
}

fn start(args: &Args, config_file: &Path) -> anyhow::Result<Mixer> {
    let mut flags = vec!["--check-cache-size".to_string(), "0".to_string()];
    if let Some(n) = args.server_threads {
        flags.extend(["--worker-threads".to_string(), n.to_string()]);
    }
    Mixer::start(&args.mixer_bin, Some(config_file), &flags)
}

/// The latency run settings: the latency callers on one connection.
fn alone(args: &Args) -> LoadArgs {
    LoadArgs {
        concurrency: args.latency_callers.max(1),
        channels: 1,
        ..args.load.clone()
    }
}

async fn measure(args: &Args, mixer: &Mixer) -> anyhow::Result<Measured> {
    let cpu_before = observe::cpu_seconds(mixer.pid()).unwrap_or(0.0);
    let loaded = drive(Target::ExtAuthz, mixer.grpc, &args.load, None).await?;
    // The run's warm-up is in the CPU time but not in the count; scale by the whole run.
    let cpu = observe::cpu_seconds(mixer.pid()).unwrap_or(0.0) - cpu_before;
    let whole_run = (args.load.warmup + args.load.duration).as_secs_f64();
    let checks_in_run = loaded.throughput() * whole_run;
    let mixer_cpu_us = cpu * 1e6 / checks_in_run.max(1.0);

    let requests = bags::requests(args.load.requests.max(1), args.load.distinct);
    let prepared = report::report_requests(&requests, args.records);
    let chans = crate::channels(mixer.grpc, args.load.channels).await?;
    let series = "mixer_report_delivered_total";
    let before = observe::scrape(mixer.admin, series);
    let spec = Spec {
        concurrency: args.reporters.max(1),
        duration: args.load.duration,
        warmup: Duration::ZERO,
        rate: None,
    };
    let reports = load::run(spec, |w| {
        report::Reporter::on(chans[w % chans.len()].clone(), prepared.clone())
    })
    .await;
    // Delivered while the reporters ran: what the handler kept up with, not what the queue
    // held afterwards.
    let delivered = observe::scrape(mixer.admin, series) - before;
    Ok(Measured {
        loaded,
        mixer_cpu_us,
        reports,
        delivered_per_second: delivered / args.load.duration.as_secs_f64(),
    })
}

/// Runs the comparison and prints it.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let threads: Vec<String> = args
        .server_threads
        .map(|n| vec!["--threads".to_string(), n.to_string()])
        .unwrap_or_default();
    let (_adapter, adapter_addr) = bench_server(&["oop-adapter"], &threads)?;
    let dir = TempDir::new("mixer-bench-oop")?;
    let (builtin_file, remote_file) = (dir.0.join("builtin.yaml"), dir.0.join("remote.yaml"));
    std::fs::write(&builtin_file, config(None))?;
    std::fs::write(&remote_file, config(Some(adapter_addr)))?;
    // Both mixers run side by side; the one not driven is idle.
    let builtin_mixer = start(&args, &builtin_file)?;
    let remote_mixer = start(&args, &remote_file)?;
    let callers = args.latency_callers.max(1);
    let alone = alone(&args);
    let (mut added_p50, mut added_p99) = (Vec::new(), Vec::new());
    for round in 1..=args.rounds.max(1) {
        let builtin = drive(Target::ExtAuthz, builtin_mixer.grpc, &alone, None).await?;
        let remote = drive(Target::ExtAuthz, remote_mixer.grpc, &alone, None).await?;
        println!(
            "{}",
            builtin.line(&format!("{round}: built-in, {callers} caller(s)"))
        );
        println!(
            "{}",
            remote.line(&format!("{round}: remote, {callers} caller(s)"))
        );
        added_p50.push(remote.micros(50.0) - builtin.micros(50.0));
        added_p99.push(remote.micros(99.0) - builtin.micros(99.0));
    }
    let round_trip = crate::compare::noop_run(&alone, None, args.server_threads).await?;
    println!(
        "{}",
        round_trip.line(&format!("no-op gRPC, {callers} caller(s)"))
    );
    let raw = crate::process::raw_round_trips(args.load.duration)?;
    println!("{}", platform::round_trip_line(&raw));
    let (p50, p99) = (
        report::median(&mut added_p50),
        report::median(&mut added_p99),
    );
    println!(
        "remote hop adds {p50:.0} us at p50 and {p99:.0} us at p99 (medians of {} rounds); one loopback gRPC round trip to the no-op server takes {:.0} us at p50 here (hop / round trip = {:.2}), a plain TCP one {:.0} us (hop / plain = {:.2})",
        added_p50.len(),
        round_trip.micros(50.0),
        p50 / round_trip.micros(50.0).max(1e-9),
        platform::p50_micros(&raw),
        p50 / platform::p50_micros(&raw).max(1e-9)
    );

    let builtin = measure(&args, &builtin_mixer).await?;
    let remote = measure(&args, &remote_mixer).await?;
    let loaded = args.load.concurrency;
    println!(
        "{}",
        builtin.loaded.line(&format!("built-in, {loaded} callers"))
    );
    println!(
        "{}",
        remote.loaded.line(&format!("remote, {loaded} callers"))
    );
    println!(
        "check throughput through the remote adapter: {:.2}x the built-in; mixer CPU per check {:.1} us remote, {:.1} us built-in",
        remote.loaded.throughput() / builtin.loaded.throughput().max(1e-9),
        remote.mixer_cpu_us,
        builtin.mixer_cpu_us
    );
    println!(
        "reports ({} records per request, {} reporters): remote metric handler {:.0} records/s delivered ({:.0} req/s taken), built-in no-op {:.0} records/s ({:.0} req/s); ratio {:.2}",
        args.records,
        args.reporters,
        remote.delivered_per_second,
        remote.reports.throughput(),
        builtin.delivered_per_second,
        builtin.reports.throughput(),
        remote.delivered_per_second / builtin.delivered_per_second.max(1e-9)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_configs_name_the_same_rules_and_differ_only_in_their_handlers() {
        let builtin = config(None);
        let remote = config(Some("127.0.0.1:7001".parse().expect("address")));
        assert!(builtin.contains("compiledAdapter: listchecker"));
        assert!(builtin.contains("compiledAdapter: noop"));
        assert!(!builtin.contains("connection"));
        assert_eq!(remote.matches("address: \"127.0.0.1:7001\"").count(), 2);
        assert!(remote.contains("params: {denied: [sqlmap, nikto, masscan]}"));
        let rules = |c: &str| c.matches("kind: rule").count();
        assert_eq!((rules(&builtin), rules(&remote)), (2, 2));
    }

    #[tokio::test]
    async fn the_adapter_denies_exactly_the_listed_values() {
        use mixer_adapter_sdk::api::host::AnyAdapter;
        use mixer_adapter_sdk::model::FieldValue;
        let ctx = BuildContext {
            handler_name: "agents.istio-system".into(),
        };
        let handler = Lists
            .compile_and_build(&serde_json::json!({"denied": ["nikto"]}), &ctx)
            .expect("builds");
        let instance = |v: &str| Instance {
            name: "agent".into(),
            template: Template::ListEntry,
            fields: vec![("value", FieldValue::Value(Value::from(v)))],
        };
        let check = handler.as_check().expect("checks");
        let nikto = check.check(&instance("nikto")).await.expect("answer");
        let curl = check.check(&instance("curl")).await.expect("answer");
        assert_eq!(nikto.status.code, Code::PermissionDenied);
        assert!(curl.status.is_ok());
        // The metric handler has no params: nothing is denied.
        let open = Lists
            .compile_and_build(&serde_json::Value::Null, &ctx)
            .expect("builds");
        let nikto = open
            .as_check()
            .expect("checks")
            .check(&instance("nikto"))
            .await;
        assert!(nikto.expect("answer").status.is_ok());
        assert!(open.as_report().is_some());
    }
}
