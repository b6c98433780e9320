//! The baseline: an ext_authz server on the same tonic stack that answers OK to everything,
//! so the mixer's throughput can be given as a ratio of it, measured in the same run.

use std::net::SocketAddr;

use envoy_types::ext_authz::v3::CheckResponseExt;
use envoy_types::ext_authz::v3::pb::{
    Authorization, AuthorizationServer, CheckRequest, CheckResponse,
};
use tonic::{Request, Response, Status};

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

/// Serves the always-OK ext_authz service until the process ends, with Nagle's algorithm off
/// as the mixer serves (otherwise an answer can wait for the client's ACK of the previous one,
/// and the baseline's tail is the TCP stack's, not the server's).
pub async fn serve(addr: SocketAddr) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tonic::transport::Server::builder()
        .add_service(AuthorizationServer::new(AlwaysOk))
        .serve_with_incoming(
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
        )
        .await?;
    Ok(())
}
