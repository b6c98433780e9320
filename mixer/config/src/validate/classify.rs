//! What each document is: its kind (sorted into the categories names are unique in) and its
//! expression language.

use mixer_model::Template;

use super::LANG_ANNOTATION;
use crate::document::RawDoc;
use crate::error::{Diagnostics, did_you_mean, join};
use crate::expr::Syntax;
use crate::registry::AdapterRegistry;

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
pub(super) enum Category {
    Adapter,
    Handler,
    Instance,
    Rule,
    Manifest,
    RateLimit,
}

impl Category {
    pub(super) fn label(self) -> &'static str {
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

pub(super) enum Kind {
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
    pub(super) fn category(&self) -> Category {
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

pub(super) fn classify(
    raw: &RawDoc,
    registry: &AdapterRegistry,
    diags: &mut Diagnostics,
) -> Option<Kind> {
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

pub(super) fn syntax(raw: &RawDoc, default: Syntax, diags: &mut Diagnostics) -> Syntax {
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
