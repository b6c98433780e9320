//! Expressions that several instances share, evaluated once per report record.
//!
//! Istio's standard telemetry config gives four metrics the same dimensions
//! (`source.workload.name | "unknown"`, `response.code | 200`, a `conditional(...)` for the
//! reporter ...): about half of a record's field expressions repeat one already evaluated for
//! the same record. Each distinct expression gets a slot when the snapshot is built; a report
//! evaluation keeps one value per slot. Two expressions are the same when their text, syntax
//! and result type are: the type matters because a field's expected type may coerce the
//! result (`"200"` as an INT64 field is not `"200"` as a STRING one).

use std::collections::HashMap;

use mixer_config::{Config, FieldExprValue};
use mixer_model::{Value, ValueType};
use mixer_policy::{Expression, Syntax};

/// Each instance field expression's slot among the snapshot's distinct expressions.
#[derive(Debug, Default)]
pub(crate) struct SharedExprs {
    /// Per instance (aligned with `config.instances`): the slots of its field expressions,
    /// in field order, a map field's entries in their order.
    slots: Vec<Vec<u32>>,
    distinct: usize,
}

/// One record's values, by slot: `None` until evaluated, then the value or `None` when the
/// expression found nothing.
pub(crate) type Memo = Vec<Option<Result<Value, mixer_policy::EvalError>>>;

impl SharedExprs {
    /// Numbers the distinct expressions of `config`'s instances.
    pub(crate) fn new(config: &Config) -> SharedExprs {
        type Key<'c> = (&'c str, Syntax, Option<ValueType>);
        let mut ids: HashMap<Key<'_>, u32> = HashMap::new();
        fn slot<'c>(ids: &mut HashMap<Key<'c>, u32>, expr: &'c Expression) -> u32 {
            let next = u32::try_from(ids.len()).unwrap_or(u32::MAX);
            *ids.entry((expr.source(), expr.syntax(), expr.result_type()))
                .or_insert(next)
        }
        let slots = config
            .instances
            .iter()
            .map(|ic| {
                let mut of_instance = Vec::new();
                for field in &ic.fields {
                    match &field.value {
                        FieldExprValue::Value(expr) => {
                            of_instance.push(slot(&mut ids, expr));
                        }
                        FieldExprValue::Map(entries) => {
                            for (_, e) in entries {
                                of_instance.push(slot(&mut ids, e));
                            }
                        }
                    }
                }
                of_instance
            })
            .collect();
        let distinct = ids.len();
        SharedExprs { slots, distinct }
    }

    /// An empty memo for one record.
    pub(crate) fn memo(&self) -> Memo {
        vec![None; self.distinct]
    }

    /// The slots of instance `index`'s expressions (empty for an unknown index).
    pub(crate) fn of_instance(&self, index: usize) -> &[u32] {
        self.slots.get(index).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile};

    const INSTANCES: &str = r#"
kind: instance
metadata: {name: count, namespace: istio-system}
spec:
  compiledTemplate: metric
  params:
    value: "1"
    dimensions:
      source: source.workload.name | "unknown"
      code: response.code | 200
---
kind: instance
metadata: {name: size, namespace: istio-system}
spec:
  compiledTemplate: metric
  params:
    value: request.size | 0
    dimensions:
      code: response.code | 200
      source: source.workload.name | "unknown"
---
kind: instance
metadata: {name: log, namespace: istio-system}
spec:
  compiledTemplate: logentry
  params:
    variables:
      source: source.workload.name | "unknown"
      one: '"1"'
"#;

    #[test]
    fn instances_share_the_slots_of_identical_expressions() {
        let sources = [SourceFile {
            name: "i.yaml".into(),
            text: INSTANCES.into(),
        }];
        let validated =
            mixer_config::validate(&sources, &AdapterRegistry::new(), &ConfigOptions::default())
                .expect("valid");
        let shared = SharedExprs::new(&validated.config);
        let slots = |name: &str| {
            let index = validated
                .config
                .instances
                .iter()
                .position(|ic| ic.name.starts_with(name))
                .expect("instance");
            shared.of_instance(index).to_vec()
        };
        let (count, size, log) = (slots("count"), slots("size"), slots("log"));
        // count: value, source, code; size: value, code, source.
        assert_eq!(count.len(), 3);
        assert_ne!(count[0], size[0], "different values");
        assert_eq!(
            (count[1], count[2]),
            (size[2], size[1]),
            "shared dimensions"
        );
        // The log's source variable is the same text, syntax and type as the dimension.
        assert_eq!(log[0], count[1]);
        assert_eq!(shared.memo().len(), shared.distinct);
        assert!(shared.distinct < count.len() + size.len() + log.len());
    }
}
