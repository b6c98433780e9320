//! `mixer serve`: the listeners, the runtime, reload and graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mixer_runtime::{ConfigOrigin, Runtime, RuntimeMetrics};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::ConfigArgs;
use mixer_transport::listeners::{ListenerArgs, ListenerMetrics};

/// Everything `serve` is told.
pub struct Settings {
    /// Config path; `None` for the embedded default.
    pub config: Option<PathBuf>,
    /// gRPC listener.
    pub grpc_addr: SocketAddr,
    /// Forward-auth listener.
    pub http_addr: SocketAddr,
    /// Admin listener.
    pub admin_addr: SocketAddr,
    /// The bearer token the admin endpoints but the probes ask for.
    pub admin_token_file: Option<PathBuf>,
    /// Serve GET /quota on a non-loopback admin address.
    pub admin_quota_remote: bool,
    /// Reload on file change.
    pub watch: bool,
    /// How long requests in flight get after SIGTERM.
    pub drain_timeout: Duration,
    /// Runtime worker threads; `None` = one per core.
    pub worker_threads: Option<usize>,
    /// Low-priority report threads; 0 = none.
    pub report_threads: usize,
    /// The listeners' connection caps, timeouts and sizes.
    pub listener_args: ListenerArgs,
    /// envoyproxy/ratelimit's `NEAR_LIMIT_RATIO` for its statistics.
    pub near_limit_ratio: f32,
    /// How forward-auth finds the client's address.
    pub forward_auth: mixer_frontends::forward_auth::ForwardAuthOptions,
    /// Config options.
    pub config_args: ConfigArgs,
    /// What one request may ask.
    pub limits: mixer_runtime::RequestLimits,
    /// TLS on the gRPC and forward-auth listeners.
    pub tls: mixer_transport::tls::TlsArgs,
    /// Config checks and the shutdown delay.
    pub lifecycle: crate::lifecycle::LifecycleArgs,
    /// The check cache shared by the replicas.
    pub shared_cache: crate::shared_cache::SharedCacheArgs,
    /// The Wasm plugin engine.
    pub wasm: mixer_wasm::HostOptions,
    /// The mixer's own traces.
    pub tracing: crate::own_traces::TracingArgs,
}

/// The exit status of a `serve` that stopped on a signal but had to drop report records
/// queued at shutdown (the drain timeout too short for them), so that a supervisor or a job
/// sees the loss without reading the log. 1 is a failure to start or serve; 2, clap's usage
/// error.
pub const EXIT_REPORTS_DROPPED: u8 = 3;

/// How a `serve` that ran until a signal ended.
#[derive(Debug)]
pub struct Stopped {
    /// Report records still queued when the shutdown's time ran out, not delivered
    /// (`mixer_report_dropped_total{reason="shutdown_deadline"}`).
    pub dropped_reports: u64,
}

/// Runs the server until SIGTERM or Ctrl-C.
pub fn run(settings: Settings) -> anyhow::Result<Stopped> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = settings.worker_threads {
        builder.worker_threads(n);
    }
    let rt = builder
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(serve(settings))
}

async fn serve(settings: Settings) -> anyhow::Result<Stopped> {
    let mut signals = crate::lifecycle::Signals::install();
    let registry = prometheus::Registry::new();
    let metrics = RuntimeMetrics::new(&registry).context("registering metrics")?;
    let listener_metrics = ListenerMetrics::new(&registry).context("registering metrics")?;
    // Before anything else: a certificate that cannot be served stops the start.
    let tls = mixer_transport::tls_reload::start(&settings.tls, &registry)?;
    let admin_token = settings
        .admin_token_file
        .as_deref()
        .map(crate::admin_token::AdminToken::load)
        .transpose()?;
    if let Some(warning) =
        crate::admin::exposure_warning(settings.admin_addr, admin_token.is_some())
    {
        tracing::warn!(admin = %settings.admin_addr, "{warning}");
    }
    let traces = crate::own_traces::start(&settings.tracing)?;
    let limits = &settings.listener_args;
    let asked = limits.caps();
    let caps = match mixer_transport::listeners::raise_fd_limit() {
        Some(fd_limit) => {
            let caps = mixer_transport::listeners::fit_caps(asked, fd_limit);
            if caps != asked {
                let why = "the connection caps do not fit in the open-file limit beside the \
                           descriptors kept for other uses: the gRPC and forward-auth caps \
                           are lowered (raise `ulimit -n` to keep them)";
                let (grpc, http, admin) = (caps.grpc, caps.http, caps.admin);
                // Caps set on the command line and not kept deserve a warning; the
                // defaults fitted to a small limit, a note.
                if asked == ListenerArgs::DEFAULT_CAPS {
                    tracing::info!(fd_limit, grpc, http, admin, "{why}");
                } else {
                    tracing::warn!(fd_limit, grpc, http, admin, "{why}");
                }
            }
            caps
        }
        None => asked,
    };
    let shared_tier = crate::shared_cache::tier(
        &settings.shared_cache,
        settings.config_args.check_cache_size,
        &registry,
    )?;
    let origin = match &settings.config {
        Some(path) => ConfigOrigin::Path(path.clone()),
        None => ConfigOrigin::Embedded(crate::defaults::config()),
    };
    let runtime = Arc::new(Runtime::new(
        origin,
        crate::adapters::with_wasm(settings.wasm.clone()),
        mixer_config::ConfigOptions {
            config_root: settings
                .config
                .as_deref()
                .and_then(crate::validate::config_root),
            ..crate::validate::config_options(&settings.config_args)
        },
        mixer_runtime::RuntimeOptions {
            report_threads: settings.report_threads,
            limits: settings.limits,
            near_limit_ratio: settings.near_limit_ratio,
            shared_tier,
            ..crate::validate::runtime_options(&settings.config_args)
        },
        metrics,
    ));

    // Bind everything before loading config, so a port in use fails the start at once.
    let grpc = TcpListener::bind(settings.grpc_addr)
        .await
        .with_context(|| format!("binding --grpc-addr {}", settings.grpc_addr))?;
    let http = TcpListener::bind(settings.http_addr)
        .await
        .with_context(|| format!("binding --http-addr {}", settings.http_addr))?;
    let admin = TcpListener::bind(settings.admin_addr)
        .await
        .with_context(|| format!("binding --admin-addr {}", settings.admin_addr))?;

    let first = runtime.clone();
    // An invalid config at start leaves the mixer running but not ready; a fixed file is
    // picked up by the watcher.
    let _ = tokio::task::spawn_blocking(move || first.reload()).await;
    let _watch = match (&settings.config, settings.watch) {
        (Some(path), true) => Some(
            mixer_runtime::watch_with(
                runtime.clone(),
                path,
                mixer_runtime::WatchOptions {
                    // With the settle's two reads 100 ms apart, a swap loads about 0.3 s
                    // after its last event, as with the 300 ms debounce alone before.
                    debounce: Duration::from_millis(200),
                    check_interval: Some(settings.lifecycle.config_check_interval)
                        .filter(|d| !d.is_zero()),
                    settle: mixer_runtime::Settle::DEFAULT,
                },
            )
            .with_context(|| format!("watching {}", path.display()))?,
        ),
        _ => None,
    };

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    // Not ready from SIGTERM on, before the drain (see `lifecycle`).
    let (draining_tx, draining_rx) = watch::channel(false);
    let (health, health_service) = tonic_health::server::health_reporter();
    let health_task = crate::lifecycle::report_health(health, runtime.clone(), draining_rx.clone());
    // Unary methods are served straight from the front ends; the streaming access log
    // service, health and unknown paths by tonic's routes (see `mixer_frontends::grpc`).
    let rlqs = crate::shared_cache::rlqs(&settings.shared_cache, runtime.clone(), &registry)?;
    let mut routes = mixer_frontends::grpc::routes_with(&runtime, rlqs);
    routes.add_service(health_service.clone());
    let methods = mixer_frontends::grpc::unary_methods(&runtime);
    // Envoy keeps its access log stream open for as long as it has entries to send, its
    // RLQS stream for as long as it has buckets to report; a reflection client, its stream
    // for as long as it has questions.
    let streaming = [
        mixer_frontends::grpc::ACCESS_LOG_STREAM,
        mixer_frontends::grpc::RLQS_STREAM,
    ];
    let mut served = crate::reflection::services(methods.paths().chain(streaming));
    served.insert(crate::reflection::name_of(&health_service).to_owned());
    crate::reflection::add(&mut routes, &served);
    let grpc_server = mixer_transport::grpc::Server::new(methods, routes.routes())
        .limits(limits.grpc(caps.grpc))
        .events(listener_metrics.events("grpc"))
        .streaming_requests(streaming.into_iter().chain(crate::reflection::PATHS))
        .drain(settings.drain_timeout);
    let grpc_server = match &tls {
        Some(tls) => grpc_server.tls(tls.grpc.clone()),
        None => grpc_server,
    };
    let grpc_task = tokio::spawn(grpc_server.serve(grpc, stopped(stop_rx.clone())));
    tracing::info!("{}", settings.forward_auth.client_address.describe());
    let http_task = tokio::spawn(mixer_transport::http_listener::serve_with_tls(
        http,
        mixer_frontends::forward_auth::router(runtime.clone(), settings.forward_auth),
        limits.http(caps.http),
        listener_metrics.http_events("http"),
        tls.map(|tls| tls.http),
        stopped(stop_rx.clone()),
    ));
    // gRPC health is answered on the admin listener too (HTTP/2 without TLS), so a probe
    // pointed there is answered while the gRPC listener is at its cap.
    let admin_app = crate::admin::router(
        runtime.clone(),
        registry,
        health_service,
        draining_rx,
        admin_token,
        crate::quota_endpoint::QuotaAccess::for_listener(
            settings.admin_addr,
            settings.admin_quota_remote,
        ),
    );
    let admin_task = tokio::spawn(mixer_transport::http_listener::serve(
        admin,
        admin_app,
        limits.admin(caps.admin),
        listener_metrics.http_events("admin"),
        stopped(stop_rx.clone()),
    ));
    tracing::info!(
        grpc = %settings.grpc_addr, http = %settings.http_addr, admin = %settings.admin_addr,
        "mixer serving"
    );

    signals.recv().await;
    let _ = draining_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(1), health_task).await;
    let delay = settings.lifecycle.shutdown_delay;
    tracing::info!("shutting down: not ready (gRPC health NOT_SERVING, /readyz 503)");
    if !delay.is_zero() {
        tracing::info!(
            ?delay,
            "answering calls for the shutdown delay before the drain"
        );
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = signals.recv() => tracing::info!("second signal: draining now"),
        }
    }
    tracing::info!("draining requests in flight");
    let _ = stop_tx.send(true);
    let drain = async {
        let _ = grpc_task.await;
        let _ = http_task.await;
        let _ = admin_task.await;
    };
    if tokio::time::timeout(settings.drain_timeout, drain)
        .await
        .is_err()
    {
        tracing::warn!("drain timeout passed; exiting with requests still in flight");
    }
    // No more requests: deliver the reports still queued and let exporters flush, within
    // the same budget again.
    tracing::info!("delivering queued reports and closing handlers");
    let dropped_before = dropped_at_shutdown(runtime.metrics());
    runtime.shutdown(settings.drain_timeout).await;
    let dropped_reports = dropped_at_shutdown(runtime.metrics()).saturating_sub(dropped_before);
    if let Some(traces) = traces {
        // Blocking: the batch's last export runs on the exporter's thread, over this
        // runtime's reactor.
        let flushed = tokio::task::spawn_blocking(move || traces.shutdown()).await;
        if let Ok(Err(e)) = flushed {
            tracing::warn!("the mixer's own traces were not all exported: {e}");
        }
    }
    // The last line of the log says whether anything was lost, for whoever reads only that.
    if dropped_reports > 0 {
        tracing::warn!(
            "stopped: {dropped_reports} report records were not delivered within \
             --drain-timeout and are lost; exiting with status {EXIT_REPORTS_DROPPED}"
        );
    } else {
        tracing::info!("stopped: every queued report record was delivered");
    }
    Ok(Stopped { dropped_reports })
}

/// Report records counted in `mixer_report_dropped_total{reason="shutdown_deadline"}`, over
/// every handler.
fn dropped_at_shutdown(metrics: &RuntimeMetrics) -> u64 {
    use prometheus::core::Collector;
    metrics
        .report_dropped
        .collect()
        .iter()
        .flat_map(|family| family.get_metric())
        .filter(|metric| {
            metric
                .get_label()
                .iter()
                .any(|l| l.name() == "reason" && l.value() == "shutdown_deadline")
        })
        // Counts of records, exact in an f64 far past any queue's bound.
        .map(|metric| metric.get_counter().get_value() as u64)
        .sum()
}
