//! Handlers whose adapter runs out of process: validated and built through the registry's
//! remote adapter support, with the instances rules send them and their inferred types.

use std::sync::Arc;

use mixer_adapter_api::Handler;
use mixer_config::{AdapterRegistry, Config, FieldExprValue, HandlerConfig};
use mixer_remote::{
    InferredField, RemoteAdapters, RemoteConnection, RemoteHandlerSpec, RemoteInstance,
};

use crate::build_error::BuildError;

/// Validates (with the adapter) and builds a handler with a `connection` through the
/// registry's [`mixer_remote::RemoteAdapters`]. Errors are config errors: the adapter
/// refused the params, or this mixer has no out-of-process support.
pub(crate) fn build_remote(
    config: &Config,
    hc: &HandlerConfig,
    connection: &mixer_config::Connection,
    registry: &AdapterRegistry,
) -> Result<Arc<dyn Handler>, String> {
    let remote = remote_of(hc, registry)?;
    with_spec(config, hc, connection, |spec| {
        validate(remote.as_ref(), hc, spec)?;
        remote.build(spec).map_err(|e| e.message)
    })
}

/// Asks the adapter of every handler with a `connection` to validate its params, as `serve`
/// does before building a snapshot: what `mixer validate` adds to the config's own checks.
/// An adapter that cannot be reached is not an error (its handler's fail policy applies
/// until it is up), as when serving.
pub fn validate_remote_handlers(config: &Config, registry: &AdapterRegistry) -> Vec<BuildError> {
    config
        .handlers
        .iter()
        .filter_map(|hc| {
            let connection = hc.connection.as_ref()?;
            let checked = remote_of(hc, registry).and_then(|remote| {
                with_spec(config, hc, connection, |spec| {
                    validate(remote.as_ref(), hc, spec)
                })
            });
            checked.err().map(|message| BuildError {
                file: hc.file.clone(),
                handler: hc.name.to_string(),
                message,
            })
        })
        .collect()
}

fn remote_of<'r>(
    hc: &HandlerConfig,
    registry: &'r AdapterRegistry,
) -> Result<&'r Arc<dyn RemoteAdapters>, String> {
    registry.remote().ok_or_else(|| {
        format!(
            "adapter {:?} has a connection but this mixer has no out-of-process adapter support",
            hc.adapter
        )
    })
}

/// Calls `f` with what the remote adapter is told of `hc`.
fn with_spec<T>(
    config: &Config,
    hc: &HandlerConfig,
    connection: &mixer_config::Connection,
    f: impl FnOnce(&RemoteHandlerSpec<'_>) -> Result<T, String>,
) -> Result<T, String> {
    let connection = RemoteConnection {
        address: connection.address.clone(),
        timeout: connection.timeout,
        authentication: connection.authentication.clone(),
    };
    let instances = remote_instances(config, hc);
    f(&RemoteHandlerSpec {
        handler_name: hc.name.clone(),
        adapter: &hc.adapter,
        params: &hc.params,
        params_descriptor: hc.adapter_resource.as_ref().and_then(|a| a.params.as_ref()),
        session_based: hc.adapter_resource.as_ref().map(|a| a.session_based),
        connection: &connection,
        instances: &instances,
    })
}

fn validate(
    remote: &dyn RemoteAdapters,
    hc: &HandlerConfig,
    spec: &RemoteHandlerSpec<'_>,
) -> Result<(), String> {
    remote.validate(spec).map_err(|errors| {
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        format!(
            "adapter {:?} at {} rejected its params: {}",
            hc.adapter,
            spec.connection.address,
            hc.redactor.scrub(&lines.join("; "))
        )
    })
}

/// The instances any rule sends to `hc`, with the field types their expressions infer.
fn remote_instances(config: &Config, hc: &HandlerConfig) -> Vec<RemoteInstance> {
    let Some(h) = config.handlers.iter().position(|o| o.name == hc.name) else {
        return Vec::new();
    };
    let mut seen = std::collections::BTreeSet::new();
    for rule in &config.rules {
        for action in rule.actions.iter().filter(|a| a.handler == h) {
            seen.extend(action.instances.iter().copied());
        }
    }
    seen.into_iter()
        .filter_map(|i| config.instances.get(i))
        .map(|ic| RemoteInstance {
            name: ic.name.clone(),
            template: ic.template,
            fields: ic
                .fields
                .iter()
                .flat_map(|f| match &f.value {
                    FieldExprValue::Value(e) => vec![InferredField {
                        field: f.name,
                        key: None,
                        value_type: e.result_type(),
                    }],
                    FieldExprValue::Map(entries) => entries
                        .iter()
                        .map(|(k, e)| InferredField {
                            field: f.name,
                            key: Some(k.clone()),
                            value_type: e.result_type(),
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect()
}
