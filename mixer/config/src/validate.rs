//! The whole pass: parse every file, sort documents by kind, extend the vocabulary, then
//! validate handlers, instances and rules in that order, collecting every problem.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use mixer_model::Vocabulary;

use crate::document::{RawDoc, parse_file};
use crate::error::{ConfigError, Diagnostics};
use crate::kinds::rule::Scope;
use crate::kinds::{Doc, adapter, handler, instance, manifest, ratelimit, rule};
use crate::model::{
    Config, DropReason, DroppedDocument, HandlerConfig, InstanceConfig, RateLimitBehaviour,
    RuleConfig,
};
use crate::registry::AdapterRegistry;
use crate::resolve::{Entry, Resolution, Table};
use crate::source::SourceFile;
use crate::{ConfigOptions, InvalidConfig, Validated};

mod classify;
mod remote;

use classify::{Category, Kind, classify, syntax};

/// The annotation choosing a document's expression language.
pub const LANG_ANNOTATION: &str = "policy.istio.io/lang";

/// See [`crate::validate`].
///
/// With [`InvalidConfig::Skip`] the pass runs again without the documents that had errors,
/// until a pass finds none: dropping a manifest can make an expression of another document
/// fail, and references to dropped documents drop what needs them (without errors of their
/// own). With [`InvalidConfig::Refuse`] one pass decides.
pub(crate) fn validate(
    sources: &[SourceFile],
    registry: &AdapterRegistry,
    options: &ConfigOptions,
) -> Result<Validated, Vec<ConfigError>> {
    let mut parse_diags = Diagnostics::default();
    let default_ns = options.default_namespace.as_str();
    let mut next_id = 0;
    let raws: Vec<RawDoc> = sources
        .iter()
        .flat_map(|s| parse_file(s, default_ns, &mut next_id, &mut parse_diags))
        .collect();

    // Documents left out, with the errors that put them out, in the order found.
    let mut excluded: BTreeMap<usize, Vec<ConfigError>> = BTreeMap::new();
    for (e, id) in parse_diags.errors.iter().zip(&parse_diags.error_docs) {
        excluded.entry(*id).or_default().push(e.clone());
    }
    let mut all_errors = parse_diags.errors.clone();
    loop {
        let mut diags = Diagnostics::default();
        let config = pass(&raws, &excluded, registry, options, &mut diags);
        if options.invalid_config == InvalidConfig::Refuse {
            all_errors.extend(diags.errors);
            if !all_errors.is_empty() {
                return Err(all_errors);
            }
            return Ok(Validated {
                config,
                warnings: diags.warnings,
            });
        }
        if !diags.errors.is_empty() {
            for (e, id) in diags.errors.iter().zip(&diags.error_docs) {
                excluded.entry(*id).or_default().push(e.clone());
            }
            all_errors.extend(diags.errors);
            continue;
        }
        let mut config = config;
        config.dropped = dropped(&raws, &excluded, &diags.dependents);
        if config.rules.is_empty() && !config.dropped.is_empty() {
            // Nothing left to serve: keep whatever runs now rather than an empty config.
            all_errors.push(ConfigError {
                file: config.dropped[0].file.clone(),
                document: None,
                field: String::new(),
                message: format!(
                    "no rule is left once the {} invalid or dependent documents are dropped; the config is refused",
                    config.dropped.len()
                ),
            });
            return Err(all_errors);
        }
        let warnings = diags.warnings;
        return Ok(Validated { config, warnings });
    }
}

/// What `excluded` (documents with errors) and `dependents` (documents whose needs were
/// dropped) come to, in reading order.
fn dropped(
    raws: &[RawDoc],
    excluded: &BTreeMap<usize, Vec<ConfigError>>,
    dependents: &[(usize, Vec<String>)],
) -> Vec<DroppedDocument> {
    let mut out: Vec<(usize, DroppedDocument)> = Vec::new();
    for (id, errors) in excluded {
        let (name, file) = match raws.iter().find(|r| r.doc.id == *id) {
            Some(raw) => (raw.full_name().to_string(), raw.doc.file.clone()),
            // A document without a usable header: named by its place in its file.
            None => {
                let first = &errors[0];
                let place = first.document.clone().unwrap_or_default();
                (format!("{}: {place}", first.file), first.file.clone())
            }
        };
        out.push((
            *id,
            DroppedDocument {
                name,
                file,
                reason: DropReason::Invalid(errors.clone()),
            },
        ));
    }
    for (id, needed) in dependents {
        if let Some(raw) = raws.iter().find(|r| r.doc.id == *id) {
            out.push((
                *id,
                DroppedDocument {
                    name: raw.full_name().to_string(),
                    file: raw.doc.file.clone(),
                    reason: DropReason::Dependency(needed.clone()),
                },
            ));
        }
    }
    out.sort_by_key(|(id, _)| *id);
    out.into_iter().map(|(_, d)| d).collect()
}

/// One validation pass over every document not in `excluded`; those are only named, so that
/// references to them resolve to "dropped" rather than "unknown".
fn pass(
    raws: &[RawDoc],
    excluded: &BTreeMap<usize, Vec<ConfigError>>,
    registry: &AdapterRegistry,
    options: &ConfigOptions,
    diags: &mut Diagnostics,
) -> Config {
    let default_ns = options.default_namespace.as_str();
    let is_excluded = |raw: &RawDoc| excluded.contains_key(&raw.doc.id);

    // Kinds, duplicates and expression syntax.
    let mut docs: Vec<(Kind, Doc<'_>)> = Vec::new();
    let mut left_out: Vec<(Kind, &RawDoc)> = Vec::new();
    let mut seen: HashMap<(Category, &str, &str), &str> = HashMap::new();
    for raw in raws {
        if is_excluded(raw) {
            if let Some(kind) = classify(raw, registry, &mut Diagnostics::default()) {
                left_out.push((kind, raw));
            }
            continue;
        }
        let Some(kind) = classify(raw, registry, diags) else {
            continue;
        };
        let key = (kind.category(), raw.namespace.as_str(), raw.name.as_str());
        if let Some(first) = seen.get(&key) {
            if raw.envoy_ratelimit {
                diags.error(
                    &raw.doc,
                    "domain",
                    format!(
                        "duplicate domain '{}' in config file (also in {first})",
                        domain_of(raw).unwrap_or_default()
                    ),
                );
                continue;
            }
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
        let syntax = syntax(raw, options.default_syntax, diags);
        let dir = options.config_root.as_ref().map(|root| {
            let file = root.join(&raw.doc.file);
            file.parent()
                .map_or_else(|| root.clone(), std::path::Path::to_path_buf)
        });
        docs.push((kind, Doc { raw, syntax, dir }));
    }
    let entry = |raw: &RawDoc, index: Option<usize>| Entry {
        name: raw.name.clone(),
        namespace: raw.namespace.clone(),
        kind: raw.kind.clone(),
        index,
        document: raw.full_name().to_string(),
    };

    // Manifests first: every expression compiles against the extended vocabulary. Adapter
    // documents too: handlers are checked against them.
    let mut vocabulary = Vocabulary::istio();
    let mut adapter_list = Vec::new();
    let mut adapter_table = Table::new("adapter");
    for (kind, doc) in &docs {
        match kind {
            Kind::Manifest => manifest::manifest(doc, &mut vocabulary, diags),
            Kind::Adapter => {
                let described = adapter::adapter(doc, diags);
                adapter_table.push(entry(
                    doc.raw,
                    described.as_ref().map(|_| adapter_list.len()),
                ));
                adapter_list.extend(described);
            }
            _ => {}
        }
    }
    let mut handler_table = Table::new("handler");
    let mut instance_table = Table::new("instance");
    for (kind, raw) in &left_out {
        match kind {
            Kind::Adapter => adapter_table.push(entry(raw, None)),
            Kind::Handler | Kind::LegacyHandler | Kind::RateLimit => {
                handler_table.push(entry(raw, None));
            }
            Kind::Instance | Kind::LegacyInstance(_) => instance_table.push(entry(raw, None)),
            Kind::Rule | Kind::Manifest => {}
        }
    }
    let adapters = adapter::Adapters {
        table: &adapter_table,
        list: &adapter_list,
        default_namespace: default_ns,
    };

    let mut out = Generated::default();
    let mut bare_files = Vec::new();
    for (kind, doc) in &docs {
        let (built, table, list_len) = match kind {
            Kind::RateLimit if doc.raw.envoy_ratelimit => {
                bare_files.push(doc);
                continue;
            }
            Kind::RateLimit => {
                let translated =
                    ratelimit::ratelimit(doc, registry, &vocabulary, default_ns, None, diags);
                out.add(doc.raw, translated, &mut handler_table, &mut instance_table);
                continue;
            }
            Kind::Handler | Kind::LegacyHandler => {
                let h = if matches!(kind, Kind::Handler) {
                    handler::handler(doc, registry, &adapters, diags)
                } else {
                    handler::legacy_handler(doc, registry, diags)
                };
                let ok = h.is_some();
                out.handlers.extend(h);
                (ok, &mut handler_table, out.handlers.len())
            }
            Kind::Instance | Kind::LegacyInstance(_) => {
                let i = match kind {
                    Kind::LegacyInstance(t) => {
                        instance::legacy_instance(doc, *t, &vocabulary, diags)
                    }
                    _ => instance::instance(doc, &vocabulary, diags),
                };
                let ok = i.is_some();
                out.instances.extend(i);
                (ok, &mut instance_table, out.instances.len())
            }
            Kind::Rule | Kind::Manifest | Kind::Adapter => continue,
        };
        table.push(entry(doc.raw, built.then(|| list_len - 1)));
    }

    // Bare envoyproxy/ratelimit files, once every handler they may take their backend from
    // is known.
    if !bare_files.is_empty() {
        let choice = file_backend(raws, &out.handlers, &handler_table, options);
        for doc in bare_files {
            if let Some(other) = same_domain(doc.raw, &docs) {
                diags.error(
                    &doc.raw.doc,
                    "domain",
                    format!(
                        "duplicate domain '{}' in config file (also in {other})",
                        domain_of(doc.raw).unwrap_or_default()
                    ),
                );
                continue;
            }
            let backend = match &choice {
                FileBackend::Default => None,
                FileBackend::Handler(b) => Some(b),
                FileBackend::Dropped(document) => {
                    diags.dependent(&doc.raw.doc, vec![document.clone()]);
                    handler_table.push(entry(doc.raw, None));
                    continue;
                }
                FileBackend::Error(message) => {
                    diags.error(&doc.raw.doc, "", message.clone());
                    continue;
                }
            };
            let translated =
                ratelimit::ratelimit(doc, registry, &vocabulary, default_ns, backend, diags);
            out.add(doc.raw, translated, &mut handler_table, &mut instance_table);
        }
    }

    let scope = Scope {
        vocabulary: &vocabulary,
        registry,
        default_namespace: default_ns,
        handlers: &out.handlers,
        handler_table: &handler_table,
        instances: &out.instances,
        instance_table: &instance_table,
        remote_routes: std::cell::RefCell::default(),
    };
    let mut rules = Vec::new();
    for (kind, doc) in &docs {
        if matches!(kind, Kind::Rule) {
            rules.extend(rule::rule(doc, &scope, diags));
        }
    }
    let remote_routes = scope.remote_routes.take();
    let Generated {
        mut handlers,
        instances,
        rules: generated_rules,
        names: generated,
        rate_limits,
    } = out;
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
    // Out-of-process handlers last: their adapter is told the instances rules send them.
    let notes = remote::compile(
        &docs,
        registry,
        &mut handlers,
        &instances,
        &rules,
        &remote_routes,
        diags,
    );
    Config {
        notes,
        vocabulary: Arc::new(vocabulary),
        default_namespace: Arc::from(default_ns),
        handlers,
        instances,
        rules,
        rate_limits,
        dropped: Vec::new(),
    }
}

/// Handlers, instances and the parts translated from envoyproxy/ratelimit's format.
#[derive(Default)]
struct Generated<'a> {
    handlers: Vec<HandlerConfig>,
    instances: Vec<InstanceConfig>,
    /// Rules translated from `ratelimitconfig` documents, added after the written ones.
    rules: Vec<RuleConfig>,
    /// The names they generated, checked for collisions at the end.
    names: Vec<(&'a RawDoc, &'static str, Arc<str>)>,
    rate_limits: Vec<RateLimitBehaviour>,
}

impl<'a> Generated<'a> {
    /// Adds what a `ratelimitconfig` (or a bare file) became, shifting its local indices;
    /// `None` (it had errors) names it in the handler table as invalid.
    fn add(
        &mut self,
        raw: &'a RawDoc,
        translated: Option<ratelimit::Translated>,
        handler_table: &mut Table,
        instance_table: &mut Table,
    ) {
        let Some(t) = translated else {
            handler_table.push(Entry {
                name: raw.name.clone(),
                namespace: raw.namespace.clone(),
                kind: raw.kind.clone(),
                index: None,
                document: raw.full_name().to_string(),
            });
            return;
        };
        let handler_index = self.handlers.len();
        let first_instance = self.instances.len();
        self.names.push((raw, "handler", t.handler.name.clone()));
        handler_table.push(Entry {
            name: raw.name.clone(),
            namespace: raw.namespace.clone(),
            kind: raw.kind.clone(),
            index: Some(handler_index),
            document: raw.full_name().to_string(),
        });
        self.handlers.push(t.handler);
        for (i, inst) in t.instances.into_iter().enumerate() {
            self.names.push((raw, "instance", inst.name.clone()));
            let short = inst.name.split('.').next().unwrap_or_default().to_string();
            instance_table.push(Entry {
                name: short,
                namespace: raw.namespace.clone(),
                kind: "quota".to_string(),
                index: Some(first_instance + i),
                document: raw.full_name().to_string(),
            });
            self.instances.push(inst);
        }
        for mut r in t.rules {
            self.names.push((raw, "rule", r.name.clone()));
            for a in &mut r.actions {
                a.handler = handler_index;
                for i in &mut a.instances {
                    *i += first_instance;
                }
            }
            self.rules.push(r);
        }
        for mut b in t.behaviours {
            b.instance += first_instance;
            self.rate_limits.push(b);
        }
    }
}

/// Where the limits of bare envoyproxy/ratelimit files are counted.
enum FileBackend {
    /// An in-memory memquota of their own (no memquota or redisquota handler in the config).
    Default,
    /// The adapter and params of this handler.
    Handler(ratelimit::Backend),
    /// The handler to take them from was dropped (its full name).
    Dropped(String),
    /// No single choice.
    Error(String),
}

/// Chooses the backend of bare envoyproxy/ratelimit files (see
/// [`ConfigOptions::ratelimit_backend`]).
fn file_backend(
    raws: &[RawDoc],
    handlers: &[HandlerConfig],
    handler_table: &Table,
    options: &ConfigOptions,
) -> FileBackend {
    let default_ns = options.default_namespace.as_str();
    let from = |i: usize| -> FileBackend {
        let h = &handlers[i];
        if !ratelimit::QUOTA_PARAM_ADAPTERS.contains(&h.adapter.as_str()) || h.is_remote() {
            return FileBackend::Error(format!(
                "--ratelimit-backend {} is a {} handler; envoyproxy/ratelimit files need a memquota or redisquota one",
                h.name, h.adapter
            ));
        }
        let mut params = h.params.clone();
        if let Some(map) = params.as_object_mut() {
            map.remove("quotas");
        }
        FileBackend::Handler(ratelimit::Backend {
            handler: h.name.to_string(),
            adapter: h.adapter.clone(),
            params,
            fail_policy: h.fail_policy,
        })
    };
    if let Some(reference) = &options.ratelimit_backend {
        return match handler_table.resolve(reference, default_ns, default_ns) {
            Resolution::Found(i) => from(i),
            Resolution::Invalid(document) => FileBackend::Dropped(document),
            Resolution::NotFound => FileBackend::Error(format!(
                "--ratelimit-backend {reference:?} names no handler of the config"
            )),
        };
    }
    // Every memquota or redisquota handler document, valid or not: a broken Redis handler
    // must not silently turn into per-process counting.
    let is_quota = |a: &str| ratelimit::QUOTA_PARAM_ADAPTERS.contains(&a);
    let written: Vec<&RawDoc> = raws
        .iter()
        .filter(|raw| {
            let adapter = ["compiledAdapter", "adapter"]
                .iter()
                .find_map(|k| raw.spec.get(*k).and_then(|v| v.as_str()));
            !raw.envoy_ratelimit
                && (raw.kind == "handler" && adapter.is_some_and(is_quota) || is_quota(&raw.kind))
        })
        .collect();
    match written.as_slice() {
        [] => FileBackend::Default,
        [raw] => match handler_table.resolve(
            &format!("{}.{}.{}", raw.name, raw.kind, raw.namespace),
            default_ns,
            default_ns,
        ) {
            Resolution::Found(i) => from(i),
            Resolution::Invalid(document) => FileBackend::Dropped(document),
            Resolution::NotFound => FileBackend::Dropped(raw.full_name().to_string()),
        },
        several => FileBackend::Error(format!(
            "several quota handlers could count the limits of envoyproxy/ratelimit files ({}); choose one with --ratelimit-backend",
            several
                .iter()
                .map(|r| r.full_name().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// A `ratelimitconfig` domain as written.
fn domain_of(raw: &RawDoc) -> Option<&str> {
    raw.spec.get("domain").and_then(|d| d.as_str())
}

/// The file of another rate limit document with the same domain as the bare file `raw`
/// (envoyproxy/ratelimit refuses two files of one domain).
fn same_domain<'a>(raw: &RawDoc, docs: &'a [(Kind, Doc<'_>)]) -> Option<&'a str> {
    let domain = domain_of(raw)?;
    docs.iter()
        .take_while(|(_, d)| d.raw.doc.id != raw.doc.id)
        .chain(
            docs.iter()
                .filter(|(_, d)| !d.raw.envoy_ratelimit && d.raw.doc.id > raw.doc.id),
        )
        .find(|(kind, d)| matches!(kind, Kind::RateLimit) && domain_of(d.raw) == Some(domain))
        .map(|(_, d)| d.raw.doc.file.as_str())
}

#[cfg(test)]
mod tests;
