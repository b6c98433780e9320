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
