//! The whole pass: parse every file, sort documents by kind, extend the vocabulary, then
//! validate handlers, instances and rules in that order, collecting every problem.

use std::collections::HashMap;
use std::sync::Arc;

use mixer_adapter_api::AdapterRegistry;
use mixer_model::Vocabulary;

use crate::document::{RawDoc, parse_file};
use crate::error::{ConfigError, Diagnostics};
use crate::kinds::rule::Scope;
use crate::kinds::{Doc, adapter, handler, instance, manifest, ratelimit, rule};
use crate::model::Config;
use crate::resolve::{Entry, Table};
use crate::source::SourceFile;
use crate::{ConfigOptions, Validated};

mod classify;

use classify::{Category, Kind, classify, syntax};

/// The annotation choosing a document's expression language.
pub const LANG_ANNOTATION: &str = "policy.istio.io/lang";

/// See [`crate::validate`].
pub(crate) fn validate(
    sources: &[SourceFile],
    registry: &AdapterRegistry,
    options: &ConfigOptions,
) -> Result<Validated, Vec<ConfigError>> {
    let mut diags = Diagnostics::default();
    let default_ns = options.default_namespace.as_str();
    let raws: Vec<RawDoc> = sources
        .iter()
        .flat_map(|s| parse_file(s, default_ns, &mut diags))
        .collect();

    // Kinds, duplicates and expression syntax.
    let mut docs: Vec<(Kind, Doc<'_>)> = Vec::new();
    let mut seen: HashMap<(Category, &str, &str), &str> = HashMap::new();
    for raw in &raws {
        let Some(kind) = classify(raw, registry, &mut diags) else {
            continue;
        };
        let key = (kind.category(), raw.namespace.as_str(), raw.name.as_str());
        if let Some(first) = seen.get(&key) {
            diags.error(
                &raw.doc,
                "metadata.name",
                format!(
                    "duplicate {} {:?} in namespace {} (first defined in {first})",
                    kind.category().label(),
                    raw.name,
                    raw.namespace
                ),
            );
            continue;
        }
        seen.insert(key, raw.doc.file.as_str());
        let syntax = syntax(raw, options.default_syntax, &mut diags);
        docs.push((kind, Doc { raw, syntax }));
    }

    // Manifests first: every expression compiles against the extended vocabulary. Adapter
    // documents too: handlers are checked against them.
    let mut vocabulary = Vocabulary::istio();
    let mut adapter_list = Vec::new();
    let mut adapter_table = Table::new("adapter");
    for (kind, doc) in &docs {
        match kind {
            Kind::Manifest => manifest::manifest(doc, &mut vocabulary, &mut diags),
            Kind::Adapter => {
                let described = adapter::adapter(doc, &mut diags);
                adapter_table.push(Entry {
                    name: doc.raw.name.clone(),
                    namespace: doc.raw.namespace.clone(),
                    kind: doc.raw.kind.clone(),
                    index: described.as_ref().map(|_| adapter_list.len()),
                });
                adapter_list.extend(described);
            }
            _ => {}
        }
    }
    let adapters = adapter::Adapters {
        table: &adapter_table,
        list: &adapter_list,
        default_namespace: default_ns,
    };

    let mut handlers = Vec::new();
    let mut handler_table = Table::new("handler");
    let mut instances = Vec::new();
    let mut instance_table = Table::new("instance");
    // Rules translated from `ratelimitconfig` documents, added after the written ones; and the
    // names they generated, checked for collisions at the end.
    let mut generated_rules = Vec::new();
    let mut generated: Vec<(&RawDoc, &'static str, Arc<str>)> = Vec::new();
    for (kind, doc) in &docs {
        let (built, table, list_len) = match kind {
            Kind::RateLimit => {
                let Some(t) =
                    ratelimit::ratelimit(doc, registry, &vocabulary, default_ns, &mut diags)
                else {
                    continue;
                };
                let handler_index = handlers.len();
                let first_instance = instances.len();
                generated.push((doc.raw, "handler", t.handler.name.clone()));
                handler_table.push(Entry {
                    name: doc.raw.name.clone(),
                    namespace: doc.raw.namespace.clone(),
                    kind: doc.raw.kind.clone(),
                    index: Some(handler_index),
                });
                handlers.push(t.handler);
                for (i, inst) in t.instances.into_iter().enumerate() {
                    generated.push((doc.raw, "instance", inst.name.clone()));
                    let short = inst.name.split('.').next().unwrap_or_default().to_string();
                    instance_table.push(Entry {
                        name: short,
                        namespace: doc.raw.namespace.clone(),
                        kind: "quota".to_string(),
                        index: Some(first_instance + i),
                    });
                    instances.push(inst);
                }
                for mut r in t.rules {
                    generated.push((doc.raw, "rule", r.name.clone()));
                    for a in &mut r.actions {
                        a.handler = handler_index;
                        for i in &mut a.instances {
                            *i += first_instance;
                        }
                    }
                    generated_rules.push(r);
                }
                continue;
            }
            Kind::Handler | Kind::LegacyHandler => {
                let h = if matches!(kind, Kind::Handler) {
                    handler::handler(doc, registry, &adapters, &mut diags)
                } else {
                    handler::legacy_handler(doc, registry, &mut diags)
                };
                let ok = h.is_some();
                handlers.extend(h);
                (ok, &mut handler_table, handlers.len())
            }
            Kind::Instance | Kind::LegacyInstance(_) => {
                let i = match kind {
                    Kind::LegacyInstance(t) => {
                        instance::legacy_instance(doc, *t, &vocabulary, &mut diags)
                    }
                    _ => instance::instance(doc, &vocabulary, &mut diags),
                };
                let ok = i.is_some();
                instances.extend(i);
                (ok, &mut instance_table, instances.len())
            }
            Kind::Rule | Kind::Manifest | Kind::Adapter => continue,
        };
        table.push(Entry {
            name: doc.raw.name.clone(),
            namespace: doc.raw.namespace.clone(),
            kind: doc.raw.kind.clone(),
            index: built.then(|| list_len - 1),
        });
    }

    let scope = Scope {
        vocabulary: &vocabulary,
        registry,
        default_namespace: default_ns,
        handlers: &handlers,
        handler_table: &handler_table,
        instances: &instances,
        instance_table: &instance_table,
    };
    let mut rules = Vec::new();
    for (kind, doc) in &docs {
        if matches!(kind, Kind::Rule) {
            rules.extend(rule::rule(doc, &scope, &mut diags));
        }
    }
    rules.extend(generated_rules);
    for (raw, what, name) in &generated {
        let count = match *what {
            "handler" => handlers.iter().filter(|h| h.name == *name).count(),
            "instance" => instances.iter().filter(|i| i.name == *name).count(),
            _ => rules.iter().filter(|r| r.name == *name).count(),
        };
        if count > 1 {
            diags.error(
                &raw.doc,
                "metadata.name",
                format!("the generated {what} {name} has the name of another {what}"),
            );
        }
    }

    if !diags.errors.is_empty() {
        return Err(diags.errors);
    }
    Ok(Validated {
        config: Config {
            vocabulary: Arc::new(vocabulary),
            default_namespace: Arc::from(default_ns),
            handlers,
            instances,
            rules,
        },
        warnings: diags.warnings,
    })
}

#[cfg(test)]
mod tests;
