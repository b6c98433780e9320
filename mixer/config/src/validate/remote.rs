//! Handlers with a `connection`, compiled by the out-of-process adapter once rules are
//! resolved: it needs the instances rules send them (with their inferred types) to ask the
//! adapter to validate their params, and learns which templates the adapter serves, against
//! which every route to them is checked.

use std::collections::BTreeSet;

use mixer_adapter_api::ParamError;
use mixer_remote::{
    InferredField, RemoteAdapter, RemoteCompiled, RemoteConnection, RemoteHandlerSpec,
    RemoteInstance,
};

use super::Kind;
use crate::error::Diagnostics;
use crate::kinds::Doc;
use crate::kinds::rule::RemoteRoute;
use crate::model::{FieldExprValue, HandlerConfig, InstanceConfig, RuleConfig};
use crate::registry::AdapterRegistry;

/// Compiles every handler with a `connection` (see [`mixer_remote::RemoteAdapter`]); params
/// refused and routes to a template the adapter does not serve are errors, an adapter that
/// cannot be reached a warning and one of the notes returned (see [`crate::Config::notes`]).
pub(super) fn compile(
    docs: &[(Kind, Doc<'_>)],
    registry: &AdapterRegistry,
    handlers: &mut [HandlerConfig],
    instances: &[InstanceConfig],
    rules: &[RuleConfig],
    routes: &[RemoteRoute],
    diags: &mut Diagnostics,
) -> Vec<String> {
    // A registry without out-of-process support (a tool checking config alone) leaves
    // remote handlers uncompiled: building them is then the error.
    let Some(remote) = registry.remote() else {
        return Vec::new();
    };
    let mut answers = ask(remote.as_ref(), handlers, instances, rules);
    let mut notes = Vec::new();
    for (h, hc) in handlers.iter_mut().enumerate() {
        let (Some(connection), Some(answer)) = (hc.connection.clone(), answers[h].take()) else {
            continue;
        };
        let Some(doc) = docs
            .iter()
            .find(|(kind, d)| matches!(kind, Kind::Handler) && d.raw.full_name() == hc.name)
            .map(|(_, d)| &d.raw.doc)
        else {
            continue;
        };
        let resource = hc.adapter_resource.clone();
        let compiled = match answer {
            Ok(compiled) => compiled,
            Err(errors) => {
                let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
                diags.error(
                    doc,
                    "spec.params",
                    format!(
                        "adapter {:?} at {} rejected its params: {}",
                        hc.adapter,
                        connection.address,
                        hc.redactor.scrub(&lines.join("; "))
                    ),
                );
                continue;
            }
        };
        if let Some(why) = &compiled.unreachable {
            let why = hc.redactor.scrub(why);
            diags.warn(
                doc,
                "spec.connection",
                format!(
                    "adapter {:?} at {} is unreachable ({why}): its params and the templates it serves were not checked; calls apply the handler's fail policy until it is up",
                    hc.adapter, connection.address
                ),
            );
            notes.push(format!(
                "handler {}: adapter {:?} at {} was unreachable at load ({why}): its params and templates are unchecked",
                hc.name, hc.adapter, connection.address
            ));
        }
        // The adapter's own word; routes were checked against its `adapter` document already.
        if let Some(served) = &compiled.templates
            && resource.as_ref().is_none_or(|a| &a.templates != served)
        {
            for route in routes.iter().filter(|r| r.handler == h) {
                let Some(inst) = instances.get(route.instance) else {
                    continue;
                };
                if served.contains(&inst.template) {
                    continue;
                }
                let names: Vec<&str> = served.iter().map(|t| t.name()).collect();
                let names = if names.is_empty() {
                    "no template".to_string()
                } else {
                    names.join(", ")
                };
                diags.error(
                    &route.doc,
                    route.path.clone(),
                    format!(
                        "instance {} is of template {}, which handler {} (adapter {:?} at {}) does not serve (it serves {names})",
                        inst.name, inst.template, hc.name, hc.adapter, connection.address
                    ),
                );
            }
        }
        hc.compiled = Some(compiled.config);
    }
    notes
}

/// How many adapters are asked at once.
const ASKED_AT_ONCE: usize = 16;

/// Compiles every handler with a connection, aligned with `handlers` (`None` for the
/// others). Adapters are asked several at once, so that a load waits for about the slowest
/// of them (an unreachable one: the validate timeout) rather than for their sum.
fn ask(
    remote: &dyn RemoteAdapter,
    handlers: &[HandlerConfig],
    instances: &[InstanceConfig],
    rules: &[RuleConfig],
) -> Vec<Option<Result<RemoteCompiled, Vec<ParamError>>>> {
    let mut answers: Vec<Option<Result<RemoteCompiled, Vec<ParamError>>>> =
        handlers.iter().map(|_| None).collect();
    let remote_handlers: Vec<usize> = (0..handlers.len())
        .filter(|h| handlers[*h].connection.is_some())
        .collect();
    for batch in remote_handlers.chunks(ASKED_AT_ONCE) {
        let sent: Vec<Vec<RemoteInstance>> = batch
            .iter()
            .map(|h| remote_instances(*h, instances, rules))
            .collect();
        std::thread::scope(|scope| {
            let asked: Vec<_> = batch
                .iter()
                .zip(sent)
                .filter_map(|(h, sent)| {
                    let hc = &handlers[*h];
                    let connection = hc.connection.as_ref()?;
                    let thread = scope.spawn(move || {
                        let remote_connection = RemoteConnection {
                            address: connection.address.clone(),
                            timeout: connection.timeout,
                            authentication: connection.authentication.clone(),
                        };
                        let resource = hc.adapter_resource.as_deref();
                        remote.compile_remote(&RemoteHandlerSpec {
                            handler_name: hc.name.clone(),
                            adapter: &hc.adapter,
                            params: &hc.params,
                            params_descriptor: resource.and_then(|a| a.params.as_ref()),
                            session_based: resource.map(|a| a.session_based),
                            connection: &remote_connection,
                            instances: &sent,
                            declared_templates: resource.map(|a| a.templates.as_slice()),
                        })
                    });
                    Some((*h, thread))
                })
                .collect();
            for (h, thread) in asked {
                answers[h] = Some(thread.join().unwrap_or_else(|_| {
                    Err(vec![ParamError::new(
                        "",
                        "compiling the handler failed unexpectedly",
                    )])
                }));
            }
        });
    }
    answers
}

/// The instances any rule sends to handler `h`, with the field types their expressions infer.
fn remote_instances(
    h: usize,
    instances: &[InstanceConfig],
    rules: &[RuleConfig],
) -> Vec<RemoteInstance> {
    let mut seen = BTreeSet::new();
    for rule in rules {
        for action in rule.actions.iter().filter(|a| a.handler == h) {
            seen.extend(action.instances.iter().copied());
        }
    }
    seen.into_iter()
        .filter_map(|i| instances.get(i))
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use mixer_model::Template;

    use crate::kinds::test_support::{Remote, registry, run_with};

    const ROUTED: &str = "kind: handler\nmetadata: {name: r}\nspec:\n  adapter: mygrpc\n  connection: {address: 'localhost:9000'}\n---\nkind: instance\nmetadata: {name: nothing}\nspec: {compiledTemplate: checknothing}\n---\nkind: rule\nmetadata: {name: route}\nspec:\n  actions: [{handler: r, instances: [nothing]}]\n";

    fn with(remote: Remote) -> crate::AdapterRegistry {
        let mut r = registry();
        r.register_remote(Arc::new(remote));
        r
    }

    #[test]
    fn a_template_the_adapter_does_not_serve_is_an_error_at_the_rule() {
        let r = with(Remote {
            serves: Some(vec![Template::ListEntry]),
            unreachable: None,
        });
        assert_eq!(
            run_with(ROUTED, &r).expect_err("refused"),
            [
                "c.yaml: rule route: spec.actions[0].instances[0]: instance nothing.instance.istio-system is of template checknothing, which handler r.handler.istio-system (adapter \"mygrpc\" at localhost:9000) does not serve (it serves listentry)"
            ]
        );
        let r = with(Remote {
            serves: Some(vec![Template::CheckNothing]),
            unreachable: None,
        });
        let v = run_with(ROUTED, &r).expect("served");
        assert!(v.warnings.is_empty() && v.config.notes.is_empty());
        assert!(v.config.handlers[0].compiled.is_some());
    }

    #[test]
    fn an_attribute_generator_the_adapter_does_not_serve_is_an_error_at_the_rule() {
        let routed = "kind: handler\nmetadata: {name: r}\nspec:\n  adapter: mygrpc\n  connection: {address: 'localhost:9000'}\n---\nkind: instance\nmetadata: {name: token}\nspec:\n  compiledTemplate: jwt\n  params: {token: 'request.headers[\"authorization\"] | \"\"'}\n  attributeBindings: {request.auth.principal: '$out.principal | \"\"'}\n---\nkind: rule\nmetadata: {name: route}\nspec:\n  actions: [{handler: r, instances: [token]}]\n";
        let r = with(Remote {
            serves: Some(vec![Template::ListEntry]),
            unreachable: None,
        });
        assert_eq!(
            run_with(routed, &r).expect_err("refused"),
            [
                "c.yaml: rule route: spec.actions[0].instances[0]: instance token.instance.istio-system is of template jwt, which handler r.handler.istio-system (adapter \"mygrpc\" at localhost:9000) does not serve (it serves listentry)"
            ]
        );
        let r = with(Remote {
            serves: Some(vec![Template::Jwt]),
            unreachable: None,
        });
        let v = run_with(routed, &r).expect("served");
        assert_eq!(v.config.instances[0].bindings.len(), 1);
    }

    #[test]
    fn an_unreachable_adapter_is_a_warning_and_a_note() {
        let r = with(Remote {
            serves: None,
            unreachable: Some("connection refused".into()),
        });
        let v = run_with(ROUTED, &r).expect("accepted");
        let shown: Vec<String> = v.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "c.yaml: handler r: spec.connection: adapter \"mygrpc\" at localhost:9000 is unreachable (connection refused): its params and the templates it serves were not checked; calls apply the handler's fail policy until it is up"
            ]
        );
        assert_eq!(v.config.notes.len(), 1);
        assert!(
            v.config.notes[0].contains("unreachable"),
            "{:?}",
            v.config.notes
        );
    }

    #[test]
    fn without_out_of_process_support_a_remote_handler_stays_uncompiled() {
        let mut r = crate::AdapterRegistry::new();
        r.register(Arc::new(mixer_adapter_denier::Denier));
        let v = run_with(ROUTED, &r).expect("accepted");
        assert!(v.config.handlers[0].compiled.is_none());
    }
}
