//! The admin endpoints: `/metrics`, `/healthz`, `/readyz`, `/config_dump`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use mixer_runtime::{ConfigOrigin, Runtime};
use prometheus::{Encoder, Registry, TextEncoder};

#[derive(Clone)]
struct Admin {
    runtime: Arc<Runtime>,
    registry: Registry,
}

/// The admin routes.
pub fn router(runtime: Arc<Runtime>, registry: Registry) -> Router {
    Router::new()
        .route("/metrics", axum::routing::get(metrics))
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route("/readyz", axum::routing::get(readyz))
        .route("/config_dump", axum::routing::get(config_dump))
        .with_state(Admin { runtime, registry })
}

/// The mixer's own metrics (`mixer_*`), then those of handlers that serve metrics (the
/// prometheus adapter's), from the active snapshot.
async fn metrics(State(admin): State<Admin>) -> Response {
    let mut body = Vec::new();
    if let Err(e) = TextEncoder::new().encode(&admin.registry.gather(), &mut body) {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    let mut text = String::from_utf8_lossy(&body).into_owned();
    for handler in &admin.runtime.snapshot().handlers {
        if let Some(exposition) = handler.handler.as_exposition() {
            exposition.render(&mut text);
        }
    }
    ([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], text).into_response()
}

async fn readyz(State(admin): State<Admin>) -> Response {
    let runtime = &admin.runtime;
    let last_error = runtime
        .last_error()
        .map(|e| format!("last reload failed: {e}\n"))
        .unwrap_or_default();
    if runtime.is_ready() {
        let body = format!(
            "ready: config snapshot {}\n{last_error}",
            runtime.snapshot().id
        );
        (StatusCode::OK, body).into_response()
    } else {
        let body = format!("not ready: no valid config is active\n{last_error}");
        (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
    }
}

async fn config_dump(State(admin): State<Admin>) -> Response {
    let runtime = &admin.runtime;
    let snapshot = runtime.snapshot();
    let origin = match runtime.origin() {
        ConfigOrigin::Embedded(_) => "embedded default".to_string(),
        ConfigOrigin::Path(p) => p.display().to_string(),
    };
    let dump = serde_json::json!({
        "ready": runtime.is_ready(),
        "snapshot_id": snapshot.id,
        "origin": origin,
        "last_error": runtime.last_error().map(|e| e.messages),
        "indexed_rules": snapshot.indexed_rules(),
        "config": snapshot.config.dump(),
    });
    axum::Json(dump).into_response()
}
