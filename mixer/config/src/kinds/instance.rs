//! `instance` documents (and Istio 1.0's per-template kinds such as `kind: checknothing`).

use std::sync::Arc;

use mixer_model::{Bag, FieldKind, FieldSpec, Template, Vocabulary, camel_to_snake};
use serde_json::{Map, Value};

use super::{Doc, compile_leaf};
use crate::document::{as_map, check_keys, opt_string, type_name};
use crate::error::{Diagnostics, did_you_mean, join};
use crate::model::{FieldExpr, FieldExprValue, InstanceConfig};

/// Validates a `kind: instance` document.
pub(crate) fn instance(
    doc: &Doc<'_>,
    vocabulary: &Vocabulary,
    diags: &mut Diagnostics,
) -> Option<InstanceConfig> {
    let raw = doc.raw;
    let spec = as_map(&raw.spec, "spec", &raw.doc, diags)?;
    check_keys(
        &spec,
        &[
            "compiledTemplate",
            "template",
            "params",
            "attributeBindings",
        ],
        "spec",
        &raw.doc,
        diags,
    );
    let compiled = opt_string(&spec, "compiledTemplate", "spec", &raw.doc, diags);
    let plain = opt_string(&spec, "template", "spec", &raw.doc, diags);
    let (name, field) = match (compiled, plain) {
        (Some(t), None) => (t, "spec.compiledTemplate"),
        (None, Some(t)) => (t, "spec.template"),
        (Some(_), Some(_)) => {
            diags.error(
                &raw.doc,
                "spec.template",
                "give either compiledTemplate or template, not both",
            );
            return None;
        }
        (None, None) => {
            if !spec.contains_key("compiledTemplate") && !spec.contains_key("template") {
                diags.error(
                    &raw.doc,
                    "spec",
                    "missing compiledTemplate (or template): which template does this instance fill?",
                );
            }
            return None;
        }
    };
    if name == super::decision_log::DECISION_LOG_TEMPLATE {
        let params = spec.get("params").unwrap_or(&Value::Null);
        return super::decision_log::decision_log_instance(
            doc,
            params,
            "spec.params",
            vocabulary,
            diags,
        );
    }
    let Some(template) = Template::from_name(&name) else {
        let names = Template::ALL.iter().map(|t| t.name());
        let hint = did_you_mean(
            &name,
            names.chain([super::decision_log::DECISION_LOG_TEMPLATE]),
        );
        let message = if hint.is_empty() {
            let known: Vec<&str> = Template::ALL.iter().map(|t| t.name()).collect();
            format!(
                "unknown template {name:?} (known templates: {})",
                known.join(", ")
            )
        } else {
            format!("unknown template {name:?}{hint}")
        };
        diags.error(&raw.doc, field, message);
        return None;
    };
    let params = spec.get("params").cloned().unwrap_or(Value::Null);
    let before = diags.errors.len();
    let bindings = super::bindings::bindings(
        doc,
        template,
        spec.get("attributeBindings").unwrap_or(&Value::Null),
        "spec.attributeBindings",
        vocabulary,
        diags,
    );
    let bound = diags.errors.len() == before;
    let mut instance = fields(doc, template, &params, "spec.params", vocabulary, diags)?;
    instance.bindings = bindings;
    bound.then_some(instance)
}

/// Validates a legacy document whose kind is a template name; its spec is the params.
pub(crate) fn legacy_instance(
    doc: &Doc<'_>,
    template: Template,
    vocabulary: &Vocabulary,
    diags: &mut Diagnostics,
) -> Option<InstanceConfig> {
    // Istio 1.0's form of an attribute generator instance keeps its bindings beside the
    // params, as `attribute_bindings` (Istio 1.4's `mixer/testdata/config/kubernetesenv.yaml`).
    let key = ["attribute_bindings", "attributeBindings"]
        .into_iter()
        .find(|k| doc.raw.spec.get(k).is_some());
    let Some(key) = key.filter(|_| !template.outputs().is_empty()) else {
        return fields(doc, template, &doc.raw.spec, "spec", vocabulary, diags);
    };
    let mut params = doc.raw.spec.clone();
    let value = params
        .as_object_mut()
        .and_then(|m| m.remove(key))
        .unwrap_or(Value::Null);
    let before = diags.errors.len();
    let bindings = super::bindings::bindings(
        doc,
        template,
        &value,
        &format!("spec.{key}"),
        vocabulary,
        diags,
    );
    let bound = diags.errors.len() == before;
    let mut instance = fields(doc, template, &params, "spec", vocabulary, diags)?;
    instance.bindings = bindings;
    bound.then_some(instance)
}

fn fields(
    doc: &Doc<'_>,
    template: Template,
    params: &Value,
    path: &str,
    vocabulary: &Vocabulary,
    diags: &mut Diagnostics,
) -> Option<InstanceConfig> {
    let before = diags.errors.len();
    let params = as_map(params, path, &doc.raw.doc, diags)?;
    let mut out = Vec::new();
    let mut walker = Walker {
        doc,
        template,
        vocabulary,
        diags,
        out: &mut out,
    };
    walker.walk(&params, "", path);
    if template == Template::Quota {
        quota_usage(doc, &params, path, vocabulary, &mut out, diags);
    }
    if diags.errors.len() > before {
        return None;
    }
    out.sort_by_key(|f| {
        template
            .fields()
            .iter()
            .position(|s| s.name == f.name)
            .unwrap_or(usize::MAX)
    });
    Some(InstanceConfig {
        name: doc.raw.full_name(),
        namespace: Arc::from(doc.raw.namespace.as_str()),
        template,
        fields: out,
        bindings: Vec::new(),
        decision_log: None,
    })
}

/// A bag with no attributes: what a constant expression is evaluated on.
struct NoAttributes;

impl Bag for NoAttributes {
    fn get(&self, _: mixer_model::AttrId) -> Option<&mixer_model::Value> {
        None
    }
}

/// The value of an expression that reads no attribute, if it evaluates.
fn constant(expr: &mixer_policy::Expression) -> Option<mixer_model::Value> {
    if !expr.attributes().is_empty() {
        return None;
    }
    let mut refs = mixer_model::ReferencedAttributes::ignoring();
    expr.eval(&NoAttributes, &mut refs).ok()
}

/// A quota instance's usage fields: a constant `charge` must be a valid amount and a
/// constant `minRemaining` not negative (errors at their params path, where a value known
/// only per report is checked, and dropped, at run time); a charged instance's checks refuse
/// once nothing is left unless `minRemaining` says otherwise, so it defaults to 1 there.
fn quota_usage(
    doc: &Doc<'_>,
    params: &Map<String, Value>,
    path: &str,
    vocabulary: &Vocabulary,
    out: &mut Vec<FieldExpr>,
    diags: &mut Diagnostics,
) {
    let key_of = |field: &str| {
        params
            .keys()
            .find(|k| camel_to_snake(k) == field)
            .map(|k| join(path, k))
            .unwrap_or_else(|| join(path, field))
    };
    let single = |name: &str| {
        out.iter().find_map(|f| match &f.value {
            FieldExprValue::Value(e) if f.name == name => Some(e.clone()),
            _ => None,
        })
    };
    let charge = single("charge");
    if let Some(value) = charge.as_ref().and_then(constant)
        && let Err(e) = mixer_model::charge_amount(&value)
    {
        diags.error(
            &doc.raw.doc,
            key_of("charge"),
            format!("{e} (found {value})"),
        );
    }
    match single("min_remaining") {
        Some(min) => {
            if let Some(mixer_model::Value::Int64(n)) = constant(&min)
                && n < 0
            {
                diags.error(
                    &doc.raw.doc,
                    key_of("min_remaining"),
                    format!("minRemaining must not be negative (found {n})"),
                );
            }
        }
        None if charge.is_some() => {
            if let Ok(one) = mixer_policy::Expression::compile("1", doc.syntax, vocabulary) {
                out.push(FieldExpr {
                    name: "min_remaining",
                    value: FieldExprValue::Value(one),
                });
            }
        }
        None => {}
    }
}

struct Walker<'a, 'd> {
    doc: &'a Doc<'d>,
    template: Template,
    vocabulary: &'a Vocabulary,
    diags: &'a mut Diagnostics,
    out: &'a mut Vec<FieldExpr>,
}

impl Walker<'_, '_> {
    /// Walks a params mapping whose keys continue the field name `prefix` (snake case).
    fn walk(&mut self, map: &Map<String, Value>, prefix: &str, path: &str) {
        for (key, value) in map {
            let here = join(path, key);
            let name = join(prefix, &camel_to_snake(key));
            if let Some(spec) = self.template.field(&name) {
                if self.out.iter().any(|f| f.name == spec.name) {
                    self.diags.error(
                        &self.doc.raw.doc,
                        here,
                        format!("field {} is set twice", spec.name),
                    );
                    continue;
                }
                self.field(spec, value, &here);
                continue;
            }
            let nested = format!("{name}.");
            if self
                .template
                .fields()
                .iter()
                .any(|f| f.name.starts_with(&nested))
            {
                match value {
                    Value::Object(inner) => self.walk(inner, &name, &here),
                    Value::Null => {}
                    other => self.diags.error(
                        &self.doc.raw.doc,
                        here,
                        format!("expected a mapping of fields, found {}", type_name(other)),
                    ),
                }
                continue;
            }
            self.unknown(key, prefix, here);
        }
    }

    fn unknown(&mut self, key: &str, prefix: &str, here: String) {
        // Candidates: the next name segment of every field under `prefix`.
        let mut candidates: Vec<&str> = self
            .template
            .fields()
            .iter()
            .filter_map(|f| {
                let rest = if prefix.is_empty() {
                    Some(f.name)
                } else {
                    f.name
                        .strip_prefix(prefix)
                        .and_then(|r| r.strip_prefix('.'))
                };
                rest.map(|r| r.split('.').next().unwrap_or(r))
            })
            .collect();
        candidates.dedup();
        let hint = did_you_mean(&camel_to_snake(key), candidates.iter().copied());
        let message = if self.template.fields().is_empty() {
            format!("unknown field: template {} has no fields", self.template)
        } else if hint.is_empty() {
            format!(
                "unknown field of template {} (fields: {})",
                self.template,
                candidates.join(", ")
            )
        } else {
            format!("unknown field of template {}{hint}", self.template)
        };
        self.diags.error(&self.doc.raw.doc, here, message);
    }

    fn field(&mut self, spec: &'static FieldSpec, value: &Value, path: &str) {
        let doc = self.doc;
        match spec.kind {
            FieldKind::Value(ty) => {
                if let Some(e) = compile_leaf(doc, value, path, ty, self.vocabulary, self.diags) {
                    self.out.push(FieldExpr {
                        name: spec.name,
                        value: FieldExprValue::Value(e),
                    });
                }
            }
            FieldKind::Map(ty) => {
                let entries = match value {
                    Value::Object(m) => m,
                    Value::Null => return,
                    other => {
                        self.diags.error(
                            &doc.raw.doc,
                            path,
                            format!(
                                "expected a mapping of names to expressions, found {}",
                                type_name(other)
                            ),
                        );
                        return;
                    }
                };
                let mut compiled = Vec::with_capacity(entries.len());
                for (k, v) in entries {
                    let here = join(path, k);
                    if let Some(e) = compile_leaf(doc, v, &here, ty, self.vocabulary, self.diags) {
                        compiled.push((Arc::from(k.as_str()), e));
                    }
                }
                self.out.push(FieldExpr {
                    name: spec.name,
                    value: FieldExprValue::Map(compiled),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{errors, ok};
    use crate::model::FieldExprValue;
    use mixer_model::Template;

    #[test]
    fn nested_and_camel_case_fields_compile() {
        let v = ok(r#"
kind: instance
metadata: {name: authz, namespace: ns}
spec:
  compiledTemplate: authorization
  params:
    subject:
      user: source.principal
      properties: {ns: source.namespace, port: source.port}
    action: {path: request.path, method: request.method}
"#);
        let i = &v.config.instances[0];
        assert_eq!(&*i.name, "authz.instance.ns");
        assert_eq!(i.template, Template::Authorization);
        let names: Vec<&str> = i.fields.iter().map(|f| f.name).collect();
        assert_eq!(
            names,
            [
                "subject.user",
                "subject.properties",
                "action.method",
                "action.path"
            ]
        );
        let FieldExprValue::Map(props) = &i.fields[1].value else {
            panic!("map field");
        };
        assert_eq!(&*props[0].0, "ns");
        assert_eq!(props[1].1.source(), "source.port");

        let v = ok(
            "kind: instance\nmetadata: {name: q}\nspec:\n  template: tracespan\n  params: {spanName: request.path, httpStatusCode: 200, clientSpan: true}\n",
        );
        let names: Vec<&str> = v.config.instances[0]
            .fields
            .iter()
            .map(|f| f.name)
            .collect();
        assert_eq!(names, ["span_name", "http_status_code", "client_span"]);
        let FieldExprValue::Value(e) = &v.config.instances[0].fields[1].value else {
            panic!("value field");
        };
        assert_eq!(e.source(), "200");
    }

    #[test]
    fn unknown_templates_and_fields() {
        assert_eq!(
            errors("kind: instance\nmetadata: {name: i}\nspec: {compiledTemplate: checknothin}\n"),
            [
                "c.yaml: instance i: spec.compiledTemplate: unknown template \"checknothin\" (did you mean checknothing?)"
            ]
        );
        assert_eq!(
            errors(
                "kind: instance\nmetadata: {name: i}\nspec:\n  compiledTemplate: authorization\n  params: {subject: {usr: source.user}, acton: {}}\n"
            ),
            [
                "c.yaml: instance i: spec.params.subject.usr: unknown field of template authorization (did you mean user?)",
                "c.yaml: instance i: spec.params.acton: unknown field of template authorization (did you mean action?)",
            ]
        );
        assert_eq!(
            errors(
                "kind: instance\nmetadata: {name: i}\nspec: {compiledTemplate: checknothing, params: {value: x}}\n"
            ),
            [
                "c.yaml: instance i: spec.params.value: unknown field: template checknothing has no fields"
            ]
        );
        assert_eq!(
            errors(
                "kind: instance\nmetadata: {name: i}\nspec: {compiledTemplate: listentry, params: {value: [a]}}\n"
            ),
            ["c.yaml: instance i: spec.params.value: expected an expression, found a list"]
        );
    }

    #[test]
    fn expressions_are_checked_against_the_vocabulary() {
        let e = errors(
            "kind: instance\nmetadata: {name: i}\nspec: {compiledTemplate: listentry, params: {value: source.nmespace}}\n",
        );
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("c.yaml: instance i: spec.params.value: ")
                && e[0].contains("source.namespace"),
            "{e:?}"
        );
        let e = errors(
            "kind: instance\nmetadata: {name: i}\nspec: {compiledTemplate: logentry, params: {severity: source.port}}\n",
        );
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("c.yaml: instance i: spec.params.severity: "),
            "{e:?}"
        );
    }

    #[test]
    fn legacy_template_kind_is_an_instance_whose_spec_is_params() {
        let v = ok(
            "kind: listentry\nmetadata: {name: l}\nspec: {value: source.namespace}\n---\nkind: checknothing\nmetadata: {name: c}\n",
        );
        assert_eq!(v.config.instances[0].template, Template::ListEntry);
        assert_eq!(v.config.instances[1].template, Template::CheckNothing);
        assert_eq!(
            errors("kind: listentry\nmetadata: {name: l}\nspec: {vlaue: x}\n"),
            [
                "c.yaml: listentry l: spec.vlaue: unknown field of template listentry (did you mean value?)"
            ]
        );
    }

    /// Istio 1.4's chart (`install/kubernetes/helm/istio/charts/mixer/templates/config.yaml`,
    /// release-1.4), the `attributes` instance as Helm renders it, labels left out.
    const ISTIO_ATTRIBUTES: &str = r#"
apiVersion: "config.istio.io/v1alpha2"
kind: instance
metadata:
  name: attributes
  namespace: istio-system
spec:
  compiledTemplate: kubernetes
  params:
    # Pass the required attribute data to the adapter
    source_uid: source.uid | ""
    source_ip: source.ip | ip("0.0.0.0") # default to unspecified ip addr
    destination_uid: destination.uid | ""
    destination_port: destination.port | 0
  attributeBindings:
    # Fill the new attributes from the adapter produced output.
    # $out refers to an instance of OutputTemplate message
    source.ip: $out.source_pod_ip | ip("0.0.0.0")
    source.uid: $out.source_pod_uid | "unknown"
    source.labels: $out.source_labels | emptyStringMap()
    source.name: $out.source_pod_name | "unknown"
    source.namespace: $out.source_namespace | "default"
    source.owner: $out.source_owner | "unknown"
    source.serviceAccount: $out.source_service_account_name | "unknown"
    source.workload.uid: $out.source_workload_uid | "unknown"
    source.workload.name: $out.source_workload_name | "unknown"
    source.workload.namespace: $out.source_workload_namespace | "unknown"
    destination.ip: $out.destination_pod_ip | ip("0.0.0.0")
    destination.uid: $out.destination_pod_uid | "unknown"
    destination.labels: $out.destination_labels | emptyStringMap()
    destination.name: $out.destination_pod_name | "unknown"
    destination.container.name: $out.destination_container_name | "unknown"
    destination.namespace: $out.destination_namespace | "default"
    destination.owner: $out.destination_owner | "unknown"
    destination.serviceAccount: $out.destination_service_account_name | "unknown"
    destination.workload.uid: $out.destination_workload_uid | "unknown"
    destination.workload.name: $out.destination_workload_name | "unknown"
    destination.workload.namespace: $out.destination_workload_namespace | "unknown"
"#;

    #[test]
    fn istio_chart_attribute_bindings_load() {
        let v = ok(ISTIO_ATTRIBUTES);
        let i = &v.config.instances[0];
        assert_eq!(i.template, Template::Kubernetes);
        assert_eq!(i.fields.len(), 4);
        assert_eq!(i.bindings.len(), 21);
        let b = &i.bindings[0];
        assert_eq!(&*b.name, "source.ip");
        assert_eq!(v.config.vocabulary.lookup("source.ip"), Some(b.attr));
        assert_eq!(&*b.source, "$out.source_pod_ip | ip(\"0.0.0.0\")");
        let dump = v.config.dump();
        assert_eq!(
            dump["instances"][0]["attributeBindings"]["source.workload.name"],
            "$out.source_workload_name | \"unknown\""
        );
    }

    #[test]
    fn istio_1_0_kind_kubernetes_keeps_its_bindings_beside_the_params() {
        let v = ok(r#"
apiVersion: "config.istio.io/v1alpha2"
kind: kubernetes
metadata:
  name: attributes
  namespace: istio-system
spec:
  source_uid: source.uid | ""
  source_ip: source.ip | ip("0.0.0.0") # default to unspecified ip addr
  attribute_bindings:
    source.uid: $out.source_pod_uid | "unknown"
    source.labels: $out.source_labels | emptyStringMap()
"#);
        let i = &v.config.instances[0];
        assert_eq!(i.template, Template::Kubernetes);
        assert_eq!(i.fields.len(), 2);
        let names: Vec<&str> = i.bindings.iter().map(|b| &*b.name).collect();
        assert_eq!(names, ["source.uid", "source.labels"]);
        assert_eq!(
            errors(
                "kind: kubernetes\nmetadata: {name: a}\nspec:\n  attribute_bindings: {source.wrkload.name: $out.source_workload_name}\n"
            ),
            [
                "c.yaml: kubernetes a: spec.attribute_bindings.source.wrkload.name: unknown attribute \"source.wrkload.name\" (did you mean source.workload.name?)"
            ]
        );
    }

    #[test]
    fn a_generator_sent_to_a_handler_that_does_not_produce_attributes_is_an_error() {
        let yaml = format!(
            "{ISTIO_ATTRIBUTES}---\nkind: handler\nmetadata: {{name: h, namespace: istio-system}}\nspec: {{compiledAdapter: denier}}\n---\nkind: rule\nmetadata: {{name: r, namespace: istio-system}}\nspec:\n  actions: [{{handler: h, instances: [attributes]}}]\n"
        );
        let e = errors(&yaml);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with(
                "c.yaml: rule r: spec.actions[0].instances[0]: instance attributes.instance.istio-system is of template kubernetes, which handler h.handler.istio-system (adapter denier) does not support"
            ),
            "{e:?}"
        );
    }

    #[test]
    fn attribute_binding_errors_name_the_file_and_field() {
        let doc = |template: &str, bindings: &str| {
            format!(
                "kind: instance\nmetadata: {{name: i}}\nspec:\n  compiledTemplate: {template}\n  attributeBindings:\n    {bindings}\n"
            )
        };
        assert_eq!(
            errors(&doc("checknothing", "source.uid: $out.x")),
            [
                "c.yaml: instance i: spec.attributeBindings: template checknothing produces no attributes (attributeBindings are for attribute generator templates: kubernetes, jwt, apikey)"
            ]
        );
        assert_eq!(
            errors(&doc(
                "kubernetes",
                "source.wrkload.name: $out.source_workload_name"
            )),
            [
                "c.yaml: instance i: spec.attributeBindings.source.wrkload.name: unknown attribute \"source.wrkload.name\" (did you mean source.workload.name?)"
            ]
        );
        let e = errors(&doc(
            "kubernetes",
            "source.workload.name: $out.source_workload",
        ));
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with(
                "c.yaml: instance i: spec.attributeBindings.source.workload.name: unknown output $out.source_workload of template kubernetes"
            ) && e[0].contains("(outputs: source_pod_uid, "),
            "{e:?}"
        );
        let e = errors(&doc(
            "kubernetes",
            "source.workload.name: $out.source_labels",
        ));
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with(
                "c.yaml: instance i: spec.attributeBindings.source.workload.name: attribute source.workload.name (STRING): "
            ),
            "{e:?}"
        );
        let e = errors(&doc("jwt", "request.auth.principal: source.uid"));
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with("c.yaml: instance i: spec.attributeBindings.request.auth.principal: "),
            "{e:?}"
        );
    }
}
