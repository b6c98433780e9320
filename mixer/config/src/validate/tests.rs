//! The whole pass end to end: every problem collected, names, kinds, languages and the
//! default namespace, files validated together.

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
        ..ConfigOptions::default()
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
    assert_eq!(&*v.config.rules[0].name, "r.rule.mesh");
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
        "denycurl.handler.istio-system"
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

fn skip(files: &[(&str, &str)]) -> Result<crate::Validated, Vec<String>> {
    let sources: Vec<SourceFile> = files.iter().map(|(n, t)| SourceFile::new(*n, *t)).collect();
    let options = ConfigOptions {
        invalid_config: crate::InvalidConfig::Skip,
        ..ConfigOptions::default()
    };
    crate::validate(&sources, &registry(), &options)
        .map_err(|errs| errs.iter().map(ToString::to_string).collect())
}

/// Istio 1.4's rules (mixer/pkg/runtime/config/ephemeral.go, processRuleConfigs): an action
/// loses an instance that is invalid and is elided when its handler is, or when no instance is
/// left; a rule with no action left (and no header operation) is elided.
const PARTLY_INVALID: &str = r#"
kind: handler
metadata: {name: deny}
spec: {compiledAdapter: denier}
---
kind: handler
metadata: {name: broken}
spec: {compiledAdapter: denier, params: {status: {code: 99}}}
---
kind: denier
metadata: {name: oldbroken}
spec: {status: {code: 99}}
---
kind: instance
metadata: {name: nothing}
spec: {compiledTemplate: checknothing}
---
kind: instance
metadata: {name: bad}
spec: {compiledTemplate: checknothing, params: {nope: 1}}
---
kind: attributemanifest
metadata: {name: extra}
spec:
  attributes:
    my.attr: {valueType: STRING}
    bad.attr: {valueType: NOPE}
---
kind: rule
metadata: {name: only-broken}
spec: {actions: [{handler: broken, instances: [nothing]}]}
---
kind: rule
metadata: {name: one-of-two}
spec:
  actions:
  - {handler: deny, instances: [nothing]}
  - {handler: broken, instances: [nothing]}
---
kind: rule
metadata: {name: only-bad-instance}
spec: {actions: [{handler: deny, instances: [bad]}]}
---
kind: rule
metadata: {name: bad-and-good-instance}
spec: {actions: [{handler: deny, instances: [bad, nothing]}]}
---
kind: rule
metadata: {name: old-style}
spec: {actions: [{handler: oldbroken.denier, instances: [nothing]}]}
---
kind: rule
metadata: {name: bad-match}
spec: {match: 'source.nmespace == "x"', actions: [{handler: deny, instances: [nothing]}]}
---
kind: rule
metadata: {name: needs-manifest}
spec: {match: 'my.attr == "x"', actions: [{handler: deny, instances: [nothing]}]}
"#;

#[test]
fn skip_drops_invalid_documents_and_what_needs_them() {
    let v = skip(&[("c.yaml", PARTLY_INVALID)]).expect("served");
    let dropped: Vec<String> = v.config.dropped.iter().map(ToString::to_string).collect();
    assert_eq!(
        dropped,
        [
            "broken.handler.istio-system (c.yaml): invalid: spec.params.status.code: 99 is not a status code (0-16 or a name such as PERMISSION_DENIED)",
            "oldbroken.denier.istio-system (c.yaml): invalid: spec.status.code: 99 is not a status code (0-16 or a name such as PERMISSION_DENIED)",
            "bad.instance.istio-system (c.yaml): invalid: spec.params.nope: unknown field: template checknothing has no fields",
            "extra.attributemanifest.istio-system (c.yaml): invalid: spec.attributes.bad.attr.valueType: unknown value type \"NOPE\"",
            "only-broken.rule.istio-system (c.yaml): depends on dropped broken.handler.istio-system",
            "only-bad-instance.rule.istio-system (c.yaml): depends on dropped bad.instance.istio-system",
            "old-style.rule.istio-system (c.yaml): depends on dropped oldbroken.denier.istio-system",
            "bad-match.rule.istio-system (c.yaml): invalid: spec.match: unknown attribute \"source.nmespace\" (did you mean source.namespace?)",
            "needs-manifest.rule.istio-system (c.yaml): invalid: spec.match: unknown attribute \"my.attr\"",
        ]
    );
    let reasons: Vec<&str> = v.config.dropped.iter().map(|d| d.reason_label()).collect();
    assert_eq!(
        reasons,
        [
            "invalid",
            "invalid",
            "invalid",
            "invalid",
            "dependency",
            "dependency",
            "dependency",
            "invalid",
            "invalid"
        ]
    );
    let c = &v.config;
    let rules: Vec<(&str, usize)> = c
        .rules
        .iter()
        .map(|r| (&*r.name, r.actions.len()))
        .collect();
    assert_eq!(
        rules,
        [
            ("one-of-two.rule.istio-system", 1),
            ("bad-and-good-instance.rule.istio-system", 1)
        ]
    );
    let kept = &c.rules[1].actions[0];
    assert_eq!(
        &*c.instances[kept.instances[0]].name,
        "nothing.instance.istio-system"
    );
    assert_eq!(kept.instances.len(), 1);
    let warnings: Vec<String> = v.warnings.iter().map(ToString::to_string).collect();
    assert!(
        warnings.contains(&"c.yaml: rule one-of-two: spec.actions[1]: action left out: it needs dropped broken.handler.istio-system".to_string()),
        "{warnings:#?}"
    );
    assert!(
        warnings.contains(&"c.yaml: rule bad-and-good-instance: spec.actions[0].instances[0]: instance left out of the action: bad.instance.istio-system was dropped".to_string()),
        "{warnings:#?}"
    );
}

#[test]
fn refuse_is_the_default_and_reports_the_same_errors() {
    // One pass: the documents' own errors (needs-manifest compiles while the manifest's
    // valid attribute is still there).
    let e = errors(PARTLY_INVALID);
    let documents: Vec<&str> = e
        .iter()
        .map(|e| e.split(':').nth(1).unwrap_or(""))
        .collect();
    assert_eq!(
        documents,
        [
            " attributemanifest extra",
            " handler broken",
            " denier oldbroken",
            " instance bad",
            " rule bad-match"
        ],
        "{e:#?}"
    );
}

#[test]
fn skip_names_unparsable_documents_and_keeps_refusing_when_no_rule_is_left() {
    let good = "kind: handler\nmetadata: {name: deny}\nspec: {compiledAdapter: denier}\n---\nkind: instance\nmetadata: {name: nothing}\nspec: {compiledTemplate: checknothing}\n---\nkind: rule\nmetadata: {name: r}\nspec: {actions: [{handler: deny, instances: [nothing]}]}\n";
    let v = skip(&[
        ("good.yaml", good),
        ("bad.yaml", "kind: rule\nmetadata: [1\n"),
    ])
    .expect("served");
    let dropped: Vec<String> = v.config.dropped.iter().map(|d| d.name.clone()).collect();
    assert_eq!(dropped, ["bad.yaml: document 1"]);
    assert_eq!(v.config.rules.len(), 1);
    // Every rule dropped: refused, with every error and why.
    let only_broken = "kind: rule\nmetadata: {name: r}\nspec: {actions: [{handler: nope, instances: [nothing]}]}\n";
    let e = skip(&[("r.yaml", only_broken)]).expect_err("nothing left");
    assert_eq!(
        e,
        [
            "r.yaml: rule r: spec.actions[0].handler: unknown handler \"nope\": no handler by that name",
            "r.yaml: rule r: spec.actions[0].instances[0]: unknown instance \"nothing\": no instance by that name",
            "r.yaml: no rule is left once the 1 invalid or dependent documents are dropped; the config is refused",
        ]
    );
}
