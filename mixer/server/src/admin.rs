//! The admin endpoints: `/metrics`, `/healthz`, `/readyz`, `/config_dump`, `/quota`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{RawQuery, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use mixer_runtime::{ConfigOrigin, DiskState, Runtime};
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::sync::watch;

use crate::admin_token::AdminToken;
use crate::quota_endpoint::QuotaAccess;

#[derive(Clone)]
struct Admin {
    runtime: Arc<Runtime>,
    registry: Registry,
    /// True from SIGTERM on.
    draining: watch::Receiver<bool>,
    /// Asked for by every endpoint but the probes, when set.
    token: Option<Arc<AdminToken>>,
    /// Whether `/quota` is served on this listener.
    quota: QuotaAccess,
}

/// The admin routes, and gRPC's `grpc.health.v1.Health` served by `health`. `/readyz`
/// answers 503 once `draining` turns true. With `token`, `/metrics` and `/config_dump` ask
/// for it as a bearer token; the probes (`/healthz`, `/readyz`, gRPC health) never do, as
/// the kubelet sends none.
pub fn router<H>(
    runtime: Arc<Runtime>,
    registry: Registry,
    health: H,
    draining: watch::Receiver<bool>,
    token: Option<Arc<AdminToken>>,
    quota: QuotaAccess,
) -> Router
where
    H: tonic::server::NamedService
        + tower_service::Service<
            axum::http::Request<axum::body::Body>,
            Response = axum::http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    H::Future: Send + 'static,
{
    let admin = Admin {
        runtime,
        registry,
        draining,
        token,
        quota,
    };
    let guarded = Router::new()
        .route("/metrics", axum::routing::get(metrics))
        .route("/config_dump", axum::routing::get(config_dump))
        .route("/quota", axum::routing::get(quota_left))
        .route_layer(axum::middleware::from_fn_with_state(
            admin.clone(),
            require_token,
        ));
    Router::new()
        .route_service(&format!("/{}/{{*method}}", H::NAME), health)
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route("/readyz", axum::routing::get(readyz))
        .merge(guarded)
        .with_state(admin)
}

/// Answers 401 to a request without the admin token, when there is one.
async fn require_token(State(admin): State<Admin>, request: Request, next: Next) -> Response {
    if let Some(token) = &admin.token
        && !token
            .allows(request.headers().get(header::AUTHORIZATION))
            .await
    {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"mixer admin\"")],
            "this admin endpoint needs the bearer token of --admin-token-file\n",
        )
            .into_response();
    }
    next.run(request).await
}

/// What to warn of at start when the admin listener is reachable from other hosts: its
/// endpoints are plaintext (`--tls-*` covers only the gRPC and forward-auth listeners), and
/// without a token `/config_dump` (every rule, handler and param) is anyone's to read.
pub fn exposure_warning(admin_addr: SocketAddr, has_token: bool) -> Option<&'static str> {
    if admin_addr.ip().is_loopback() {
        None
    } else if has_token {
        Some(
            "--admin-addr is not a loopback address: the admin endpoints are served in \
             plaintext (--tls-* does not cover them), the admin token included; keep the port \
             on a network only the kubelet and Prometheus reach",
        )
    } else {
        Some(
            "--admin-addr is not a loopback address: /config_dump and /metrics are served \
             without authentication and in plaintext (--tls-* does not cover them) to anyone \
             who reaches the port; set --admin-token-file, and keep the port on a network \
             only the kubelet and Prometheus reach",
        )
    }
}

/// The mixer's own metrics (`mixer_*`), envoyproxy/ratelimit's statistics of the active
/// snapshot's limits, then those of handlers that serve metrics (the prometheus adapter's). Rendered on a blocking thread: a large
/// exposition takes milliseconds of CPU that checks on the async workers must not wait for.
async fn metrics(State(admin): State<Admin>) -> Response {
    let rendered = tokio::task::spawn_blocking(move || render_metrics(&admin)).await;
    match rendered {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], text).into_response(),
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn render_metrics(admin: &Admin) -> Result<String, String> {
    let mut body = Vec::new();
    TextEncoder::new()
        .encode(&admin.registry.gather(), &mut body)
        .map_err(|e| e.to_string())?;
    let mut text = String::from_utf8_lossy(&body).into_owned();
    let snapshot = admin.runtime.snapshot();
    snapshot.render_rate_limit_stats(&mut text);
    for handler in &snapshot.handlers {
        if let Some(exposition) = handler.handler.as_exposition() {
            exposition.render(&mut text);
        }
    }
    Ok(text)
}

/// `GET /quota`: how much of one quota is left ([`crate::quota_endpoint`]).
async fn quota_left(State(admin): State<Admin>, RawQuery(query): RawQuery) -> Response {
    crate::quota_endpoint::answer(&admin.runtime, admin.quota, query.as_deref()).await
}

/// Ready (200) while a valid config is active and SIGTERM has not come. The body says
/// which content is active, by hash, and whether the files on disk still hold it: a
/// snapshot is called `current` only then. A rejected or unreadable config on disk leaves
/// the mixer ready (the older content still serves, as it would after a restart that
/// failed to load) but says `stale` or `unreadable`, and `mixer_config_stale` is 1.
async fn readyz(State(admin): State<Admin>) -> Response {
    let runtime = admin.runtime.clone();
    let disk = disk_state(&runtime).await;
    let snapshot = runtime.snapshot();
    let active = runtime.active_content();
    let last_error = runtime
        .last_error()
        .map(|e| format!("last reload failed: {e}\n"))
        .unwrap_or_default();
    let hash = active.as_ref().map_or("none", |c| c.hash.as_str());
    let files_hash = active.as_ref().map_or("none", |c| c.files_hash.as_str());
    let config = match &disk {
        DiskState::Current => "config: current (the files on disk hold this content)".into(),
        DiskState::Pending { disk_hash } => {
            format!("config: pending: the files on disk ({disk_hash}) are not loaded yet")
        }
        DiskState::Stale { disk_hash } => format!(
            "config: stale: the files on disk ({disk_hash}) were rejected; an older content serves"
        ),
        DiskState::Unreadable { error } => {
            format!("config: unreadable: {error}; an older content serves")
        }
    };
    let dropped: String = snapshot
        .config
        .dropped
        .iter()
        .map(|d| format!("dropped: {d}\n"))
        .collect();
    let notes: String = snapshot
        .config
        .notes
        .iter()
        .cloned()
        .chain(
            snapshot
                .handlers
                .iter()
                .filter_map(|h| h.handler.readiness_note()),
        )
        .map(|n| format!("note: {n}\n"))
        .collect();
    let removal = runtime
        .last_removal()
        .map(|r| format!("last removal: {r}\n"))
        .unwrap_or_default();
    let details = format!(
        "config_hash: {hash}\nfiles_hash: {files_hash}\n{config}\n{dropped}{notes}{removal}{last_error}"
    );
    if *admin.draining.borrow() {
        let body = format!(
            "not ready: draining (SIGTERM received); calls are still answered until the \
             drain ends\n{details}"
        );
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    } else if let Err(not_ready) = runtime.ready_snapshot() {
        // The runtime's wording, as every front end answers a request it gets meanwhile.
        let body = format!("not ready: {not_ready}\n{details}");
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    } else {
        let body = format!("ready: config snapshot {}\n{details}", snapshot.id);
        (StatusCode::OK, body).into_response()
    }
}

/// Reads the config files (off the async workers) and compares them with the active content.
async fn disk_state(runtime: &Arc<Runtime>) -> DiskState {
    let rt = runtime.clone();
    tokio::task::spawn_blocking(move || rt.disk_state())
        .await
        .unwrap_or_else(|e| DiskState::Unreadable {
            error: e.to_string(),
        })
}

async fn config_dump(State(admin): State<Admin>) -> Response {
    let runtime = &admin.runtime;
    let disk = disk_state(runtime).await;
    let snapshot = runtime.snapshot();
    let origin = match runtime.origin() {
        ConfigOrigin::Embedded(_) => "embedded default".to_string(),
        ConfigOrigin::Path(p) => p.display().to_string(),
    };
    let active = runtime.active_content();
    let disk_hash = match &disk {
        DiskState::Current => active.as_ref().map(|c| c.files_hash.clone()),
        other => other.disk_hash().map(str::to_string),
    };
    let dump = serde_json::json!({
        "ready": runtime.is_ready(),
        "draining": *admin.draining.borrow(),
        "snapshot_id": snapshot.id,
        "origin": origin,
        "config_hash": active.as_ref().map(|c| c.hash.clone()),
        "files_hash": active.as_ref().map(|c| c.files_hash.clone()),
        // A secret file's digest would let a short secret be guessed: only its path shows.
        "input_files": active.as_ref().map(|c| c.inputs.iter().map(|i| serde_json::json!({
            "path": i.path.display().to_string(),
            "sha256": if i.secret { None } else { i.sha256.as_deref() },
            "secret": i.secret,
        })).collect::<Vec<_>>()),
        "config_files": active.as_ref().map(|c| c.files.iter().map(|f| serde_json::json!({
            "name": f.name,
            "sha256": f.sha256,
        })).collect::<Vec<_>>()),
        "disk": {
            "state": disk.label(),
            "hash": disk_hash,
            "error": match &disk { DiskState::Unreadable { error } => Some(error), _ => None },
        },
        "last_error": runtime.last_error().map(|e| e.messages()),
        "last_error_details": runtime.last_error().map(|e| e.errors.iter().map(|c| serde_json::json!({
            "file": c.file,
            "document": c.document,
            "field": c.field,
            "message": c.message,
        })).collect::<Vec<_>>()),
        "indexed_rules": snapshot.indexed_rules(),
        "dropped_documents": snapshot.config.dropped.iter().map(dropped_json).collect::<Vec<_>>(),
        "config": snapshot.config.dump(),
    });
    axum::Json(dump).into_response()
}

/// A dropped document for `/config_dump`: its full name, file, reason (`invalid` or
/// `dependency`) and the errors or the dropped documents it needed.
fn dropped_json(d: &mixer_config::DroppedDocument) -> serde_json::Value {
    let (errors, needs): (Vec<String>, &[String]) = match &d.reason {
        mixer_config::DropReason::Invalid(errors) => {
            (errors.iter().map(ToString::to_string).collect(), &[])
        }
        mixer_config::DropReason::Dependency(needs) => (Vec::new(), needs),
    };
    serde_json::json!({
        "name": d.name,
        "file": d.file,
        "reason": d.reason_label(),
        "errors": errors,
        "needs": needs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_loopback_admin_address_is_warned_of() {
        let addr = |a: &str| a.parse::<SocketAddr>().expect("address");
        assert_eq!(exposure_warning(addr("127.0.0.1:9093"), false), None);
        assert_eq!(exposure_warning(addr("[::1]:9093"), false), None);
        let open = exposure_warning(addr("0.0.0.0:9093"), false).expect("warned");
        assert!(open.contains("without authentication"), "{open}");
        let with_token = exposure_warning(addr("10.0.0.7:9093"), true).expect("warned");
        assert!(with_token.contains("plaintext"), "{with_token}");
        assert!(
            !with_token.contains("without authentication"),
            "{with_token}"
        );
    }

    /// A collector whose gathering waits for a message from another task.
    struct Waiting(std::sync::Mutex<std::sync::mpsc::Receiver<()>>);

    impl prometheus::core::Collector for Waiting {
        fn desc(&self) -> Vec<&prometheus::core::Desc> {
            Vec::new()
        }

        fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
            let rx = self.0.lock().unwrap_or_else(|e| e.into_inner());
            // Bounded, so that rendering on the async thread fails the test instead of
            // hanging it.
            assert!(
                rx.recv_timeout(std::time::Duration::from_secs(5)).is_ok(),
                "the other task never ran while /metrics was rendered"
            );
            Vec::new()
        }
    }

    #[test]
    fn metrics_render_off_the_async_thread() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (tx, rx) = std::sync::mpsc::channel();
        let registry = Registry::new();
        registry
            .register(Box::new(Waiting(std::sync::Mutex::new(rx))))
            .expect("register");
        let runtime = Arc::new(Runtime::new(
            ConfigOrigin::Embedded(crate::defaults::config()),
            crate::adapters::builtin(),
            mixer_config::ConfigOptions::default(),
            mixer_runtime::RuntimeOptions::default(),
            mixer_runtime::RuntimeMetrics::unregistered(),
        ));
        let (_draining_tx, draining) = watch::channel(false);
        let admin = Admin {
            runtime,
            registry,
            draining,
            token: None,
            quota: QuotaAccess::Served,
        };
        let status = rt.block_on(async move {
            // The only async thread renders inline, or lets this task send.
            let scrape = tokio::spawn(metrics(State(admin)));
            tokio::task::yield_now().await;
            tx.send(()).expect("send");
            scrape.await.expect("join").status()
        });
        assert_eq!(status, StatusCode::OK);
    }
}
