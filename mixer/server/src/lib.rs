//! The `mixer` command: serve, validate config, run policy tests.
//!
//! The binary is a thin `main` over [`main`]; integration tests start the same code as a
//! process of their own.

mod adapters;
mod admin;
mod defaults;
mod policytest;
mod serve;
mod validate;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// A policy and telemetry service for service-mesh proxies.
#[derive(Parser, Debug)]
#[command(name = "mixer", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What a rule whose match cannot be evaluated does.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum MatchErrors {
    /// The rule does not match (Istio 1.4's behaviour).
    NoMatch,
    /// The request is denied.
    Deny,
}

/// Options shared by the commands that load config.
#[derive(clap::Args, Debug, Clone)]
pub struct ConfigArgs {
    /// The namespace whose rules apply to every request.
    #[arg(long, default_value = "istio-system")]
    pub default_namespace: String,
    /// What a rule whose match fails to evaluate does, unless the rule says.
    #[arg(long, value_enum, default_value = "no-match")]
    pub match_errors: MatchErrors,
    /// Most verdicts the check cache keeps; 0 turns it off.
    #[arg(long, default_value_t = 10_000)]
    pub check_cache_size: u64,
    /// Most report records queued per handler.
    #[arg(long, default_value_t = 10_000)]
    pub report_queue_records: usize,
    /// Most megabytes of report records queued per handler.
    #[arg(long, default_value_t = 32)]
    pub report_queue_megabytes: usize,
    /// Most records per report handler call.
    #[arg(long, default_value_t = 500)]
    pub report_batch_size: usize,
    /// Longest a report record waits for its batch to fill.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    pub report_batch_timeout: std::time::Duration,
    /// What a full report queue drops.
    #[arg(long, value_enum, default_value = "drop-newest")]
    pub report_overflow: OverflowArg,
}

/// What a full report queue drops.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OverflowArg {
    /// The record being added.
    DropNewest,
    /// The oldest queued record.
    DropOldest,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve checks and reports.
    Serve {
        /// A YAML file or a directory of them; without it, the embedded default config.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Address of every gRPC service.
        #[arg(long, default_value = "127.0.0.1:9091")]
        grpc_addr: SocketAddr,
        /// Address of the HTTP forward-auth endpoint (/check).
        #[arg(long, default_value = "127.0.0.1:9092")]
        http_addr: SocketAddr,
        /// Address of /metrics, /healthz, /readyz and /config_dump.
        #[arg(long, default_value = "127.0.0.1:9093")]
        admin_addr: SocketAddr,
        /// Do not reload when config files change.
        #[arg(long)]
        no_watch: bool,
        /// How long to wait, after SIGTERM, for requests in flight.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        drain_timeout: std::time::Duration,
        /// Threads that serve requests (as Envoy's `--concurrency`); default: one per core.
        /// Fewer leave cores to processes sharing the machine, such as a load generator.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
        worker_threads: Option<u16>,
        /// Threads that turn report records into instances, at a lower priority than the
        /// threads serving checks, so reports cannot slow checks down; 0 does that work on
        /// the serving threads. Default: half the cores, at least one.
        #[arg(long)]
        report_threads: Option<usize>,
        #[command(flatten)]
        config_args: ConfigArgs,
    },
    /// Check a config without serving; print every error.
    Validate {
        /// A YAML file or a directory of them.
        path: PathBuf,
        #[command(flatten)]
        config_args: ConfigArgs,
    },
    /// Run declarative policy tests (files ending in _test.yaml).
    Test {
        /// A test file, or a directory searched for *_test.yaml files.
        path: PathBuf,
        #[command(flatten)]
        config_args: ConfigArgs,
    },
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    mixer_model::Duration::parse(text)
        .filter(|d| d.0 >= 0)
        .map(|d| d.to_std())
        .ok_or_else(|| format!("{text:?} is not a duration such as 10s"))
}

/// Parses the command line and runs the command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve {
            config,
            grpc_addr,
            http_addr,
            admin_addr,
            no_watch,
            drain_timeout,
            worker_threads,
            report_threads,
            config_args,
        } => {
            init_logging();
            let settings = serve::Settings {
                config,
                grpc_addr,
                http_addr,
                admin_addr,
                watch: !no_watch,
                drain_timeout,
                worker_threads: worker_threads.map(usize::from),
                report_threads: report_threads.unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
                }),
                config_args,
            };
            match serve::run(settings) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("mixer: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Validate { path, config_args } => validate::run(&path, &config_args),
        Command::Test { path, config_args } => policytest::run(&path, &config_args),
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MIXER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
