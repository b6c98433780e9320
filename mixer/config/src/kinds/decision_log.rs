//! `decisionlog` instances: what the mixer logs of each decision it makes (OPA's decision
//! log, in Istio's shapes). The mixer fills the record itself, so the params say only how
//! much to log (sampling) and what to leave out (masking); the instance reaches its handler as
//! a `logentry`, so any report handler that takes log entries can write it.

use std::sync::Arc;

use mixer_model::{Template, Vocabulary};
use serde_json::Value;

use super::Doc;
use crate::document::{as_map, check_keys, list, type_name};
use crate::error::{Diagnostics, did_you_mean, join};
use crate::model::{AttributeSelector, DecisionLogParams, InstanceConfig};

/// The template name a decision log instance is written with.
pub const DECISION_LOG_TEMPLATE: &str = "decisionlog";

/// Validates the params of a `decisionlog` instance into an instance the runtime fills with
/// decision records (see [`InstanceConfig::decision_log`]).
pub(crate) fn decision_log_instance(
    doc: &Doc<'_>,
    params: &Value,
    path: &str,
    vocabulary: &Vocabulary,
    diags: &mut Diagnostics,
) -> Option<InstanceConfig> {
    let raw = doc.raw;
    let before = diags.errors.len();
    let map = as_map(params, path, &raw.doc, diags)?;
    check_keys(
        &map,
        &["percentSampled", "alwaysLogDenials", "drop", "hash"],
        path,
        &raw.doc,
        diags,
    );
    let mut out = DecisionLogParams::default();
    match map.get("percentSampled") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.as_f64().is_some_and(|p| (0.0..=100.0).contains(&p)) => {
            out.percent_sampled = n.as_f64().unwrap_or(100.0);
        }
        Some(other) => diags.error(
            &raw.doc,
            join(path, "percentSampled"),
            format!("expected a percentage from 0 to 100, found {other}"),
        ),
    }
    match map.get("alwaysLogDenials") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => out.always_log_denials = *b,
        Some(other) => diags.error(
            &raw.doc,
            join(path, "alwaysLogDenials"),
            format!("expected true or false, found {}", type_name(other)),
        ),
    }
    for (key, into) in [("drop", &mut out.drop), ("hash", &mut out.hash)] {
        let here = join(path, key);
        for (i, item) in list(map.get(key), &here, &raw.doc, diags)
            .iter()
            .enumerate()
        {
            let field = format!("{here}[{i}]");
            let Value::String(name) = item else {
                diags.error(
                    &raw.doc,
                    field,
                    format!(
                        "expected an attribute name (or attribute[key]), found {}",
                        type_name(item)
                    ),
                );
                continue;
            };
            match selector(name, vocabulary) {
                Ok(s) => into.push(s),
                Err(message) => diags.error(&raw.doc, field, message),
            }
        }
    }
    if diags.errors.len() > before {
        return None;
    }
    Some(InstanceConfig {
        name: raw.full_name(),
        namespace: Arc::from(raw.namespace.as_str()),
        template: Template::LogEntry,
        fields: Vec::new(),
        bindings: Vec::new(),
        decision_log: Some(Arc::new(out)),
    })
}

/// `request.headers[x-user]` or `source.user`, against the config's vocabulary.
fn selector(text: &str, vocabulary: &Vocabulary) -> Result<AttributeSelector, String> {
    let (name, key) = match text.split_once('[') {
        Some((name, rest)) => match rest.strip_suffix(']') {
            Some(key) if !key.is_empty() => (name, Some(Arc::from(key.to_ascii_lowercase()))),
            _ => return Err(format!("{text:?}: expected attribute[key]")),
        },
        None => (text, None),
    };
    let Some(attr) = vocabulary.lookup(name) else {
        let hint = did_you_mean(name, vocabulary.iter().map(|(_, info)| &*info.name));
        return Err(format!("unknown attribute {name:?}{hint}"));
    };
    if key.is_some() && vocabulary.value_type(attr) != Some(mixer_model::ValueType::StringMap) {
        return Err(format!(
            "attribute {name} is not a map: only a STRING_MAP has keys to mask"
        ));
    }
    Ok(AttributeSelector { attr, key })
}

#[cfg(test)]
mod tests {
    use crate::kinds::test_support::run;

    fn load(params: &str) -> Result<crate::Config, Vec<String>> {
        let text = format!(
            "kind: handler\nmetadata: {{name: out}}\nspec: {{compiledAdapter: noop}}\n---\nkind: instance\nmetadata: {{name: decisions}}\nspec:\n  compiledTemplate: decisionlog\n  params: {params}\n---\nkind: rule\nmetadata: {{name: log}}\nspec:\n  actions: [{{handler: out, instances: [decisions]}}]\n"
        );
        run(&text).map(|v| v.config)
    }

    #[test]
    fn a_decisionlog_instance_is_a_logentry_the_mixer_fills() {
        let config = load(
            "{percentSampled: 10, alwaysLogDenials: false, drop: ['request.headers[Cookie]'], hash: [source.user]}",
        )
        .expect("valid");
        let instance = &config.instances[0];
        assert_eq!(instance.template, mixer_model::Template::LogEntry);
        let params = instance.decision_log.as_deref().expect("a decision log");
        assert_eq!(params.percent_sampled, 10.0);
        assert!(!params.always_log_denials);
        let headers = config.vocabulary.lookup("request.headers").expect("known");
        assert!(params.drop[0].selects(headers, Some("cookie")));
        assert!(!params.drop[0].selects(headers, Some("x-user")));
        let user = config.vocabulary.lookup("source.user").expect("known");
        assert!(params.hash[0].selects(user, None));
        // `/config_dump` shows it as written.
        let dump = config.dump();
        assert_eq!(dump["instances"][0]["template"], "decisionlog");
        assert_eq!(
            dump["instances"][0]["decisionLog"]["drop"][0],
            "request.headers[cookie]"
        );
        assert_eq!(dump["instances"][0]["decisionLog"]["percentSampled"], 10.0);
    }

    #[test]
    fn a_decision_log_rule_takes_no_part_in_decisions() {
        let text = "kind: handler\nmetadata: {name: out}\nspec: {compiledAdapter: noop}\n---\nkind: instance\nmetadata: {name: decisions}\nspec: {compiledTemplate: decisionlog}\n---\nkind: instance\nmetadata: {name: nothing}\nspec: {compiledTemplate: checknothing}\n---\nkind: rule\nmetadata: {name: log}\nspec:\n  actions: [{handler: out, instances: [decisions, nothing]}]\n";
        let errors = run(text).map(|_| ()).expect_err("invalid");
        assert_eq!(
            errors,
            [
                "c.yaml: rule log: spec.actions: a rule that sends a decisionlog instance sends nothing else and edits no header: decisions are logged after they are made (give the other instances their own rule)"
            ]
        );
        // A handler that takes no log entries is named with the template as written.
        let text = "kind: handler\nmetadata: {name: out}\nspec: {compiledAdapter: denier}\n---\nkind: instance\nmetadata: {name: decisions}\nspec: {compiledTemplate: decisionlog}\n---\nkind: rule\nmetadata: {name: log}\nspec:\n  actions: [{handler: out, instances: [decisions]}]\n";
        let errors = run(text).map(|_| ()).expect_err("invalid");
        assert!(
            errors[0].contains("is of template decisionlog, which handler out.handler.istio-system (adapter denier) does not support"),
            "{errors:?}"
        );
    }

    #[test]
    fn bad_params_are_named() {
        let errors = load("{percentSampled: 150, drop: [source.usr, 'source.user[x]'], level: 1}")
            .expect_err("invalid");
        let all = errors.join("\n");
        assert!(
            all.contains(
                "spec.params.percentSampled: expected a percentage from 0 to 100, found 150"
            ),
            "{all}"
        );
        assert!(
            all.contains(
                "spec.params.drop[0]: unknown attribute \"source.usr\" (did you mean source.user?)"
            ),
            "{all}"
        );
        assert!(
            all.contains("spec.params.drop[1]: attribute source.user is not a map"),
            "{all}"
        );
        assert!(all.contains("spec.params.level"), "{all}");
    }
}
