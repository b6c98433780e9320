//! [`RemoteAdapterFactory`]: the mixer's [`RemoteAdapters`], installed in the registry by
//! the server.

use std::sync::Arc;

use mixer_adapter_api::{AdapterError, ErrorKind, Handler, ParamError};
use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_remote::{RemoteAdapters, RemoteHandlerSpec};

use crate::convert;
use crate::handler::RemoteHandler;
use crate::metrics::MetricsSet;
use crate::options::OopOptions;
use crate::transport::{self, Transport};
use crate::typed;

/// Builds [`RemoteHandler`]s and validates their params with the adapter.
#[derive(Default)]
pub struct RemoteAdapterFactory {
    options: OopOptions,
    metrics: Arc<MetricsSet>,
}

/// What the adapter said to `Validate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValidateOutcome {
    /// The params are fine (or the adapter has no `InfrastructureBackend`).
    Accepted,
    /// The adapter refused them, with its message.
    Rejected(String),
    /// The adapter could not be asked (down, slow): the config is accepted with a warning.
    Unreachable(String),
}

impl RemoteAdapterFactory {
    /// A factory with these settings.
    pub fn new(options: OopOptions) -> RemoteAdapterFactory {
        RemoteAdapterFactory {
            options,
            metrics: Arc::default(),
        }
    }

    /// Its settings.
    pub fn options(&self) -> &OopOptions {
        &self.options
    }

    /// Builds the handler as [`RemoteAdapters::build`] does, typed.
    pub fn build_handler(
        &self,
        spec: &RemoteHandlerSpec<'_>,
    ) -> Result<Arc<RemoteHandler>, AdapterError> {
        let params = typed::adapter_config(spec.params, spec.params_descriptor)
            .map_err(|e| AdapterError::permanent(ErrorKind::Internal, format!("params: {e}")))?;
        let mut options = self.options;
        // An adapter resource that says the adapter keeps no sessions saves the CreateSession
        // attempt; without one, the handler tries and falls back to params on each call.
        if spec.session_based == Some(false) {
            options.sessions = false;
        }
        RemoteHandler::new(
            spec.handler_name.clone(),
            spec.connection,
            params,
            spec.instances,
            options,
            self.metrics.clone(),
        )
        .map(Arc::new)
    }

    /// Asks the adapter's `InfrastructureBackend.Validate`, blocking the calling thread for
    /// at most `validate_timeout`.
    ///
    /// Config validation is synchronous (snapshot building runs on a blocking thread in the
    /// server), so the call runs on a short-lived thread with its own current-thread tokio
    /// runtime and a connection of its own. That works whether or not the caller is inside a
    /// tokio runtime, and never blocks a runtime worker that the adapter's answer needs: do
    /// not call it from a single-threaded runtime that also serves the adapter.
    pub fn validate_blocking(&self, spec: &RemoteHandlerSpec<'_>) -> ValidateOutcome {
        let timeout = self.options.validate_timeout;
        let transport = match Transport::new(spec.connection, timeout) {
            Ok(t) => t,
            Err((field, m)) => return ValidateOutcome::Rejected(format!("{field}: {m}")),
        };
        let adapter_config = match typed::adapter_config(spec.params, spec.params_descriptor) {
            Ok(a) => a,
            Err(e) => return ValidateOutcome::Rejected(e.to_string()),
        };
        let request = model::ValidateRequest {
            adapter_config: Some(adapter_config),
            inferred_types: convert::inferred_types(spec.instances),
        };
        let handler = spec.handler_name.clone();
        let thread = std::thread::Builder::new()
            .name("oop-validate".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("no runtime for Validate: {e}"))?;
                rt.block_on(async move {
                    let deadline = tokio::time::Instant::now() + timeout;
                    transport
                        .ready(&handler, deadline)
                        .await
                        .map_err(|e| e.message)?;
                    let call = async {
                        let channel = transport.connect().await.map_err(|e| {
                            tonic::Status::unavailable(format!("cannot connect: {e}"))
                        })?;
                        let mut client =
                            model::infrastructure_backend_client::InfrastructureBackendClient::new(
                                channel,
                            );
                        let mut req = tonic::Request::new(request);
                        req.set_timeout(timeout);
                        client.validate(req).await.map(tonic::Response::into_inner)
                    };
                    tokio::time::timeout_at(deadline, call)
                        .await
                        .map_err(|_| format!("Validate did not answer within {timeout:?}"))
                })
            });
        let answer = match thread.map(|t| t.join()) {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) | Err(_) => {
                return ValidateOutcome::Unreachable("validate thread failed".into());
            }
        };
        match answer {
            Err(m) => ValidateOutcome::Unreachable(m),
            Ok(Ok(resp)) => match resp.status {
                Some(s) if s.code != 0 => ValidateOutcome::Rejected(if s.message.is_empty() {
                    format!("code {}", s.code)
                } else {
                    s.message
                }),
                _ => ValidateOutcome::Accepted,
            },
            Ok(Err(s)) if s.code() == tonic::Code::Unimplemented => ValidateOutcome::Accepted,
            Ok(Err(s)) if s.code() == tonic::Code::InvalidArgument => {
                ValidateOutcome::Rejected(s.message().to_owned())
            }
            Ok(Err(s)) => {
                ValidateOutcome::Unreachable(transport::call_error(&spec.handler_name, &s).message)
            }
        }
    }
}

impl RemoteAdapters for RemoteAdapterFactory {
    /// Rejects what cannot work at all (a bad address, TLS settings rustls refuses) and
    /// params the adapter's `Validate` refused. An adapter that cannot be reached (or does
    /// not implement `InfrastructureBackend`, or fails the TLS handshake) does not fail the
    /// config: it is logged, and calls apply the handler's fail policy until it is up.
    /// (Istio 1.4 did not validate at all.)
    fn validate(&self, spec: &RemoteHandlerSpec<'_>) -> Result<(), Vec<ParamError>> {
        if let Err((field, m)) = Transport::new(spec.connection, self.options.validate_timeout) {
            return Err(vec![ParamError::new(field, m)]);
        }
        // Params that do not fit the adapter's message are refused here, adapter up or not.
        typed::adapter_config(spec.params, spec.params_descriptor).map_err(|e| vec![e])?;
        if !self.options.validate {
            return Ok(());
        }
        match self.validate_blocking(spec) {
            ValidateOutcome::Accepted => Ok(()),
            ValidateOutcome::Rejected(message) => Err(vec![ParamError::new("", message)]),
            ValidateOutcome::Unreachable(why) => {
                tracing::warn!(
                    handler = %spec.handler_name,
                    address = %spec.connection.address,
                    "could not validate params with the adapter ({why}); accepting them"
                );
                Ok(())
            }
        }
    }

    fn build(&self, spec: &RemoteHandlerSpec<'_>) -> Result<Arc<dyn Handler>, AdapterError> {
        self.build_handler(spec).map(|h| h as Arc<dyn Handler>)
    }
}
