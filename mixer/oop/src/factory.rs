//! [`RemoteAdapterFactory`]: the mixer's [`RemoteAdapter`], the adapter of every handler with
//! a `connection`, registered by the server.

use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::host::{AnyAdapter, CompiledConfig, Params};
use mixer_adapter_api::secrets::SecretParam;
use mixer_adapter_api::{
    AdapterError, AdapterInfo, BuildContext, ErrorKind, Handler, ParamError, Stability,
};
use mixer_model::Template;
use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_remote::{
    RemoteAdapter, RemoteCompiled, RemoteConnection, RemoteHandlerSpec, RemoteInstance,
};

use crate::convert;
use crate::handler::RemoteHandler;
use crate::metrics::MetricsSet;
use crate::options::OopOptions;
use crate::reflection;
use crate::transport::{self, Transport};
use crate::typed;

/// Builds [`RemoteHandler`]s and validates their params with the adapter.
#[derive(Default)]
pub struct RemoteAdapterFactory {
    options: OopOptions,
    metrics: Arc<MetricsSet>,
    /// What adapters accepted lately ([`Accepted`]), so that a reload that leaves a handler
    /// as it was does not ask its adapter again.
    accepted: std::sync::Mutex<Accepted>,
}

/// The answers of adapters that accepted a handler's params, by everything that was asked
/// (connection, params, instances and their types, declared templates), with when. A reload
/// compiles every handler again; before one factory built every handler, an unchanged remote
/// handler was reused without a question, and this keeps that cost: only a handler whose
/// question changed, or whose answer is older than [`ACCEPTED_FOR`], is asked again. Refusals
/// and unreachable adapters are never kept: they are asked at every load.
#[derive(Default)]
struct Accepted {
    answers: std::collections::HashMap<String, (std::time::Instant, Option<Vec<Template>>)>,
}

/// How long an adapter's acceptance of a question is reused (a restarted adapter that serves
/// other templates is noticed at the first load after that).
const ACCEPTED_FOR: Duration = Duration::from_secs(60);

/// Past this many kept answers, the oldest are dropped.
const ACCEPTED_MAX: usize = 4096;

impl Accepted {
    fn get(&self, question: &str) -> Option<Option<Vec<Template>>> {
        let (at, templates) = self.answers.get(question)?;
        (at.elapsed() < ACCEPTED_FOR).then(|| templates.clone())
    }

    fn put(&mut self, question: String, templates: Option<Vec<Template>>) {
        if self.answers.len() >= ACCEPTED_MAX {
            self.answers
                .retain(|_, (at, _)| at.elapsed() < ACCEPTED_FOR);
            if self.answers.len() >= ACCEPTED_MAX {
                self.answers.clear();
            }
        }
        self.answers
            .insert(question, (std::time::Instant::now(), templates));
    }
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
            accepted: std::sync::Mutex::default(),
        }
    }

    /// Its settings.
    pub fn options(&self) -> &OopOptions {
        &self.options
    }

    /// Builds a handler for the adapter at `spec.connection` with `spec.params`, without
    /// asking the adapter anything (nothing connects until the first call): for tools, such
    /// as a conformance run, that build one handler outside a config.
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

    /// A handler for the adapter at `address` (plaintext, the default deadline) sent
    /// `params` as a `google.protobuf.Struct` and one instance of each of `templates`
    /// (named `<template>.instance.<handler>`, no inferred field types): what a tool that
    /// talks to one adapter outside any config, such as a conformance run, builds. Nothing
    /// connects until the first call.
    pub fn handler_for(
        &self,
        handler_name: &str,
        address: &str,
        params: &serde_json::Value,
        templates: &[Template],
    ) -> Result<Arc<RemoteHandler>, AdapterError> {
        let connection = RemoteConnection {
            address: address.to_owned(),
            timeout: None,
            authentication: None,
        };
        let instances: Vec<RemoteInstance> = templates
            .iter()
            .map(|t| RemoteInstance {
                name: format!("{}.instance.{handler_name}", t.name()).into(),
                template: *t,
                fields: Vec::new(),
            })
            .collect();
        self.build_handler(&RemoteHandlerSpec {
            handler_name: handler_name.into(),
            adapter: handler_name,
            params,
            params_descriptor: None,
            session_based: None,
            connection: &connection,
            instances: &instances,
            declared_templates: Some(templates),
        })
    }

    /// Asks the adapter's `InfrastructureBackend.Validate`, blocking the calling thread for
    /// at most `validate_timeout`.
    pub fn validate_blocking(&self, spec: &RemoteHandlerSpec<'_>) -> ValidateOutcome {
        self.ask_blocking(spec).0
    }

    /// Asks the adapter which templates it serves (gRPC server reflection; `None` when it
    /// serves none) and then, unless that already refuses an instance rules send it, its
    /// `InfrastructureBackend.Validate`; blocks the calling thread for at most
    /// `validate_timeout`.
    ///
    /// Config validation is synchronous (it runs on a blocking thread in the server), so the
    /// calls run on a short-lived thread with its own current-thread tokio runtime and a
    /// connection of its own. That works whether or not the caller is inside a tokio runtime,
    /// and never blocks a runtime worker that the adapter's answer needs: do not call it from
    /// a single-threaded runtime that also serves the adapter.
    pub fn ask_blocking(
        &self,
        spec: &RemoteHandlerSpec<'_>,
    ) -> (ValidateOutcome, Option<Vec<Template>>) {
        let timeout = self.options.validate_timeout;
        let transport = match Transport::new(spec.connection, timeout) {
            Ok(t) => t,
            Err((field, m)) => return (ValidateOutcome::Rejected(format!("{field}: {m}")), None),
        };
        let adapter_config = match typed::adapter_config(spec.params, spec.params_descriptor) {
            Ok(a) => a,
            Err(e) => return (ValidateOutcome::Rejected(e.to_string()), None),
        };
        let request = model::ValidateRequest {
            adapter_config: Some(adapter_config),
            inferred_types: convert::inferred_types(spec.instances),
        };
        let handler = spec.handler_name.clone();
        let sent: Vec<Template> = spec.instances.iter().map(|i| i.template).collect();
        let thread = std::thread::Builder::new()
            .name("oop-validate".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("no runtime for Validate: {e}"))?;
                rt.block_on(async move {
                    let deadline = tokio::time::Instant::now() + timeout;
                    let channel = transport.connect_by(&handler, deadline, timeout).await?;
                    // What it serves first: an instance it does not serve is a config
                    // error at the rule that sends it, clearer than what Validate may say.
                    let templates = tokio::time::timeout_at(
                        deadline,
                        reflection::served_templates(channel.clone()),
                    )
                    .await
                    .map_err(|_| tonic::Status::deadline_exceeded("reflection timed out"))
                    .and_then(|r| r);
                    if let Ok(Some(served)) = &templates
                        && sent.iter().any(|t| !served.contains(t))
                    {
                        return Ok((Ok(model::ValidateResponse::default()), templates));
                    }
                    let call = async {
                        let mut client =
                            model::infrastructure_backend_client::InfrastructureBackendClient::new(
                                channel,
                            );
                        let mut req = tonic::Request::new(request);
                        req.set_timeout(timeout);
                        client.validate(req).await.map(tonic::Response::into_inner)
                    };
                    let answer = tokio::time::timeout_at(deadline, call)
                        .await
                        .map_err(|_| format!("Validate did not answer within {timeout:?}"))?;
                    Ok::<_, String>((answer, templates))
                })
            });
        let (answer, templates) = match thread.map(|t| t.join()) {
            Ok(Ok(Ok((answer, templates)))) => (Ok(answer), templates),
            Ok(Ok(Err(m))) => (Err(m), Ok(None)),
            Ok(Err(_)) | Err(_) => (Err("validate thread failed".into()), Ok(None)),
        };
        let templates = templates.unwrap_or_else(|s| {
            tracing::warn!(
                handler = %spec.handler_name,
                address = %spec.connection.address,
                "could not ask the adapter which templates it serves ({})",
                s.message()
            );
            None
        });
        let outcome = match answer {
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
        };
        (outcome, templates)
    }
}

/// A remote handler's compiled form: all [`RemoteAdapterFactory::build_compiled`] needs, so
/// building never parses or checks again.
struct CompiledRemote {
    handler_name: Arc<str>,
    connection: RemoteConnection,
    params: prost_types::Any,
    instances: Vec<RemoteInstance>,
    options: OopOptions,
    templates: Vec<Template>,
}

/// What the out-of-process transport calls itself in [`AdapterInfo`].
const NAME: &str = "out-of-process";

static INFO: AdapterInfo = AdapterInfo {
    name: NAME,
    description: "handlers whose adapter runs in another process, reached over gRPC",
    // Each handler's own: what its adapter serves.
    templates: &[],
    // The adapter bounds reuse itself with each result's validity.
    cacheable: true,
    stability: Stability::Stable,
};

impl RemoteAdapter for RemoteAdapterFactory {
    /// Rejects what cannot work at all (a bad address, TLS settings rustls refuses, params
    /// that do not fit the adapter's message) and params the adapter's `Validate` refused. An
    /// adapter that cannot be reached (or does not implement `InfrastructureBackend`, or fails
    /// the TLS handshake) does not fail the config: [`RemoteCompiled::unreachable`] says why,
    /// and calls apply the handler's fail policy until it is up. (Istio 1.4 did not validate
    /// at all.)
    fn compile_remote(
        &self,
        spec: &RemoteHandlerSpec<'_>,
    ) -> Result<RemoteCompiled, Vec<ParamError>> {
        if let Err((field, m)) = Transport::new(spec.connection, self.options.validate_timeout) {
            return Err(vec![ParamError::new(field, m)]);
        }
        // Params that do not fit the adapter's message are refused here, adapter up or not.
        let params =
            typed::adapter_config(spec.params, spec.params_descriptor).map_err(|e| vec![e])?;
        let declared = spec.declared_templates.map(<[Template]>::to_vec);
        // Everything the adapter is asked; `Debug` of each is deterministic (the params'
        // Struct keeps its fields sorted, PEM files show by path and length).
        let question = format!(
            "{:?}|{:?}|{:?}|{:?}|{:?}",
            spec.connection, params, spec.instances, spec.declared_templates, spec.session_based
        );
        let known = self
            .accepted
            .lock()
            .ok()
            .and_then(|accepted| accepted.get(&question));
        let (templates, unreachable) = if let Some(served) = known {
            (served.or(declared), None)
        } else if self.options.validate {
            match self.ask_blocking(spec) {
                (ValidateOutcome::Accepted, served) => {
                    if let Ok(mut accepted) = self.accepted.lock() {
                        accepted.put(question, served.clone());
                    }
                    (served.or(declared), None)
                }
                (ValidateOutcome::Rejected(message), _) => {
                    return Err(vec![ParamError::new("", message)]);
                }
                (ValidateOutcome::Unreachable(why), _) => (declared, Some(why)),
            }
        } else {
            (declared, None)
        };
        let mut options = self.options;
        // An adapter resource that says the adapter keeps no sessions saves the CreateSession
        // attempt; without one, the handler tries and falls back to params on each call.
        if spec.session_based == Some(false) {
            options.sessions = false;
        }
        let compiled = CompiledRemote {
            handler_name: spec.handler_name.clone(),
            connection: spec.connection.clone(),
            params,
            instances: spec.instances.to_vec(),
            options,
            templates: templates.clone().unwrap_or_default(),
        };
        Ok(RemoteCompiled {
            config: CompiledConfig::new(NAME, compiled),
            templates,
            unreachable,
        })
    }
}

impl AnyAdapter for RemoteAdapterFactory {
    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    /// Params alone are not enough: a remote handler is compiled with its connection and
    /// the instances rules send it ([`RemoteAdapter::compile_remote`]).
    fn compile(&self, _params: &Params) -> Result<CompiledConfig, Vec<ParamError>> {
        Err(vec![ParamError::new(
            "",
            "an out-of-process handler is compiled with its connection when config loads",
        )])
    }

    fn build_compiled(
        &self,
        config: &CompiledConfig,
        _ctx: &BuildContext,
    ) -> Result<Arc<dyn Handler>, AdapterError> {
        let c = compiled(config)?;
        RemoteHandler::new(
            c.handler_name.clone(),
            &c.connection,
            c.params.clone(),
            &c.instances,
            c.options,
            self.metrics.clone(),
        )
        .map(|h| Arc::new(h) as Arc<dyn Handler>)
    }

    fn secret_params(&self) -> &'static [SecretParam] {
        &[]
    }

    fn path_params(&self) -> &'static [&'static str] {
        &[]
    }

    fn files_read(&self, _config: &CompiledConfig) -> Vec<std::path::PathBuf> {
        Vec::new()
    }

    fn templates_of(&self, config: &CompiledConfig) -> Vec<Template> {
        compiled(config)
            .map(|c| c.templates.clone())
            .unwrap_or_default()
    }

    /// Its transport ends each call at the connection's timeout (sent to the adapter as
    /// `grpc-timeout`) and says so in its error.
    fn own_call_timeout(&self, config: &CompiledConfig) -> Option<Duration> {
        compiled(config)
            .ok()
            .map(|c| c.connection.timeout.unwrap_or(c.options.default_timeout))
    }
}

fn compiled(config: &CompiledConfig) -> Result<&CompiledRemote, AdapterError> {
    config.downcast_ref::<CompiledRemote>().ok_or_else(|| {
        AdapterError::permanent(
            ErrorKind::Internal,
            format!(
                "a config compiled by adapter {:?} was given to the out-of-process adapter",
                config.adapter()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use mixer_model::Template;

    use super::RemoteAdapterFactory;

    #[test]
    fn a_handler_for_an_address_needs_no_adapter_and_a_bad_address_is_an_error() {
        let factory = RemoteAdapterFactory::default();
        let handler = factory
            .handler_for(
                "conformance",
                "127.0.0.1:1",
                &serde_json::json!({"list": ["a"]}),
                &[Template::ListEntry],
            )
            .expect("built");
        assert!(handler.timeout() > std::time::Duration::ZERO);
        let err = factory
            .handler_for("conformance", "ftp://x:1", &serde_json::json!({}), &[])
            .expect_err("refused");
        assert!(err.message.contains("ftp"), "{}", err.message);
    }
}
