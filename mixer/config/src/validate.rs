//! The whole pass: parse every file, sort documents by kind, extend the vocabulary, then
//! validate handlers, instances and rules in that order, collecting every problem.

use std::collections::HashMap;
use std::sync::Arc;

use mixer_adapter_api::AdapterRegistry;
use mixer_model::{Template, Vocabulary};

use crate::document::{RawDoc, parse_file};
use crate::error::{ConfigError, Diagnostics, did_you_mean, join};
use crate::expr::Syntax;
use crate::kinds::rule::Scope;
use crate::kinds::{Doc, adapter, handler, instance, manifest, ratelimit, rule};
use crate::model::Config;
use crate::resolve::{Entry, Table};
use crate::source::SourceFile;
use crate::{ConfigOptions, Validated};

/// The annotation choosing a document's expression language.
pub const LANG_ANNOTATION: &str = "policy.istio.io/lang";

/// The kinds this crate reads besides legacy adapter and template kinds.
const KINDS: [&str; 6] = [
    "adapter",
    "handler",
    "instance",
    "rule",
    "attributemanifest",
    "ratelimitconfig",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Category {
    Adapter,
    Handler,
    Instance,
    Rule,
    Manifest,
    RateLimit,
}

impl Category {
    fn label(self) -> &'static str {
        match self {
            Category::Adapter => "adapter",
            Category::Handler => "handler",
            Category::Instance => "instance",
            Category::Rule => "rule",
            Category::Manifest => "attributemanifest",
            Category::RateLimit => "ratelimitconfig",
        }
    }
}

enum Kind {
    Adapter,
    Handler,
    LegacyHandler,
    Instance,
    LegacyInstance(Template),
    Rule,
    Manifest,
    RateLimit,
}

impl Kind {
    fn category(&self) -> Category {
        match self {
            Kind::Adapter => Category::Adapter,
            Kind::Handler | Kind::LegacyHandler => Category::Handler,
            Kind::Instance | Kind::LegacyInstance(_) => Category::Instance,
            Kind::Rule => Category::Rule,
            Kind::Manifest => Category::Manifest,
            Kind::RateLimit => Category::RateLimit,
        }
    }
}

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

fn classify(raw: &RawDoc, registry: &AdapterRegistry, diags: &mut Diagnostics) -> Option<Kind> {
    let kind = raw.kind.as_str();
    Some(match kind {
        "adapter" => Kind::Adapter,
        "handler" => Kind::Handler,
        "instance" => Kind::Instance,
        "rule" => Kind::Rule,
        "attributemanifest" => Kind::Manifest,
        "ratelimitconfig" => Kind::RateLimit,
        // Istio's client config, read by Pilot and the proxies, often sits in the same files
        // as the mixer's (the rate limit task puts QuotaSpec next to the memquota handler).
        "QuotaSpec" | "QuotaSpecBinding" | "HTTPAPISpec" | "HTTPAPISpecBinding" => {
            diags.warn(
                &raw.doc,
                "kind",
                format!("{kind} is proxy-side client config (read by Pilot), ignored by the mixer"),
            );
            return None;
        }
        // Istio 1.4 shipped a `template` document (the template's descriptor) beside every
        // out-of-process adapter's config. The mixer's templates are built in.
        "template" => {
            let builtin = Template::from_name(&raw.name)
                .or_else(|| Template::from_name(raw.name.split('.').next().unwrap_or_default()));
            match builtin {
                Some(t) => diags.warn(
                    &raw.doc,
                    "kind",
                    format!(
                        "template {} is built into the mixer; its descriptor is not needed and is ignored",
                        t.name()
                    ),
                ),
                None => diags.error(
                    &raw.doc,
                    "metadata.name",
                    format!(
                        "template {:?} is not one of the mixer's templates ({}); custom templates are not supported",
                        raw.name,
                        Template::ALL.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ")
                    ),
                ),
            }
            return None;
        }
        _ if registry.get(kind).is_some() => Kind::LegacyHandler,
        _ => match Template::from_name(kind) {
            Some(t) => Kind::LegacyInstance(t),
            None => {
                let known = KINDS
                    .into_iter()
                    .chain(registry.names())
                    .chain(Template::ALL.iter().map(|t| t.name()));
                let hint = did_you_mean(kind, known);
                let hint = if hint.is_empty() {
                    " (expected handler, instance, rule, attributemanifest, ratelimitconfig, adapter, an adapter name or a template name)".to_string()
                } else {
                    hint
                };
                diags.error(&raw.doc, "kind", format!("unknown kind {kind:?}{hint}"));
                return None;
            }
        },
    })
}

fn syntax(raw: &RawDoc, default: Syntax, diags: &mut Diagnostics) -> Syntax {
    let Some(lang) = raw.annotations.get(LANG_ANNOTATION) else {
        return default;
    };
    match Syntax::from_annotation(lang.trim()) {
        Some(s) => s,
        None => {
            diags.error(
                &raw.doc,
                join("metadata.annotations", LANG_ANNOTATION),
                format!("unknown expression language {lang:?} (expected CEL, CEXL or COMPAT)"),
            );
            default
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::kinds::test_support::{errors, ok, registry};
    use crate::{ConfigOptions, SourceFile, Syntax};

    #[test]
    fn collects_every_error_not_just_the_first() {
        let e = errors(
            "kind: handler\nmetadata: {name: h}\nspec: {compiledAdapter: denier, params: {validDuration: soon}}\n---\nkind: instance\nmetadata: {name: i}\nspec: {compiledTemplate: checknothng}\n---\nkind: rule\nmetadata: {name: r}\nspec: {match: 'source.namespace == \"x\"', actons: []}\n",
        );
        assert_eq!(
            e,
            [
                "c.yaml: handler h: spec.params.validDuration: \"soon\" is not a duration such as \"5s\"",
                "c.yaml: instance i: spec.compiledTemplate: unknown template \"checknothng\" (did you mean checknothing?)",
                "c.yaml: rule r: spec.actons: unknown field (did you mean actions?)",
            ]
        );
    }

    #[test]
    fn duplicates_unknown_kinds_and_languages() {
        assert_eq!(
            errors(
                "kind: rule\nmetadata: {name: r}\n---\nkind: rule\nmetadata: {name: r, namespace: istio-system}\n---\nkind: rule\nmetadata: {name: r, namespace: other}\n---\nkind: rul\nmetadata: {name: x}\n---\nkind: rule\nmetadata: {name: l, annotations: {policy.istio.io/lang: CELL}}\n"
            ),
            [
                "c.yaml: rule r: metadata.name: duplicate rule \"r\" in namespace istio-system (first defined in c.yaml)",
                "c.yaml: rul x: kind: unknown kind \"rul\" (did you mean rule?)",
                "c.yaml: rule l: metadata.annotations.policy.istio.io/lang: unknown expression language \"CELL\" (expected CEL, CEXL or COMPAT)",
            ]
        );
        // A legacy handler and a handler of the same name collide too.
        let e = errors(
            "kind: denier\nmetadata: {name: d}\n---\nkind: handler\nmetadata: {name: d}\nspec: {compiledAdapter: noop}\n",
        );
        assert_eq!(e.len(), 1);
        assert!(e[0].contains("duplicate handler \"d\""), "{e:?}");
    }

    #[test]
    fn language_annotation_and_default_syntax() {
        let v = ok(
            "kind: rule\nmetadata:\n  name: r\n  annotations: {policy.istio.io/lang: CEL}\nspec: {match: 'source.namespace == \"x\"'}\n",
        );
        assert_eq!(v.config.rules.len(), 1);
        let options = ConfigOptions {
            default_namespace: "mesh".into(),
            default_syntax: Syntax::Cexl,
        };
        let v = crate::validate(
            &[SourceFile::new(
                "a.yaml",
                "kind: rule\nmetadata: {name: r}\nspec: {}\n",
            )],
            &registry(),
            &options,
        )
        .expect("valid");
        assert_eq!(&*v.config.rules[0].name, "r.mesh");
        assert_eq!(&*v.config.default_namespace, "mesh");
    }

    #[test]
    fn files_are_validated_together_with_their_own_names() {
        let sources = [
            SourceFile::new(
                "handlers.yaml",
                "kind: handler\nmetadata: {name: d}\nspec: {compiledAdapter: denier}\n",
            ),
            SourceFile::new(
                "rules/r.yaml",
                "kind: rule\nmetadata: {name: r}\nspec:\n  actions: [{handler: d, instances: [i]}]\n",
            ),
            SourceFile::new("bad.yaml", "kind: instance\nmetadata: {name: i\n"),
        ];
        let e = crate::validate(&sources, &registry(), &ConfigOptions::default()).expect_err("bad");
        assert_eq!(e.len(), 2, "{e:#?}");
        assert!(
            e[0].to_string().starts_with("bad.yaml: document 1: line "),
            "{}",
            e[0]
        );
        assert_eq!(
            e[1].to_string(),
            "rules/r.yaml: rule r: spec.actions[0].instances[0]: unknown instance \"i\": no instance by that name"
        );
    }

    #[test]
    fn istio_1_4_style_config_validates() {
        let yaml = r#"
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata:
  name: denycurl
  namespace: istio-system
spec:
  compiledAdapter: denier
  params:
    status:
      code: 7
      message: Not allowed
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata:
  name: denyrequest
  namespace: istio-system
spec:
  compiledTemplate: checknothing
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata:
  name: denycurl
  namespace: istio-system
  annotations:
    policy.istio.io/lang: CEXL
spec:
  match: match(request.headers["user-agent"] | "", "curl*") && source.namespace == "bad"
  actions:
  - handler: denycurl
    instances: [denyrequest]
"#;
        let v = ok(yaml);
        assert_eq!(v.config.handlers.len(), 1);
        assert_eq!(v.config.instances.len(), 1);
        assert_eq!(v.config.rules.len(), 1);
        // The header has a default; source.namespace has none.
        let warnings: Vec<String> = v.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            warnings,
            [
                "c.yaml: rule denycurl: spec.match: can fail when source.namespace is absent; Istio treats that as no match (add a \"|\" default or set matchErrorPolicy)"
            ]
        );
        let dump = v.config.dump();
        assert_eq!(dump["handlers"][0]["adapter"], "denier");
        assert_eq!(dump["instances"][0]["template"], "checknothing");
        assert_eq!(
            dump["rules"][0]["actions"][0]["handler"],
            "denycurl.istio-system"
        );
    }

    #[test]
    fn legacy_kinds_resolve_by_kind_qualified_names() {
        let v = ok(
            "kind: denier\nmetadata: {name: deny}\nspec: {status: {code: 7}}\n---\nkind: checknothing\nmetadata: {name: nothing}\n---\nkind: rule\nmetadata: {name: r, namespace: default}\nspec:\n  actions: [{handler: deny.denier.istio-system, instances: [nothing.checknothing]}]\n",
        );
        let a = &v.config.rules[0].actions[0];
        assert_eq!((a.handler, a.instances.as_slice()), (0, &[0][..]));
    }

    #[test]
    fn empty_input_is_an_empty_config() {
        let v = ok("");
        assert!(v.config.handlers.is_empty() && v.config.rules.is_empty());
        assert_eq!(
            crate::Config::empty().vocabulary.len(),
            v.config.vocabulary.len()
        );
    }
}
