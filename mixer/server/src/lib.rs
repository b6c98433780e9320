//! The `mixer` command: serve, validate config, run policy tests, run the adapter conformance kit.
//!
//! The binary is a thin `main` over [`main`]; integration tests start the same code as a
//! process of their own.

pub mod adapters;
mod admin;
mod admin_token;
mod conformance;
mod defaults;
mod lifecycle;
mod logging;
mod own_traces;
mod policytest;
mod quota_endpoint;
mod reflection;
mod serve;
mod shared_cache;
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
    /// How long report records are kept and retried while their handler fails with a
    /// retryable error (an out-of-process adapter restarting); older ones are dropped, oldest
    /// first, counted as `max_age`.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub report_max_age: std::time::Duration,
    /// What an invalid document does: refuse the whole config, or (Istio 1.4's behaviour)
    /// skip it and what depends on it, serve the rest and report each dropped document.
    #[arg(long, value_enum, default_value = "refuse")]
    pub invalid_config: InvalidConfigArg,
    /// The memquota or redisquota handler whose adapter and params count the limits of bare
    /// envoyproxy/ratelimit files (default: the only such handler, else in-memory memquota).
    #[arg(long, value_name = "HANDLER")]
    pub ratelimit_backend: Option<String>,
    /// Accept a reload in which a config file that held documents is empty; without it such
    /// a reload is refused (a file caught truncated would drop its rules).
    #[arg(long)]
    pub allow_empty_config: bool,
    /// Longest a built-in handler's check or quota call may take; past it the call fails as
    /// a timeout and the handler's fail policy decides. Out-of-process handlers keep their
    /// `connection.timeout`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub handler_timeout: std::time::Duration,
}

/// What an invalid document does to the config.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum InvalidConfigArg {
    /// The whole config is refused (a running one is kept).
    Refuse,
    /// The document and what depends on it are dropped; the rest is served.
    Skip,
}

/// What one request may ask of `serve` (README: "Operations: limits and timeouts"). Over a
/// limit the request is refused with INVALID_ARGUMENT naming the limit and its flag, before
/// any of its work is done.
#[derive(clap::Args, Debug, Clone)]
pub struct LimitArgs {
    /// Most descriptors in one rate limit (`ShouldRateLimit`) request.
    #[arg(long, default_value_t = mixer_runtime::DEFAULT_RATELIMIT_DESCRIPTORS)]
    pub max_ratelimit_descriptors: usize,
    /// Most entries in one rate limit descriptor.
    #[arg(long, default_value_t = mixer_runtime::DEFAULT_DESCRIPTOR_ENTRIES)]
    pub max_descriptor_entries: usize,
    /// Most quotas one Mixer v1 Check asks for.
    #[arg(long, default_value_t = mixer_runtime::DEFAULT_CHECK_QUOTAS)]
    pub max_check_quotas: usize,
    /// Most records in one Mixer v1 Report.
    #[arg(long, default_value_t = mixer_runtime::DEFAULT_REPORT_RECORDS)]
    pub max_report_records: usize,
    /// Most attributes in one Mixer v1 attribute set (a Check's, a Report record's), each
    /// string map entry counted as one.
    #[arg(long, default_value_t = mixer_runtime::DEFAULT_ATTRIBUTES)]
    pub max_attributes: usize,
    /// Most log records or spans in one OTLP export.
    #[arg(long, default_value_t = mixer_runtime::DEFAULT_EXPORT_RECORDS)]
    pub max_export_records: usize,
    /// Most entries in one message of an access log stream.
    #[arg(long, default_value_t = mixer_runtime::DEFAULT_ACCESS_LOG_ENTRIES)]
    pub max_access_log_entries: usize,
    /// Most metric series all prometheus handlers keep together; a point that would make
    /// one more is dropped and counted (`mixer_metric_series_overflow_total`).
    #[arg(long, default_value_t = mixer_adapter_prometheus::DEFAULT_MAX_SERIES_PER_PROCESS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_metric_series: usize,
}

impl LimitArgs {
    /// The runtime's limits, each with the flag that set it.
    pub fn limits(&self) -> mixer_runtime::RequestLimits {
        let d = mixer_runtime::RequestLimits::default();
        let set = |limit: mixer_runtime::Limit, max| mixer_runtime::Limit { max, ..limit };
        mixer_runtime::RequestLimits {
            ratelimit_descriptors: set(d.ratelimit_descriptors, self.max_ratelimit_descriptors),
            descriptor_entries: set(d.descriptor_entries, self.max_descriptor_entries),
            check_quotas: set(d.check_quotas, self.max_check_quotas),
            report_records: set(d.report_records, self.max_report_records),
            attributes: set(d.attributes, self.max_attributes),
            export_records: set(d.export_records, self.max_export_records),
            access_log_entries: set(d.access_log_entries, self.max_access_log_entries),
        }
    }
}

/// What a full report queue drops.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OverflowArg {
    /// The record being added.
    DropNewest,
    /// The oldest queued record.
    DropOldest,
}

/// The header a trusted proxy names the client in.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum RealIpHeaderArg {
    /// `X-Forwarded-For`, read from the right.
    XForwardedFor,
    /// `X-Real-IP`.
    XRealIp,
}

fn parse_trusted_proxies(
    text: &str,
) -> Result<mixer_frontends::forward_auth::TrustedProxies, String> {
    mixer_frontends::forward_auth::TrustedProxies::parse(text)
}

// Parsed once at start: the size of the `serve` variant costs nothing.
#[allow(clippy::large_enum_variant)]
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
        /// A file holding a token that /metrics and /config_dump ask for as
        /// `Authorization: Bearer TOKEN` (the probes do not); re-read when it changes.
        #[arg(long, value_name = "FILE")]
        admin_token_file: Option<PathBuf>,
        /// Serve GET /quota (how much of a quota is left) on a --admin-addr that is not a
        /// loopback address; without it /quota answers 403 there.
        #[arg(long)]
        admin_quota_remote: bool,
        /// Do not reload when config files change (neither on file events nor by the
        /// periodic `--config-check-interval` look).
        #[arg(long)]
        no_watch: bool,
        /// How long to wait, after SIGTERM, for requests in flight.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        drain_timeout: std::time::Duration,
        /// Threads that serve requests (as Envoy's `--concurrency`); default: one per core.
        /// Fewer leave cores to processes sharing the machine, such as a load generator.
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
        worker_threads: Option<u16>,
        /// Address ranges (CIDR) or addresses of proxies whose forwarding headers forward-auth
        /// believes, comma-separated (as nginx's `set_real_ip_from`). Without it `source.ip`
        /// is the connection's peer, whatever headers the call carries.
        #[arg(long, value_name = "CIDR,...", default_value = "", value_parser = parse_trusted_proxies)]
        trusted_proxies: mixer_frontends::forward_auth::TrustedProxies,
        /// The header a trusted proxy names the client in: `x-forwarded-for` (read from the
        /// right, past every trusted proxy) or `x-real-ip` (as nginx's `real_ip_header`).
        #[arg(long, value_enum, default_value = "x-forwarded-for")]
        real_ip_header: RealIpHeaderArg,
        /// Threads that turn report records into instances, at a lower priority than the
        /// threads serving checks, so reports cannot slow checks down; 0 does that work on
        /// the serving threads. Default: half the cores, at least one.
        #[arg(long)]
        report_threads: Option<usize>,
        /// envoyproxy/ratelimit's `NEAR_LIMIT_RATIO`: the fraction of a limit past which its
        /// hits count as `near_limit` in envoyproxy/ratelimit's statistics on /metrics.
        #[arg(long, default_value_t = mixer_runtime::ratelimit_stats::DEFAULT_NEAR_LIMIT_RATIO,
              value_parser = parse_ratio)]
        near_limit_ratio: f32,
        #[command(flatten)]
        listener_args: mixer_transport::listeners::ListenerArgs,
        #[command(flatten)]
        config_args: ConfigArgs,
        #[command(flatten)]
        limit_args: LimitArgs,
        #[command(flatten)]
        tls_args: mixer_transport::tls::TlsArgs,
        #[command(flatten)]
        lifecycle_args: lifecycle::LifecycleArgs,
        #[command(flatten)]
        shared_cache_args: shared_cache::SharedCacheArgs,
        #[command(flatten)]
        wasm_args: adapters::WasmArgs,
        #[command(flatten)]
        log_args: logging::LogArgs,
        #[command(flatten)]
        tracing_args: own_traces::TracingArgs,
    },
    /// Check a config without serving; print every error.
    Validate {
        /// A YAML file or a directory of them.
        path: PathBuf,
        /// Fail (exit 1) on warnings too, an out-of-process adapter that could not be
        /// reached included (its params and templates then went unchecked).
        #[arg(long)]
        strict: bool,
        #[command(flatten)]
        config_args: ConfigArgs,
    },
    /// Run the adapter conformance kit against an out-of-process adapter (any language) or a
    /// Wasm plugin, and print each promise and whether it held; exit 1 when one is broken.
    #[command(after_help = conformance::AFTER_HELP)]
    Conformance {
        #[command(flatten)]
        args: conformance::ConformanceArgs,
    },
    /// Run declarative policy tests (files ending in _test.yaml).
    Test {
        /// A test file, or a directory searched for *_test.yaml files.
        path: PathBuf,
        #[command(flatten)]
        config_args: ConfigArgs,
    },
}

fn parse_ratio(text: &str) -> Result<f32, String> {
    text.parse::<f32>()
        .ok()
        .filter(|r| (0.0..=1.0).contains(r))
        .ok_or_else(|| format!("{text:?} is not a ratio between 0 and 1 such as 0.8"))
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
            admin_token_file,
            admin_quota_remote,
            no_watch,
            drain_timeout,
            worker_threads,
            report_threads,
            near_limit_ratio,
            trusted_proxies,
            real_ip_header,
            listener_args,
            config_args,
            limit_args,
            tls_args,
            lifecycle_args,
            shared_cache_args,
            wasm_args,
            log_args,
            tracing_args,
        } => {
            if let Err(e) = logging::init(&log_args) {
                eprintln!("mixer: {e}");
                return ExitCode::FAILURE;
            }
            mixer_adapter_prometheus::set_process_max_series(limit_args.max_metric_series);
            let settings = serve::Settings {
                config,
                grpc_addr,
                http_addr,
                admin_addr,
                admin_token_file,
                admin_quota_remote,
                watch: !no_watch,
                drain_timeout,
                worker_threads: worker_threads.map(usize::from),
                report_threads: report_threads.unwrap_or_else(|| {
                    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
                }),
                listener_args,
                near_limit_ratio,
                forward_auth: mixer_frontends::forward_auth::ForwardAuthOptions {
                    client_address: mixer_frontends::forward_auth::ClientAddress {
                        trusted_proxies,
                        header: match real_ip_header {
                            RealIpHeaderArg::XForwardedFor => {
                                mixer_frontends::forward_auth::RealIpHeader::XForwardedFor
                            }
                            RealIpHeaderArg::XRealIp => {
                                mixer_frontends::forward_auth::RealIpHeader::XRealIp
                            }
                        },
                    },
                },
                config_args,
                limits: limit_args.limits(),
                tls: tls_args,
                lifecycle: lifecycle_args,
                shared_cache: shared_cache_args,
                wasm: wasm_args.host_options(),
                tracing: tracing_args,
            };
            match serve::run(settings) {
                Ok(stopped) if stopped.dropped_reports > 0 => {
                    ExitCode::from(serve::EXIT_REPORTS_DROPPED)
                }
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("mixer: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Validate {
            path,
            strict,
            config_args,
        } => validate::run(&path, &config_args, strict),
        Command::Test { path, config_args } => policytest::run(&path, &config_args),
        Command::Conformance { args } => conformance::run(&args),
    }
}
