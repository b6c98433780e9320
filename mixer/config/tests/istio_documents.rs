//! Istio 1.4 documents that sit beside the mixer's config and are not the mixer's to act on:
//! they load with a warning, so Istio bundles load unchanged.

use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile, validate};

#[test]
fn templates_the_mixer_has_are_ignored_with_a_warning() {
    let yaml = r#"
apiVersion: config.istio.io/v1alpha2
kind: template
metadata: {name: metric, namespace: istio-system}
spec: {descriptor: "CrQBCg1tZXRyaWMucHJvdG8="}
---
apiVersion: config.istio.io/v1alpha2
kind: template
metadata: {name: authorization.istio-system, namespace: istio-system}
spec: {descriptor: ""}
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: nothing, namespace: istio-system}
spec: {match: "true"}
"#;
    let validated = validate(
        &[SourceFile::new("bundle.yaml", yaml)],
        &AdapterRegistry::new(),
        &ConfigOptions::default(),
    )
    .unwrap_or_else(|e| panic!("the bundle loads: {e:?}"));
    assert_eq!(validated.config.rules.len(), 1);
    let warnings: Vec<String> = validated.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(
        warnings[0].contains("template metric is built into the mixer"),
        "{warnings:#?}"
    );
    assert!(
        warnings[1].contains("template authorization is built into the mixer"),
        "{warnings:#?}"
    );
}
