//! The generated gRPC service traits (`InfrastructureBackend` and one `Handle*Service` per
//! template), implemented once over the adapter's handlers.

use std::sync::Arc;

use mixer_adapter_api::Generated;
use mixer_model::{Instance, Template, Variety};
use mixer_proto::adapter::template::kubernetes;
use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_proto::{
    apikey, authorization, checknothing, jwt, listentry, logentry, metric, quota, reportnothing,
    tracespan,
};
use moka::policy::EvictionPolicy;
use tonic::{Code, Request, Response, Status};

use crate::convert;
use crate::handlers::Handlers;

use apikey::handle_api_key_service_server::HandleApiKeyService;
use authorization::handle_authorization_service_server::HandleAuthorizationService;
use checknothing::handle_check_nothing_service_server::HandleCheckNothingService;
use jwt::handle_jwt_service_server::HandleJwtService;
use kubernetes::handle_kubernetes_service_server::HandleKubernetesService;
use listentry::handle_list_entry_service_server::HandleListEntryService;
use logentry::handle_log_entry_service_server::HandleLogEntryService;
use metric::handle_metric_service_server::HandleMetricService;
use model::infrastructure_backend_server::InfrastructureBackend;
use quota::handle_quota_service_server::HandleQuotaService;
use reportnothing::handle_report_nothing_service_server::HandleReportNothingService;
use tracespan::handle_trace_span_service_server::HandleTraceSpanService;

/// How many report batches are remembered by `dedup_id`: the mixer retries a batch within
/// a second or so, far fewer batches than this apart.
const REMEMBERED_BATCHES: u64 = 4096;

/// Every generated service, over the adapter's handlers; cheap to clone.
#[derive(Clone)]
pub(crate) struct Svc {
    pub(crate) handlers: Arc<Handlers>,
    /// The `dedup_id`s of the last report batches handled, so a batch the mixer retries
    /// (same id) after a lost answer is not recorded twice.
    handled: moka::sync::Cache<String, ()>,
}

impl Svc {
    pub(crate) fn new(handlers: Arc<Handlers>) -> Svc {
        Svc {
            handlers,
            handled: moka::sync::Cache::builder()
                .max_capacity(REMEMBERED_BATCHES)
                .eviction_policy(EvictionPolicy::lru())
                .build(),
        }
    }

    /// The answer to a call of `template` whose handler lacks that template's side: the
    /// adapter declares what it cannot serve, and saying so beats any answer.
    fn lacking(&self, template: Template) -> Status {
        Status::unimplemented(format!(
            "adapter {} declares template {template}, but its handler offers no {:?} side \
             (Handler::as_{})",
            self.handlers.adapter().info().name,
            template.variety(),
            match template.variety() {
                Variety::Check => "check",
                Variety::Quota => "quota",
                Variety::Report => "report",
                Variety::AttributeGenerator => "attributes",
            }
        ))
    }

    async fn check(
        &self,
        adapter_config: Option<prost_types::Any>,
        instance: Instance,
    ) -> Result<Response<model::CheckResult>, Status> {
        let handler = self.handlers.handler(adapter_config.as_ref()).await?;
        let checks = handler
            .as_check()
            .ok_or_else(|| self.lacking(instance.template))?;
        let result = checks
            .check(&instance)
            .await
            .map_err(|e| convert::error_status(&e))?;
        Ok(Response::new(convert::check_result(&result)))
    }

    /// Asks the handler's attribute side for `instance`'s outputs; the caller puts them in
    /// the template's `OutputMsg`.
    async fn generate(
        &self,
        adapter_config: Option<prost_types::Any>,
        instance: Instance,
    ) -> Result<Generated, Status> {
        let handler = self.handlers.handler(adapter_config.as_ref()).await?;
        let generator = handler
            .as_attributes()
            .ok_or_else(|| self.lacking(instance.template))?;
        generator
            .generate(&instance)
            .await
            .map_err(|e| convert::error_status(&e))
    }

    async fn report(
        &self,
        adapter_config: Option<prost_types::Any>,
        dedup_id: String,
        template: Template,
        instances: impl FnOnce() -> Result<Vec<Instance>, Status>,
    ) -> Result<Response<model::ReportResult>, Status> {
        if !dedup_id.is_empty() && self.handled.contains_key(&dedup_id) {
            return Ok(Response::new(model::ReportResult {}));
        }
        let handler = self.handlers.handler(adapter_config.as_ref()).await?;
        let reports = handler.as_report().ok_or_else(|| self.lacking(template))?;
        reports
            .report(&instances()?)
            .await
            .map_err(|e| convert::error_status(&e))?;
        if !dedup_id.is_empty() {
            self.handled.insert(dedup_id, ());
        }
        Ok(Response::new(model::ReportResult {}))
    }
}

fn ok_or_invalid(result: Result<(), String>) -> mixer_proto::google::rpc::Status {
    match result {
        Ok(()) => convert::rpc_status(Code::Ok as i32, ""),
        Err(message) => convert::rpc_status(Code::InvalidArgument as i32, &message),
    }
}

#[tonic::async_trait]
impl InfrastructureBackend for Svc {
    async fn validate(
        &self,
        request: Request<model::ValidateRequest>,
    ) -> Result<Response<model::ValidateResponse>, Status> {
        let request = request.get_ref();
        let result = self
            .handlers
            .validate(request.adapter_config.as_ref(), &request.inferred_types);
        Ok(Response::new(model::ValidateResponse {
            status: Some(ok_or_invalid(result.map(drop))),
        }))
    }

    async fn create_session(
        &self,
        request: Request<model::CreateSessionRequest>,
    ) -> Result<Response<model::CreateSessionResponse>, Status> {
        let request = request.get_ref();
        let created = self
            .handlers
            .create_session(request.adapter_config.as_ref(), &request.inferred_types);
        let (session_id, status) = match created {
            Ok(id) => (id, convert::rpc_status(Code::Ok as i32, "")),
            Err(s) => (
                String::new(),
                convert::rpc_status(s.code() as i32, s.message()),
            ),
        };
        Ok(Response::new(model::CreateSessionResponse {
            session_id,
            status: Some(status),
        }))
    }

    async fn close_session(
        &self,
        request: Request<model::CloseSessionRequest>,
    ) -> Result<Response<model::CloseSessionResponse>, Status> {
        let id = &request.get_ref().session_id;
        let status = if self.handlers.close_session(id).await {
            convert::rpc_status(Code::Ok as i32, "")
        } else {
            convert::rpc_status(Code::NotFound as i32, &format!("unknown session {id:?}"))
        };
        Ok(Response::new(model::CloseSessionResponse {
            status: Some(status),
        }))
    }
}

#[tonic::async_trait]
impl HandleCheckNothingService for Svc {
    async fn handle_check_nothing(
        &self,
        request: Request<checknothing::HandleCheckNothingRequest>,
    ) -> Result<Response<model::CheckResult>, Status> {
        let request = request.into_inner();
        let instance = convert::check_nothing(request.instance);
        self.check(request.adapter_config, instance).await
    }
}

#[tonic::async_trait]
impl HandleListEntryService for Svc {
    async fn handle_list_entry(
        &self,
        request: Request<listentry::HandleListEntryRequest>,
    ) -> Result<Response<model::CheckResult>, Status> {
        let request = request.into_inner();
        let instance = convert::list_entry(request.instance);
        self.check(request.adapter_config, instance).await
    }
}

#[tonic::async_trait]
impl HandleAuthorizationService for Svc {
    async fn handle_authorization(
        &self,
        request: Request<authorization::HandleAuthorizationRequest>,
    ) -> Result<Response<model::CheckResult>, Status> {
        let request = request.into_inner();
        let instance = convert::authorization(request.instance)?;
        self.check(request.adapter_config, instance).await
    }
}

#[tonic::async_trait]
impl HandleQuotaService for Svc {
    async fn handle_quota(
        &self,
        request: Request<quota::HandleQuotaRequest>,
    ) -> Result<Response<model::QuotaResult>, Status> {
        let request = request.into_inner();
        let (instance, args) = convert::quota(
            request.instance,
            request.quota_request.as_ref(),
            request.dedup_id,
        )?;
        let handler = self
            .handlers
            .handler(request.adapter_config.as_ref())
            .await?;
        let quotas = handler
            .as_quota()
            .ok_or_else(|| self.lacking(Template::Quota))?;
        let result = quotas
            .allocate(&instance, &args)
            .await
            .map_err(|e| convert::error_status(&e))?;
        Ok(Response::new(convert::quota_result(
            instance.name.to_string(),
            &result,
        )))
    }
}

/// One report service: the generated trait's method hands the batch, converted by the
/// template's function, to [`Svc::report`]. The four report templates differ only in these.
macro_rules! report_service {
    ($service:ident, $method:ident, $request:ty, $template:expr, $convert:expr) => {
        #[tonic::async_trait]
        impl $service for Svc {
            async fn $method(
                &self,
                request: Request<$request>,
            ) -> Result<Response<model::ReportResult>, Status> {
                let request = request.into_inner();
                let instances = request.instances;
                self.report(request.adapter_config, request.dedup_id, $template, || {
                    instances.into_iter().map($convert).collect()
                })
                .await
            }
        }
    };
}

report_service!(
    HandleMetricService,
    handle_metric,
    metric::HandleMetricRequest,
    Template::Metric,
    convert::metric
);
report_service!(
    HandleLogEntryService,
    handle_log_entry,
    logentry::HandleLogEntryRequest,
    Template::LogEntry,
    convert::log_entry
);
report_service!(
    HandleTraceSpanService,
    handle_trace_span,
    tracespan::HandleTraceSpanRequest,
    Template::TraceSpan,
    convert::trace_span
);
report_service!(
    HandleReportNothingService,
    handle_report_nothing,
    reportnothing::HandleReportNothingRequest,
    Template::ReportNothing,
    |i| Ok(convert::report_nothing(i))
);

#[tonic::async_trait]
impl HandleKubernetesService for Svc {
    async fn handle_kubernetes(
        &self,
        request: Request<kubernetes::HandleKubernetesRequest>,
    ) -> Result<Response<kubernetes::OutputMsg>, Status> {
        let request = request.into_inner();
        let instance = convert::kubernetes(request.instance)?;
        let generated = self.generate(request.adapter_config, instance).await?;
        Ok(Response::new(convert::kubernetes_output(&generated)?))
    }
}

#[tonic::async_trait]
impl HandleJwtService for Svc {
    async fn handle_jwt(
        &self,
        request: Request<jwt::HandleJwtRequest>,
    ) -> Result<Response<jwt::OutputMsg>, Status> {
        let request = request.into_inner();
        let instance = convert::jwt(request.instance);
        let generated = self.generate(request.adapter_config, instance).await?;
        Ok(Response::new(convert::jwt_output(&generated)?))
    }
}

#[tonic::async_trait]
impl HandleApiKeyService for Svc {
    async fn handle_api_key(
        &self,
        request: Request<apikey::HandleApiKeyRequest>,
    ) -> Result<Response<apikey::OutputMsg>, Status> {
        let request = request.into_inner();
        let instance = convert::apikey(request.instance);
        let generated = self.generate(request.adapter_config, instance).await?;
        Ok(Response::new(convert::apikey_output(&generated)?))
    }
}
