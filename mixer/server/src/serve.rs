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
    /// Reload on file change.
    pub watch: bool,
    /// How long requests in flight get after SIGTERM.
    pub drain_timeout: Duration,
    /// Runtime worker threads; `None` = one per core.
    pub worker_threads: Option<usize>,
    /// Low-priority report threads; 0 = none.
    pub report_threads: usize,
    /// Config options.
    pub config_args: ConfigArgs,
}

/// Runs the server until SIGTERM or Ctrl-C.
pub fn run(settings: Settings) -> anyhow::Result<()> {
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

async fn serve(settings: Settings) -> anyhow::Result<()> {
    let registry = prometheus::Registry::new();
    let metrics = RuntimeMetrics::new(&registry).context("registering metrics")?;
    let origin = match &settings.config {
        Some(path) => ConfigOrigin::Path(path.clone()),
        None => ConfigOrigin::Embedded(crate::defaults::config()),
    };
    let runtime = Arc::new(Runtime::new(
        origin,
        crate::adapters::builtin(),
        crate::validate::config_options(&settings.config_args),
        mixer_runtime::RuntimeOptions {
            report_threads: settings.report_threads,
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
            mixer_runtime::watch(runtime.clone(), path, Duration::from_millis(300))
                .with_context(|| format!("watching {}", path.display()))?,
        ),
        _ => None,
    };

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let (health, health_service) = tonic_health::server::health_reporter();
    let health_runtime = runtime.clone();
    let mut health_stop = stop_rx.clone();
    tokio::spawn(async move {
        loop {
            let status = if health_runtime.is_ready() {
                tonic_health::ServingStatus::Serving
            } else {
                tonic_health::ServingStatus::NotServing
            };
            health.set_service_status("", status).await;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = health_stop.changed() => {
                    health.set_service_status("", tonic_health::ServingStatus::NotServing).await;
                    return;
                }
            }
        }
    });
    // Unary methods are served straight from the front ends; the streaming access log
    // service, health and unknown paths by tonic's routes.
    let mut routes = tonic::service::RoutesBuilder::default();
    routes
        .add_service(health_service)
        .add_service(mixer_frontends::ext_authz::service(runtime.clone()))
        .add_service(mixer_frontends::mixer_v1::service(runtime.clone()))
        .add_service(mixer_frontends::ratelimit::service(runtime.clone()))
        .add_service(mixer_frontends::access_log::service(runtime.clone()))
        .add_service(mixer_frontends::otlp::logs_service(runtime.clone()))
        .add_service(mixer_frontends::otlp::trace_service(runtime.clone()));
    let grpc_server = mixer_grpc::Server::new(
        mixer_frontends::grpc::unary_methods(&runtime),
        routes.routes(),
    )
    .drain(settings.drain_timeout);
    let grpc_task = tokio::spawn(grpc_server.serve(grpc, stopped(stop_rx.clone())));
    let http_app = mixer_frontends::forward_auth::router(runtime.clone())
        .into_make_service_with_connect_info::<SocketAddr>();
    let http_task = tokio::spawn(
        axum::serve(http, http_app)
            .with_graceful_shutdown(stopped(stop_rx.clone()))
            .into_future(),
    );
    let admin_app = crate::admin::router(runtime.clone(), registry);
    let admin_task = tokio::spawn(
        axum::serve(admin, admin_app)
            .with_graceful_shutdown(stopped(stop_rx.clone()))
            .into_future(),
    );
    tracing::info!(
        grpc = %settings.grpc_addr, http = %settings.http_addr, admin = %settings.admin_addr,
        "mixer serving"
    );

    shutdown_signal().await;
    tracing::info!("shutting down: draining requests in flight");
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
    runtime.shutdown(settings.drain_timeout).await;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
