//! The baseline: an ext_authz server on the mixer's own gRPC stack (`mixer-grpc`: Check
//! served directly, tonic's routes behind it, TCP_NODELAY) that answers OK to everything, so
//! the mixer's throughput and latency can be given as ratios of it, measured in the same run.

use std::net::SocketAddr;
use std::sync::Arc;

use envoy_types::ext_authz::v3::CheckResponseExt;
use envoy_types::ext_authz::v3::pb::{
    Authorization, AuthorizationServer, CheckRequest, CheckResponse,
};
use tonic::{Request, Response, Status};

#[derive(Clone)]
struct AlwaysOk;

#[tonic::async_trait]
impl Authorization for AlwaysOk {
    async fn check(
        &self,
        _request: Request<CheckRequest>,
    ) -> Result<Response<CheckResponse>, Status> {
        Ok(Response::new(CheckResponse::with_status(Status::ok(
            "allowed",
        ))))
    }
}

/// Serves the always-OK ext_authz service until the process ends, on the same stack as the
/// mixer's, so that the ratio measures the mixer's work and not a difference of stacks.
pub async fn serve(addr: SocketAddr) -> anyhow::Result<()> {
    serve_on(tokio::net::TcpListener::bind(addr).await?).await
}

/// [`serve`] on a listener already bound.
pub async fn serve_on(listener: tokio::net::TcpListener) -> anyhow::Result<()> {
    let mut methods = mixer_grpc::Methods::new();
    methods.add(
        mixer_frontends::grpc::EXT_AUTHZ_CHECK,
        mixer_grpc::unary(AlwaysOk, |s, r| async move { s.check(r).await }),
    );
    let mut routes = tonic::service::RoutesBuilder::default();
    routes.add_service(AuthorizationServer::from_arc(Arc::new(AlwaysOk)));
    mixer_grpc::Server::new(methods, routes.routes())
        .serve(listener, std::future::pending())
        .await?;
    Ok(())
}
