//! `handler` documents (and Istio 1.0's per-adapter kinds such as `kind: denier`).

use std::sync::Arc;

use mixer_adapter_api::host::{CompiledConfig, FailPolicy};
use serde_json::Value;

use super::adapter::{self, Adapters};
use super::authentication;
use super::{Doc, parse_enum};
use crate::document::{as_map, check_keys, opt_string, type_name};
use crate::error::{Diagnostics, did_you_mean, join};
use crate::inputs::InputFile;
use crate::model::{Connection, HandlerConfig};
use crate::registry::AdapterRegistry;
use crate::secrets;

/// Validates a `kind: handler` document.
pub(crate) fn handler(
    doc: &Doc<'_>,
    registry: &AdapterRegistry,
    adapters: &Adapters<'_>,
    diags: &mut Diagnostics,
) -> Option<HandlerConfig> {
    let raw = doc.raw;
    let spec = as_map(&raw.spec, "spec", &raw.doc, diags)?;
    check_keys(
        &spec,
        &[
            "compiledAdapter",
            "adapter",
            "params",
            "connection",
            "failPolicy",
        ],
        "spec",
        &raw.doc,
        diags,
    );
    let compiled = opt_string(&spec, "compiledAdapter", "spec", &raw.doc, diags);
    let plain = opt_string(&spec, "adapter", "spec", &raw.doc, diags);
    let (adapter, adapter_field) = match (compiled, plain) {
        (Some(a), None) => (a, "spec.compiledAdapter"),
        (None, Some(a)) => (a, "spec.adapter"),
        (Some(_), Some(_)) => {
            diags.error(
                &raw.doc,
                "spec.adapter",
                "give either compiledAdapter or adapter, not both",
            );
            return None;
        }
        (None, None) => {
            let present = spec.contains_key("compiledAdapter") || spec.contains_key("adapter");
            if !present {
                diags.error(
                    &raw.doc,
                    "spec",
                    "missing compiledAdapter (or adapter): which adapter runs this handler?",
                );
            }
            return None;
        }
    };
    let fail_policy = parse_enum(
        doc,
        spec.get("failPolicy"),
        "spec.failPolicy",
        &[("OPEN", FailPolicy::Open), ("CLOSED", FailPolicy::Closed)],
        diags,
    );
    let connection = match spec.get("connection") {
        None | Some(Value::Null) => None,
        Some(c) => Some(connection(doc, c, diags)?),
    };
    let params = spec.get("params").cloned().unwrap_or(Value::Null);
    let mut adapter_resource = None;
    let (resolved, compiled) = if connection.is_none() {
        let (resolved, compiled) = check_adapter(
            doc,
            registry,
            &adapter,
            adapter_field,
            &params,
            "spec.params",
            diags,
        )?;
        (resolved, Some(compiled))
    } else {
        // An out-of-process adapter declares nothing: its params' secrets are those every
        // handler's params are searched for.
        let resolved = secrets::resolve(&raw.doc, &params, "spec.params", &[], diags)?;
        if adapter_field == "spec.adapter" {
            let before = diags.errors.len();
            let found = adapter::for_handler(doc, adapters, &adapter, &resolved.params, diags);
            secrets::scrub_errors(&resolved.redactor, diags, before);
            adapter_resource = found.ok()?;
        }
        (resolved, None)
    };
    let mut h = build(doc, adapter, resolved, connection, fail_policy);
    h.compiled = compiled;
    h.adapter_resource = adapter_resource;
    Some(h)
}

/// Validates a legacy document whose kind is an adapter name; its spec is the params.
pub(crate) fn legacy_handler(
    doc: &Doc<'_>,
    registry: &AdapterRegistry,
    diags: &mut Diagnostics,
) -> Option<HandlerConfig> {
    let params = doc.raw.spec.clone();
    let adapter = doc.raw.kind.clone();
    check_adapter(doc, registry, &adapter, "kind", &params, "spec", diags).map(
        |(resolved, compiled)| {
            let mut h = build(doc, adapter, resolved, None, None);
            h.compiled = Some(compiled);
            h
        },
    )
}

fn build(
    doc: &Doc<'_>,
    adapter: String,
    resolved: secrets::Resolved,
    connection: Option<Connection>,
    fail_policy: Option<FailPolicy>,
) -> HandlerConfig {
    HandlerConfig {
        name: doc.raw.full_name(),
        namespace: Arc::from(doc.raw.namespace.as_str()),
        adapter,
        params: resolved.params,
        redactor: resolved.redactor,
        connection,
        fail_policy,
        adapter_resource: None,
        compiled: None,
        inputs: resolved.files,
        hashed_params: resolved.hashed,
        file: doc.raw.doc.file.clone(),
    }
}

/// The adapter must be registered and accept the params (`${NAME}`s expanded, `<name>File`s
/// read). Returns the params as the adapter gets them and as it compiled them, or `None` on
/// any problem; no error shows a secret of the params.
pub(crate) fn check_adapter(
    doc: &Doc<'_>,
    registry: &AdapterRegistry,
    name: &str,
    field: &str,
    params: &Value,
    params_path: &str,
    diags: &mut Diagnostics,
) -> Option<(secrets::Resolved, CompiledConfig)> {
    let Some(adapter) = registry.get(name) else {
        let hint = did_you_mean(name, registry.names());
        let known: Vec<&str> = registry.names().collect();
        let message = if hint.is_empty() {
            format!(
                "unknown adapter {name:?} (known adapters: {}; give a connection for a remote adapter)",
                known.join(", ")
            )
        } else {
            format!("unknown adapter {name:?}{hint}")
        };
        diags.error(&doc.raw.doc, field, message);
        return None;
    };
    let mut resolved = secrets::resolve(
        &doc.raw.doc,
        params,
        params_path,
        adapter.secret_params(),
        diags,
    )?;
    if let Some(dir) = &doc.dir {
        for path in adapter.path_params() {
            relative_to(&mut resolved.params, path, dir);
        }
    }
    match adapter.compile(&resolved.params) {
        Ok(compiled) => {
            let paths = adapter
                .path_params()
                .iter()
                .filter_map(|path| string_at(&resolved.params, path))
                .filter(|p| !p.trim().is_empty())
                .map(std::path::PathBuf::from)
                .chain(adapter.files_read(&compiled));
            for path in paths {
                resolved.files.push(InputFile::read(&path));
            }
            Some((resolved, compiled))
        }
        Err(errors) => {
            for e in errors {
                let path = if e.path.is_empty() {
                    params_path.to_string()
                } else {
                    join(params_path, &e.path)
                };
                diags.error(&doc.raw.doc, path, resolved.redactor.scrub(&e.message));
            }
            None
        }
    }
}

/// The string param at the dotted `path` of `params`, if there is one.
fn string_at<'p>(params: &'p Value, path: &str) -> Option<&'p str> {
    path.split('.')
        .filter(|s| !s.is_empty())
        .try_fold(params, |at, segment| at.get(segment))?
        .as_str()
}

/// Makes the string param at the dotted `path` of `params`, when it is a relative file path,
/// relative to `dir` instead of the working directory: a config directory moves with the
/// files it names.
fn relative_to(params: &mut Value, path: &str, dir: &std::path::Path) {
    let mut at = params;
    for segment in path.split('.').filter(|s| !s.is_empty()) {
        let Some(next) = at.get_mut(segment) else {
            return;
        };
        at = next;
    }
    let Value::String(text) = at else {
        return;
    };
    let file = std::path::Path::new(text.as_str());
    if text.trim().is_empty() || file.is_absolute() {
        return;
    }
    let joined = dir.join(file);
    // Absolute where the working directory is known, so a dump or an error names the file
    // wherever it is read.
    let joined = std::path::absolute(&joined).unwrap_or(joined);
    *text = joined.display().to_string();
}

fn connection(doc: &Doc<'_>, value: &Value, diags: &mut Diagnostics) -> Option<Connection> {
    let raw = doc.raw;
    let Value::Object(map) = value else {
        diags.error(
            &raw.doc,
            "spec.connection",
            format!("expected a mapping, found {}", type_name(value)),
        );
        return None;
    };
    check_keys(
        map,
        &["address", "timeout", "authentication"],
        "spec.connection",
        &raw.doc,
        diags,
    );
    let address = opt_string(map, "address", "spec.connection", &raw.doc, diags);
    let address = match address {
        Some(a) if !a.trim().is_empty() => a,
        _ => {
            if !matches!(map.get("address"), Some(v) if !v.is_string() && !v.is_null()) {
                diags.error(&raw.doc, "spec.connection.address", "missing");
            }
            return None;
        }
    };
    let mut ok = true;
    let timeout = match opt_string(map, "timeout", "spec.connection", &raw.doc, diags) {
        None => None,
        Some(text) => match mixer_model::Duration::parse(&text) {
            Some(d) if d.0 >= 0 => Some(d.to_std()),
            _ => {
                ok = false;
                diags.error(
                    &raw.doc,
                    "spec.connection.timeout",
                    format!("{text:?} is not a duration such as \"5s\""),
                );
                None
            }
        },
    };
    let authentication = match map.get("authentication") {
        None | Some(Value::Null) => None,
        Some(a) => {
            let parsed =
                authentication::authentication(doc, a, "spec.connection.authentication", diags);
            ok &= parsed.is_some();
            if parsed.is_some() && address.starts_with("http://") {
                // The client would speak plaintext to an http:// address.
                ok = false;
                diags.error(
                    &raw.doc,
                    "spec.connection.address",
                    "an http:// address cannot use TLS: write host:port or https://",
                );
            }
            parsed
        }
    };
    ok.then_some(Connection {
        address,
        timeout,
        authentication,
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{errors, ok};
    use mixer_adapter_api::host::FailPolicy;

    #[test]
    fn compiled_adapter_with_params_and_fail_policy() {
        let v = ok(
            "kind: handler\nmetadata: {name: d, namespace: ns}\nspec:\n  compiledAdapter: denier\n  failPolicy: OPEN\n  params:\n    status: {code: 7, message: denied}\n",
        );
        let h = &v.config.handlers[0];
        assert_eq!(&*h.name, "d.handler.ns");
        assert_eq!(&*h.namespace, "ns");
        assert_eq!(h.adapter, "denier");
        assert_eq!(h.fail_policy, Some(FailPolicy::Open));
        assert_eq!(h.params["status"]["code"], 7);
        assert_eq!(h.file, "c.yaml");
        assert!(h.same_build(&h.clone()));
        let mut other = h.clone();
        other.params = serde_json::json!({});
        assert!(!h.same_build(&other));
    }

    #[test]
    fn bad_params_unknown_adapters_and_missing_adapter() {
        assert_eq!(
            errors(
                "kind: handler\nmetadata: {name: d}\nspec:\n  compiledAdapter: denier\n  params: {status: {code: 99}}\n"
            ),
            [
                "c.yaml: handler d: spec.params.status.code: 99 is not a status code (0-16 or a name such as PERMISSION_DENIED)"
            ]
        );
        assert_eq!(
            errors("kind: handler\nmetadata: {name: d}\nspec: {adapter: deneir}\n"),
            ["c.yaml: handler d: spec.adapter: unknown adapter \"deneir\" (did you mean denier?)"]
        );
        let e = errors("kind: handler\nmetadata: {name: d}\nspec: {compiledAdapter: prometheus}\n");
        assert!(e[0].contains("known adapters: denier, noop"), "{e:?}");
        assert_eq!(
            errors("kind: handler\nmetadata: {name: d}\nspec: {params: {}}\n"),
            [
                "c.yaml: handler d: spec: missing compiledAdapter (or adapter): which adapter runs this handler?"
            ]
        );
        assert_eq!(
            errors(
                "kind: handler\nmetadata: {name: d}\nspec: {adapter: noop, compiledAdapter: noop}\n"
            ),
            ["c.yaml: handler d: spec.adapter: give either compiledAdapter or adapter, not both"]
        );
        assert_eq!(
            errors(
                "kind: handler\nmetadata: {name: d}\nspec: {adapter: noop, failPolicy: MAYBE}\n"
            ),
            [
                "c.yaml: handler d: spec.failPolicy: unknown value \"MAYBE\" (expected one of OPEN, CLOSED)"
            ]
        );
    }

    #[test]
    fn remote_adapters_keep_their_connection() {
        let v = ok(
            "kind: handler\nmetadata: {name: r}\nspec:\n  adapter: mygrpc\n  params: {anything: [1, 2]}\n  connection: {address: 'localhost:9000', timeout: 3s}\n",
        );
        let h = &v.config.handlers[0];
        assert!(h.is_remote());
        let c = h.connection.as_ref().expect("connection");
        assert_eq!(c.address, "localhost:9000");
        assert_eq!(c.timeout, Some(std::time::Duration::from_secs(3)));
        assert_eq!(
            errors(
                "kind: handler\nmetadata: {name: r}\nspec:\n  adapter: x\n  connection: {timeout: soon}\n"
            ),
            ["c.yaml: handler r: spec.connection.address: missing"]
        );
    }

    #[test]
    fn legacy_adapter_kind_is_a_handler_whose_spec_is_params() {
        let v = ok("kind: denier\nmetadata: {name: d}\nspec: {status: {code: 7}}\n");
        assert_eq!(v.config.handlers[0].adapter, "denier");
        assert_eq!(v.config.handlers[0].params["status"]["code"], 7);
        assert_eq!(
            errors("kind: noop\nmetadata: {name: n}\nspec: {x: 1}\n").len(),
            1
        );
    }
}
