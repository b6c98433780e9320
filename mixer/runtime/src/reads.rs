//! Which attributes a snapshot's evaluation can read at all.
//!
//! A report record's attributes are only ever read by the rules' match expressions, the
//! instances' field expressions and the namespace scoping; nothing else sees a report's bag.
//! A front end can then check the other attributes a proxy sends (so bad input is still
//! refused) without building their values: a sidecar's `request.headers`, for one, is a map of
//! a dozen strings that Istio's standard telemetry never reads.

use mixer_config::{Config, FieldExprValue};
use mixer_model::AttrId;

use crate::rules::IdentityAttrs;

/// One flag per attribute of the snapshot's vocabulary: true when an expression (or the
/// dispatcher itself) may read it.
#[derive(Debug, Default)]
pub(crate) struct ReadAttrs {
    read: Vec<bool>,
}

impl ReadAttrs {
    /// The attributes `config`'s rules, header operations and instances refer to, plus the
    /// ones the dispatcher reads to scope rules by namespace.
    pub(crate) fn new(config: &Config, identity: &IdentityAttrs) -> ReadAttrs {
        let mut read = vec![false; config.vocabulary.len()];
        let mut mark = |id: AttrId| {
            if let Some(flag) = read.get_mut(id.index()) {
                *flag = true;
            }
        };
        let dispatcher = [
            identity.reporter_kind,
            identity.source_namespace,
            identity.destination_namespace,
        ];
        dispatcher.into_iter().flatten().for_each(&mut mark);
        for rule in &config.rules {
            let header_ops = rule
                .request_header_operations
                .iter()
                .chain(&rule.response_header_operations)
                .flat_map(|op| &op.values);
            for expr in rule.match_expr.iter().chain(header_ops) {
                expr.attributes().into_iter().for_each(&mut mark);
            }
            // Sampling reads the request id (consistent draws) and its override.
            if let Some(random) = rule.sampling.as_ref().and_then(|s| s.random.as_ref()) {
                if let Some(expr) = &random.attribute_expression {
                    expr.attributes().into_iter().for_each(&mut mark);
                }
                if !random.use_independent_randomness
                    && let Some(id) = config.vocabulary.lookup("request.id")
                {
                    mark(id);
                }
            }
        }
        for instance in &config.instances {
            for field in &instance.fields {
                match &field.value {
                    FieldExprValue::Value(expr) => {
                        expr.attributes().into_iter().for_each(&mut mark);
                    }
                    FieldExprValue::Map(entries) => {
                        for (_, expr) in entries {
                            expr.attributes().into_iter().for_each(&mut mark);
                        }
                    }
                }
            }
        }
        ReadAttrs { read }
    }
}

impl ReadAttrs {
    /// Whether attribute `id` may be read.
    pub(crate) fn reads(&self, id: AttrId) -> bool {
        self.read.get(id.index()).copied().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile};

    const CONFIG: &str = r#"
kind: instance
metadata: {name: count, namespace: istio-system}
spec:
  compiledTemplate: metric
  params:
    value: request.size | 0
    dimensions:
      source: source.workload.name | "unknown"
---
kind: rule
metadata: {name: r, namespace: istio-system}
spec:
  match: request.headers["x-tenant"] == "a"
"#;

    #[test]
    fn rules_instances_and_namespace_scoping_are_read_nothing_else() {
        let sources = [SourceFile {
            name: "c.yaml".into(),
            text: CONFIG.into(),
        }];
        let validated =
            mixer_config::validate(&sources, &AdapterRegistry::new(), &ConfigOptions::default())
                .expect("valid");
        let config = &validated.config;
        let vocabulary = &config.vocabulary;
        let identity = IdentityAttrs {
            reporter_kind: vocabulary.lookup("context.reporter.kind"),
            source_namespace: None,
            destination_namespace: None,
        };
        let reads = ReadAttrs::new(config, &identity);
        let read = |name: &str| {
            let id = vocabulary.lookup(name).expect("declared");
            reads.read[id.index()]
        };
        for name in [
            "request.size",
            "source.workload.name",
            "request.headers",
            "context.reporter.kind",
        ] {
            assert!(read(name), "{name}");
        }
        for name in ["request.host", "source.ip", "destination.namespace"] {
            assert!(!read(name), "{name}");
        }
    }
}
