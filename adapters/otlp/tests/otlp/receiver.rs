//! The OTLP/gRPC receiver the adapter exports to: trace, logs and metrics collector services
//! that record every request and its metadata, and fail or delay calls on demand.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tonic::{Code, Request, Response, Status};

#[derive(Default)]
pub struct Received {
    pub traces: Vec<ExportTraceServiceRequest>,
    pub logs: Vec<ExportLogsServiceRequest>,
    pub metrics: Vec<ExportMetricsServiceRequest>,
    /// Metadata of every call, failed ones included.
    pub metadata: Vec<tonic::metadata::MetadataMap>,
}

#[derive(Clone)]
pub struct Receiver {
    pub received: Arc<Mutex<Received>>,
    /// Calls still to fail, with `fail_code`.
    fail: Arc<AtomicUsize>,
    fail_code: Code,
    pub calls: Arc<AtomicUsize>,
    /// How long each call takes before answering.
    pub delay: Duration,
}

impl Receiver {
    pub fn new(fail: usize, fail_code: Code) -> Receiver {
        Receiver {
            received: Arc::default(),
            fail: Arc::new(AtomicUsize::new(fail)),
            fail_code,
            calls: Arc::default(),
            delay: Duration::ZERO,
        }
    }

    /// What was received so far (and forgets it).
    pub fn take(&self) -> Received {
        std::mem::take(&mut *self.received.lock().unwrap())
    }

    fn call<T>(
        &self,
        request: Request<T>,
        keep: impl FnOnce(&mut Received, T),
    ) -> Result<(), Status> {
        let (metadata, _, message) = request.into_parts();
        let mut received = self.received.lock().unwrap();
        received.metadata.push(metadata);
        if self
            .fail
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(Status::new(self.fail_code, "injected failure"));
        }
        keep(&mut received, message);
        Ok(())
    }
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.call(request, |r, m| r.traces.push(m))?;
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl LogsService for Receiver {
    async fn export(
        &self,
        request: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.call(request, |r, m| r.logs.push(m))?;
        Ok(Response::new(ExportLogsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Receiver {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        self.call(request, |r, m| r.metrics.push(m))?;
        Ok(Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// Serves `receiver` on a free loopback port until the test's runtime ends.
pub async fn serve(receiver: Receiver) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver.clone()))
            .add_service(LogsServiceServer::new(receiver.clone()))
            .add_service(MetricsServiceServer::new(receiver))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    addr
}
