//! The generated gRPC service traits (`InfrastructureBackend` and one `Handle*Service` per
//! template), implemented once over any adapter.

use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_proto::{
    authorization, checknothing, listentry, logentry, metric, quota, reportnothing, tracespan,
};
use tonic::{Request, Response, Status};

use crate::convert;
use crate::sessions::Shared;
use crate::traits::{
    Adapter, Authorization, CheckNothing, ListEntry, LogEntry, Metric, Quota, ReportNothing,
    TraceSpan,
};
use crate::types::Code;

use authorization::handle_authorization_service_server::HandleAuthorizationService;
use checknothing::handle_check_nothing_service_server::HandleCheckNothingService;
use listentry::handle_list_entry_service_server::HandleListEntryService;
use logentry::handle_log_entry_service_server::HandleLogEntryService;
use metric::handle_metric_service_server::HandleMetricService;
use model::infrastructure_backend_server::InfrastructureBackend;
use quota::handle_quota_service_server::HandleQuotaService;
use reportnothing::handle_report_nothing_service_server::HandleReportNothingService;
use tracespan::handle_trace_span_service_server::HandleTraceSpanService;

/// The generated service traits, implemented once over any adapter; each impl requires the
/// matching template trait.
pub(crate) struct Svc<A>(pub(crate) Shared<A>);

/// The answer to a report batch.
fn reported() -> Response<model::ReportResult> {
    Response::new(model::ReportResult {})
}

impl<A> Clone for Svc<A> {
    fn clone(&self) -> Self {
        Svc(self.0.clone())
    }
}

fn status_of(result: Result<(), String>) -> mixer_proto::google::rpc::Status {
    match result {
        Ok(()) => convert::status(Code::Ok, ""),
        Err(message) => convert::status(Code::InvalidArgument, &message),
    }
}

#[tonic::async_trait]
impl<A: Adapter> InfrastructureBackend for Svc<A> {
    async fn validate(
        &self,
        request: Request<model::ValidateRequest>,
    ) -> Result<Response<model::ValidateResponse>, Status> {
        let request = request.get_ref();
        let result = self
            .0
            .validated(request.adapter_config.as_ref(), &request.inferred_types);
        Ok(Response::new(model::ValidateResponse {
            status: Some(status_of(result.map(drop))),
        }))
    }

    async fn create_session(
        &self,
        request: Request<model::CreateSessionRequest>,
    ) -> Result<Response<model::CreateSessionResponse>, Status> {
        let request = request.get_ref();
        let validated = self
            .0
            .validated(request.adapter_config.as_ref(), &request.inferred_types);
        let response = match validated {
            Ok(config) => model::CreateSessionResponse {
                session_id: self.0.sessions.create(config),
                status: Some(status_of(Ok(()))),
            },
            Err(message) => model::CreateSessionResponse {
                session_id: String::new(),
                status: Some(status_of(Err(message))),
            },
        };
        Ok(Response::new(response))
    }

    async fn close_session(
        &self,
        request: Request<model::CloseSessionRequest>,
    ) -> Result<Response<model::CloseSessionResponse>, Status> {
        let id = &request.get_ref().session_id;
        let status = if self.0.sessions.close(id) {
            convert::status(Code::Ok, "")
        } else {
            convert::status(Code::NotFound, &format!("unknown session {id:?}"))
        };
        Ok(Response::new(model::CloseSessionResponse {
            status: Some(status),
        }))
    }
}

#[tonic::async_trait]
impl<A: CheckNothing> HandleCheckNothingService for Svc<A> {
    async fn handle_check_nothing(
        &self,
        request: Request<checknothing::HandleCheckNothingRequest>,
    ) -> Result<Response<model::CheckResult>, Status> {
        let request = request.into_inner();
        let config = self.0.config(request.adapter_config.as_ref())?;
        let instance = convert::check_nothing(request.instance);
        let result = CheckNothing::check(&*self.0.adapter, &instance, &config).await?;
        Ok(Response::new(convert::check_result(result)))
    }
}

#[tonic::async_trait]
impl<A: ListEntry> HandleListEntryService for Svc<A> {
    async fn handle_list_entry(
        &self,
        request: Request<listentry::HandleListEntryRequest>,
    ) -> Result<Response<model::CheckResult>, Status> {
        let request = request.into_inner();
        let config = self.0.config(request.adapter_config.as_ref())?;
        let instance = convert::list_entry(request.instance);
        let result = ListEntry::check(&*self.0.adapter, &instance, &config).await?;
        Ok(Response::new(convert::check_result(result)))
    }
}

#[tonic::async_trait]
impl<A: Authorization> HandleAuthorizationService for Svc<A> {
    async fn handle_authorization(
        &self,
        request: Request<authorization::HandleAuthorizationRequest>,
    ) -> Result<Response<model::CheckResult>, Status> {
        let request = request.into_inner();
        let config = self.0.config(request.adapter_config.as_ref())?;
        let instance = convert::authorization(request.instance);
        let result = Authorization::check(&*self.0.adapter, &instance, &config).await?;
        Ok(Response::new(convert::check_result(result)))
    }
}

#[tonic::async_trait]
impl<A: Quota> HandleQuotaService for Svc<A> {
    async fn handle_quota(
        &self,
        request: Request<quota::HandleQuotaRequest>,
    ) -> Result<Response<model::QuotaResult>, Status> {
        let request = request.into_inner();
        let config = self.0.config(request.adapter_config.as_ref())?;
        let (instance, args) = convert::quota(request.instance, request.quota_request.as_ref());
        let result = Quota::alloc(&*self.0.adapter, &instance, args, &config).await?;
        Ok(Response::new(convert::quota_result(instance.name, result)))
    }
}

/// One report service: the shared dedup/config step, the template's conversion, the
/// adapter's trait method. The four report templates differ only in those names.
macro_rules! report_service {
    ($template:ident, $service:ident, $method:ident, $request:ty, $convert:path) => {
        #[tonic::async_trait]
        impl<A: $template> $service for Svc<A> {
            async fn $method(
                &self,
                request: Request<$request>,
            ) -> Result<Response<model::ReportResult>, Status> {
                let request = request.into_inner();
                let Some(config) = self
                    .0
                    .report_config(&request.dedup_id, request.adapter_config.as_ref())?
                else {
                    return Ok(reported());
                };
                let instances: Vec<_> = request.instances.into_iter().map($convert).collect();
                $template::report(&*self.0.adapter, &instances, &config).await?;
                self.0.handled.done(request.dedup_id);
                Ok(reported())
            }
        }
    };
}

report_service!(
    Metric,
    HandleMetricService,
    handle_metric,
    metric::HandleMetricRequest,
    convert::metric
);
report_service!(
    LogEntry,
    HandleLogEntryService,
    handle_log_entry,
    logentry::HandleLogEntryRequest,
    convert::log_entry
);
report_service!(
    TraceSpan,
    HandleTraceSpanService,
    handle_trace_span,
    tracespan::HandleTraceSpanRequest,
    convert::trace_span
);
report_service!(
    ReportNothing,
    HandleReportNothingService,
    handle_report_nothing,
    reportnothing::HandleReportNothingRequest,
    convert::report_nothing
);
