//! `adapter` documents (Istio 1.4's kind `adapter`): what an out-of-process adapter serves
//! (`templates`) and, in `config`, the base64 of a serialized
//! `google.protobuf.FileDescriptorSet` whose top-level message named `Params` is the
//! adapter's own config message. A remote handler whose `adapter` names such a document has
//! its `params` checked against that message here; `mixer-oop` encodes them into it.

use std::sync::Arc;

use mixer_model::Template;
use prost_reflect::MessageDescriptor;
use serde_json::Value;

use super::Doc;
use super::typed_params::{check_params, params_message};
use crate::document::{as_map, check_keys, expected_string, opt_string, type_name};
use crate::error::{Diagnostics, did_you_mean, index, join};
use crate::model::AdapterResource;
use crate::resolve::{Resolution, Table};

/// A valid `adapter` document.
pub(crate) struct Described {
    pub resource: Arc<AdapterResource>,
    /// Its params message, to check handler params against.
    pub message: Option<MessageDescriptor>,
}

/// The `adapter` documents of a config, for handlers to look up.
pub(crate) struct Adapters<'a> {
    pub table: &'a Table,
    pub list: &'a [Described],
    pub default_namespace: &'a str,
}

impl Adapters<'_> {
    /// The document `reference` (a handler's `adapter`) names, seen from `namespace`; `Err`
    /// with its full name when that document is invalid or dropped.
    pub fn resolve(&self, reference: &str, namespace: &str) -> Result<Option<&Described>, String> {
        match self
            .table
            .resolve(reference, namespace, self.default_namespace)
        {
            Resolution::Found(i) => Ok(self.list.get(i)),
            Resolution::Invalid(document) => Err(document),
            Resolution::NotFound => Ok(None),
        }
    }
}

/// Validates a `kind: adapter` document.
pub(crate) fn adapter(doc: &Doc<'_>, diags: &mut Diagnostics) -> Option<Described> {
    let raw = doc.raw;
    let errors_before = diags.errors.len();
    let spec = as_map(&raw.spec, "spec", &raw.doc, diags)?;
    check_keys(
        &spec,
        &[
            "description",
            "session_based",
            "sessionBased",
            "templates",
            "config",
        ],
        "spec",
        &raw.doc,
        diags,
    );
    let description = opt_string(&spec, "description", "spec", &raw.doc, diags).unwrap_or_default();
    let mut session_based = false;
    for key in ["session_based", "sessionBased"] {
        match spec.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => session_based = *b,
            Some(other) => diags.error(
                &raw.doc,
                join("spec", key),
                format!("expected true or false, found {}", type_name(other)),
            ),
        }
    }
    let templates = templates(doc, spec.get("templates"), diags);
    let config = opt_string(&spec, "config", "spec", &raw.doc, diags).unwrap_or_default();
    let params = if config.trim().is_empty() {
        None
    } else {
        match params_message(&config) {
            Ok(p) => Some(p),
            Err(message) => {
                diags.error(&raw.doc, "spec.config", message);
                None
            }
        }
    };
    if diags.errors.len() > errors_before {
        return None;
    }
    let (params, message) = params.unzip();
    Some(Described {
        resource: Arc::new(AdapterResource {
            name: raw.full_name(),
            description,
            session_based,
            templates,
            params,
            file: raw.doc.file.clone(),
        }),
        message,
    })
}

/// `spec.templates`: names of the templates the adapter serves. Istio named `template`
/// documents there (`metric`, `metric.istio-system`); the mixer's templates are built in, so
/// only the short name counts.
fn templates(doc: &Doc<'_>, value: Option<&Value>, diags: &mut Diagnostics) -> Vec<Template> {
    let raw = doc.raw;
    let items = match value {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Array(items)) => items,
        Some(other) => {
            diags.error(
                &raw.doc,
                "spec.templates",
                format!(
                    "expected a list of template names, found {}",
                    type_name(other)
                ),
            );
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = index("spec.templates", i);
        let Value::String(name) = item else {
            diags.error(&raw.doc, path, expected_string(item));
            continue;
        };
        let short = name.split('.').next().unwrap_or_default();
        match Template::from_name(short) {
            Some(t) if !out.contains(&t) => out.push(t),
            Some(_) => {}
            None => {
                let hint = did_you_mean(short, Template::ALL.iter().map(|t| t.name()));
                diags.error(&raw.doc, path, format!("unknown template {name:?}{hint}"));
            }
        }
    }
    out
}

/// Looks up the handler's adapter document and checks `params` against its message. `Err`
/// when the handler cannot be built (the problem is reported); `Ok(None)` when no document
/// describes the adapter (params then go as a `google.protobuf.Struct`).
pub(crate) fn for_handler(
    doc: &Doc<'_>,
    adapters: &Adapters<'_>,
    adapter: &str,
    params: &Value,
    diags: &mut Diagnostics,
) -> Result<Option<Arc<AdapterResource>>, ()> {
    let described = match adapters.resolve(adapter, &doc.raw.namespace) {
        Ok(Some(described)) => described,
        Ok(None) => return Ok(None),
        Err(document) => {
            diags.dependent(&doc.raw.doc, vec![document]);
            return Err(());
        }
    };
    if let Some(message) = &described.message
        && let Err((path, problem)) = check_params(message, params)
    {
        let field = if path.is_empty() {
            "spec.params".to_string()
        } else {
            join("spec.params", &path)
        };
        diags.error(&doc.raw.doc, field, problem);
        return Err(());
    }
    Ok(Some(described.resource.clone()))
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use prost::Message;

    use super::super::test_support::{errors, ok};

    /// An `adapter` document for the test adapter (`testadapter.config.Params`).
    fn adapter_doc() -> String {
        let config = STANDARD.encode(mixer_proto::testdata::FILE_DESCRIPTOR_SET);
        format!(
            "kind: adapter\nmetadata: {{name: testadapter}}\nspec:\n  description: a test adapter\n  session_based: false\n  templates: [listentry, metric]\n  config: {config}\n---\n"
        )
    }

    fn handler_doc(params: &str) -> String {
        format!(
            "kind: handler\nmetadata: {{name: h, namespace: team}}\nspec:\n  adapter: testadapter\n  connection: {{address: '127.0.0.1:9000'}}\n  params: {params}\n"
        )
    }

    #[test]
    fn a_remote_handler_gets_the_params_message_of_its_adapter_document() {
        let params = "{backendAddress: 'db:1', mode: DENY, refresh_interval: 1.5s, allowed: [a, b], limits: {x: 3}, backend: {host: h, port: 80, tls: true}, fallbacks: [{host: f}], ratio: 0.5}";
        let v = ok(&format!("{}{}", adapter_doc(), handler_doc(params)));
        let h = &v.config.handlers[0];
        let resource = h.adapter_resource.as_ref().expect("adapter document found");
        assert_eq!(&*resource.name, "testadapter.adapter.istio-system");
        assert_eq!(resource.description, "a test adapter");
        assert_eq!(
            resource.templates,
            [
                mixer_model::Template::ListEntry,
                mixer_model::Template::Metric
            ]
        );
        let descriptor = resource.params.as_ref().expect("params message");
        assert_eq!(&*descriptor.message, "testadapter.config.Params");
        assert_eq!(
            &*descriptor.file_descriptor_set,
            mixer_proto::testdata::FILE_DESCRIPTOR_SET
        );
        assert_eq!(
            v.config.dump()["handlers"][0]["adapterResource"]["paramsMessage"],
            "testadapter.config.Params"
        );
        // A change of the adapter document is a change of the handler (a reload rebuilds it).
        let mut other = h.clone();
        other.adapter_resource = None;
        assert!(!h.same_build(&other));
        // No params at all is an empty message.
        let v = ok(&format!(
            "{}kind: handler\nmetadata: {{name: h}}\nspec: {{adapter: testadapter.istio-system, connection: {{address: 'a:1'}}}}\n",
            adapter_doc()
        ));
        assert!(v.config.handlers[0].adapter_resource.is_some());
    }

    #[test]
    fn params_that_do_not_fit_the_message_are_errors_at_their_field() {
        let e = errors(&format!(
            "{}{}",
            adapter_doc(),
            handler_doc("{backend: {hots: h}}")
        ));
        assert_eq!(
            e,
            [
                "c.yaml: handler h: spec.params.backend.hots: unknown field of testadapter.config.Params.Backend (did you mean host?)"
            ]
        );
        let e = errors(&format!("{}{}", adapter_doc(), handler_doc("[1]")));
        assert_eq!(
            e,
            [
                "c.yaml: handler h: spec.params: expected a mapping of testadapter.config.Params's fields, found a list"
            ]
        );
    }

    #[test]
    fn bad_adapter_documents() {
        let no_params = prost_types::FileDescriptorSet {
            file: vec![prost_types::FileDescriptorProto {
                name: Some("other.proto".into()),
                package: Some("other".into()),
                message_type: vec![prost_types::DescriptorProto {
                    name: Some("Config".into()),
                    ..Default::default()
                }],
                syntax: Some("proto3".into()),
                ..Default::default()
            }],
        };
        let cases = [
            ("config: 'not base64!'", "spec.config: not base64: "),
            (
                "config: CgX/////",
                "spec.config: not a serialized google.protobuf.FileDescriptorSet: ",
            ),
            (
                &format!("config: {}", STANDARD.encode(no_params.encode_to_vec())),
                "spec.config: the descriptor set has no top-level message named Params (the adapter's config message)",
            ),
            (
                "templates: [metrc]",
                "spec.templates[0]: unknown template \"metrc\" (did you mean metric?)",
            ),
            (
                "templates: metric",
                "spec.templates: expected a list of template names, found a string",
            ),
            (
                "session_based: maybe",
                "spec.session_based: expected true or false, found a string",
            ),
            (
                "confg: x",
                "spec.confg: unknown field (did you mean config?)",
            ),
        ];
        for (spec, expected) in cases {
            // The handler naming it is not reported again.
            let yaml = format!(
                "kind: adapter\nmetadata: {{name: a}}\nspec: {{{spec}}}\n---\nkind: handler\nmetadata: {{name: h}}\nspec: {{adapter: a, connection: {{address: 'x:1'}}}}\n"
            );
            let e = errors(&yaml);
            assert_eq!(e.len(), 1, "{spec}: {e:?}");
            assert!(
                e[0].starts_with(&format!("c.yaml: adapter a: {expected}")),
                "{}",
                e[0]
            );
        }
    }

    #[test]
    fn without_a_descriptor_or_a_document_params_stay_free_form() {
        let yaml = "kind: adapter\nmetadata: {name: a}\nspec: {templates: [listentry], config: ''}\n---\nkind: handler\nmetadata: {name: h, namespace: team}\nspec: {adapter: a, connection: {address: 'x:1'}, params: {anything: [1]}}\n---\nkind: handler\nmetadata: {name: g}\nspec: {adapter: undescribed, connection: {address: 'x:1'}, params: {anything: [1]}}\n";
        let v = ok(yaml);
        let described = v.config.handlers[0]
            .adapter_resource
            .as_ref()
            .expect("found in the default namespace");
        assert!(described.params.is_none());
        assert!(v.config.handlers[1].adapter_resource.is_none());
    }

    #[test]
    fn rules_send_an_adapter_only_the_templates_its_document_lists() {
        let yaml = format!(
            "{}{}---\nkind: instance\nmetadata: {{name: nothing, namespace: team}}\nspec: {{compiledTemplate: checknothing}}\n---\nkind: rule\nmetadata: {{name: r, namespace: team}}\nspec:\n  actions: [{{handler: h, instances: [nothing]}}]\n",
            adapter_doc(),
            handler_doc("{}")
        );
        assert_eq!(
            errors(&yaml),
            [
                "c.yaml: rule r: spec.actions[0].instances[0]: instance nothing.instance.team is of template checknothing, which handler h.handler.team (adapter testadapter) does not support (it supports listentry, metric)"
            ]
        );
    }
}
