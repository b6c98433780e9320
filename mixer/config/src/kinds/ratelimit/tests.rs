use std::sync::{Arc, Mutex};

use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, AdapterRegistry, BuildContext, Handler, ParamError, Params,
    Stability,
};
use mixer_model::Template;

use crate::{ConfigOptions, SourceFile, Validated};

/// Named like memquota; records the params it validates.
struct FakeMemquota(Arc<Mutex<Vec<Params>>>);

static INFO: AdapterInfo = AdapterInfo {
    name: "memquota",
    description: "records params",
    templates: &[Template::Quota],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for FakeMemquota {
    fn info(&self) -> &AdapterInfo {
        &INFO
    }
    fn validate(&self, params: &Params) -> Result<(), Vec<ParamError>> {
        self.0.lock().expect("lock").push(params.clone());
        if params.get("bad").is_some() {
            return Err(vec![ParamError::new("bad", "not allowed")]);
        }
        Ok(())
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        unreachable!("not built here")
    }
}

fn run(yaml: &str) -> (Result<Validated, Vec<String>>, Vec<Params>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_denier::Denier));
    registry.register(Arc::new(mixer_adapter_noop::Noop));
    registry.register(Arc::new(FakeMemquota(seen.clone())));
    let result = crate::validate(
        &[SourceFile::new("rl.yaml", yaml)],
        &registry,
        &ConfigOptions::default(),
    )
    .map_err(|errs| errs.iter().map(ToString::to_string).collect());
    let params = seen.lock().expect("lock").clone();
    (result, params)
}

fn ok(yaml: &str) -> (Validated, Vec<Params>) {
    match run(yaml) {
        (Ok(v), p) => (v, p),
        (Err(e), _) => panic!("unexpected errors: {e:#?}"),
    }
}

fn errors(yaml: &str) -> Vec<String> {
    match run(yaml).0 {
        Ok(_) => panic!("expected errors"),
        Err(e) => e,
    }
}

const MESSAGING: &str = r#"
kind: ratelimitconfig
metadata: {name: msg}
spec:
  domain: messaging
  descriptors:
  - key: message_type
    value: marketing
    descriptors:
    - key: to_number
      shadow_mode: true
      rate_limit: {unit: day, requests_per_unit: 5, name: marketing}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: Second, requests_per_unit: 0}
  - key: remote_address
    value: "10.*"
    rate_limit: {unit: minute, requests_per_unit: 7}
  - key: ldap
    rate_limit: {unlimited: true}
  - key: whitelisted
"#;

#[test]
fn translates_to_one_handler_and_an_instance_and_rule_per_limit() {
    let (v, params) = ok(MESSAGING);
    let c = &v.config;
    assert_eq!(c.handlers.len(), 1);
    let h = &c.handlers[0];
    assert_eq!(&*h.name, "msg.istio-system");
    assert_eq!(h.adapter, "memquota");
    assert_eq!(params.last(), Some(&h.params));
    assert_eq!(
        h.params,
        serde_json::json!({"quotas": [
            {"name": "msg-message_type-marketing-to_number.istio-system", "maxAmount": 5, "validDuration": "86400s", "shadowMode": true},
            {"name": "msg-to_number.istio-system", "maxAmount": 100, "validDuration": "86400s", "shadowMode": false},
            {"name": "msg-remote_address.istio-system", "maxAmount": 10, "validDuration": "1s", "shadowMode": false},
            {"name": "msg-remote_address-50_0_0_5.istio-system", "maxAmount": 0, "validDuration": "1s", "shadowMode": false},
            {"name": "msg-remote_address-10__any.istio-system", "maxAmount": 7, "validDuration": "60s", "shadowMode": false},
        ]})
    );
    let names: Vec<&str> = c.instances.iter().map(|i| &*i.name).collect();
    assert_eq!(
        names,
        [
            "msg-message_type-marketing-to_number.istio-system",
            "msg-to_number.istio-system",
            "msg-remote_address.istio-system",
            "msg-remote_address-50_0_0_5.istio-system",
            "msg-remote_address-10__any.istio-system",
        ]
    );
    let matches: Vec<&str> = c
        .rules
        .iter()
        .map(|r| r.match_expr.as_ref().map_or("", |e| e.source()))
        .collect();
    assert_eq!(
        matches,
        [
            r#"ratelimit.domain == "messaging" && ratelimit.descriptor_keys == "message_type.to_number" && ratelimit.descriptor["message_type"] == "marketing" && "to_number" in ratelimit.descriptor"#,
            r#"ratelimit.domain == "messaging" && ratelimit.descriptor_keys == "to_number" && "to_number" in ratelimit.descriptor"#,
            r#"ratelimit.domain == "messaging" && ratelimit.descriptor_keys == "remote_address" && !(ratelimit.descriptor["remote_address"] in ["50.0.0.5"]) && !ratelimit.descriptor["remote_address"].startsWith("10.")"#,
            r#"ratelimit.domain == "messaging" && ratelimit.descriptor_keys == "remote_address" && ratelimit.descriptor["remote_address"] == "50.0.0.5""#,
            r#"ratelimit.domain == "messaging" && ratelimit.descriptor_keys == "remote_address" && ratelimit.descriptor["remote_address"].startsWith("10.") && !(ratelimit.descriptor["remote_address"] in ["50.0.0.5"])"#,
        ]
    );
    for (i, r) in c.rules.iter().enumerate() {
        assert_eq!(r.actions[0].handler, 0);
        assert_eq!(r.actions[0].instances, [i]);
        assert_eq!(r.name, c.instances[i].name);
        // Every rule can be found by literal.
        let constraints = r.match_expr.as_ref().expect("match").equality_constraints();
        assert!(constraints.len() >= 2, "{constraints:?}");
    }
    // Dimensions: one per entry of the path.
    let crate::FieldExprValue::Map(dims) = &c.instances[0].fields[0].value else {
        panic!("map")
    };
    let dims: Vec<(&str, &str)> = dims.iter().map(|(k, e)| (&**k, e.source())).collect();
    assert_eq!(
        dims,
        [
            ("message_type", r#"ratelimit.descriptor["message_type"]"#),
            ("to_number", r#"ratelimit.descriptor["to_number"]"#),
        ]
    );
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
}

#[test]
fn other_backends_keep_their_params_and_rules_can_name_the_handler() {
    let (v, _) = ok(
        "kind: ratelimitconfig\nmetadata: {name: rl, namespace: team}\nspec:\n  domain: d\n  failPolicy: CLOSED\n  backend: {adapter: noop}\n  descriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 1}}]\n---\nkind: rule\nmetadata: {name: also, namespace: team}\nspec:\n  actions: [{handler: rl, instances: [rl-k]}]\n",
    );
    let h = &v.config.handlers[0];
    assert_eq!(h.adapter, "noop");
    assert!(h.params.is_null());
    assert_eq!(h.fail_policy, Some(mixer_adapter_api::FailPolicy::Closed));
    assert_eq!(v.config.rules.len(), 2);
    let warnings: Vec<String> = v.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "rl.yaml: ratelimitconfig rl: metadata.namespace: rules outside namespace istio-system only apply to requests of namespace team; rate limit service requests carry no namespace"
        ]
    );
}

#[test]
fn errors_have_field_paths() {
    let e = errors(
        r#"
kind: ratelimitconfig
metadata: {name: rl}
spec:
  domian: d
  backend: {adapter: noop}
  descriptors:
  - key: a
    rate_limit: {unit: fortnight, requests_per_unit: -1}
  - value: x
  - key: a
    descriptors:
    - key: b
      rate_limit: {unit: second, requests_per_second: 3}
    - key: b
      rate_limit: {unlimited: true, unit: second}
  - key: c
    rate_limit: {unit: month, requests_per_unit: 1, replaces: [{name: x}]}
"#,
    );
    assert_eq!(
        e,
        [
            "rl.yaml: ratelimitconfig rl: spec.domian: unknown field (did you mean domain?)",
            "rl.yaml: ratelimitconfig rl: spec.domain: missing",
            "rl.yaml: ratelimitconfig rl: spec.descriptors[1].key: missing",
            "rl.yaml: ratelimitconfig rl: spec.descriptors[2]: duplicate descriptor: key \"a\" without a value is already at spec.descriptors[0]",
            "rl.yaml: ratelimitconfig rl: spec.descriptors[0].rate_limit.unit: unknown unit \"fortnight\"; expected second, minute, hour, day or week",
            "rl.yaml: ratelimitconfig rl: spec.descriptors[0].rate_limit.requests_per_unit: -1 is negative",
            "rl.yaml: ratelimitconfig rl: spec.descriptors[3].rate_limit.replaces: replaces is not supported",
        ]
    );
    let e = errors(
        "kind: ratelimitconfig\nmetadata: {name: rl}\nspec:\n  domain: d\n  backend: {adapter: noop}\n  descriptors:\n  - key: a\n    descriptors:\n    - key: b\n      rate_limit: {unit: second, requests_per_second: 3}\n    - key: b\n      rate_limit: {unlimited: true, unit: second}\n",
    );
    assert_eq!(
        e,
        [
            "rl.yaml: ratelimitconfig rl: spec.descriptors[0].descriptors[1]: duplicate descriptor: key \"b\" without a value is already at spec.descriptors[0].descriptors[0]",
            "rl.yaml: ratelimitconfig rl: spec.descriptors[0].descriptors[0].rate_limit.requests_per_second: unknown field",
            "rl.yaml: ratelimitconfig rl: spec.descriptors[0].descriptors[0].rate_limit.requests_per_unit: missing",
        ]
    );
}

#[test]
fn backend_problems() {
    let e = errors(
        "kind: ratelimitconfig\nmetadata: {name: rl}\nspec:\n  domain: d\n  backend: {adapter: memquota, params: {bad: 1}}\n",
    );
    assert_eq!(
        e,
        ["rl.yaml: ratelimitconfig rl: spec.backend.params.bad: not allowed"]
    );
    let e = errors(
        "kind: ratelimitconfig\nmetadata: {name: rl}\nspec:\n  domain: d\n  backend: {adapter: redisqouta}\n",
    );
    assert_eq!(
        e,
        [
            "rl.yaml: ratelimitconfig rl: spec.backend.adapter: unknown adapter \"redisqouta\" (known adapters: denier, memquota, noop; choose one with backend.adapter)"
        ]
    );
    // The default backend must be registered.
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_noop::Noop));
    let e = crate::validate(
        &[SourceFile::new(
            "rl.yaml",
            "kind: ratelimitconfig\nmetadata: {name: rl}\nspec: {domain: d}\n",
        )],
        &registry,
        &ConfigOptions::default(),
    )
    .expect_err("no memquota");
    assert_eq!(
        e[0].to_string(),
        "rl.yaml: ratelimitconfig rl: spec: the default backend adapter \"memquota\" is not available in this mixer (known adapters: noop; choose one with backend.adapter)"
    );
}

#[test]
fn generated_names_may_not_collide_with_written_ones() {
    let e = errors(
        "kind: ratelimitconfig\nmetadata: {name: rl}\nspec:\n  domain: d\n  descriptors: [{key: k, rate_limit: {unit: hour, requests_per_unit: 1}}]\n---\nkind: handler\nmetadata: {name: rl}\nspec: {compiledAdapter: noop}\n---\nkind: instance\nmetadata: {name: rl-k}\nspec: {compiledTemplate: quota}\n",
    );
    assert_eq!(
        e,
        [
            "rl.yaml: ratelimitconfig rl: metadata.name: the generated handler rl.istio-system has the name of another handler",
            "rl.yaml: ratelimitconfig rl: metadata.name: the generated instance rl-k.istio-system has the name of another instance",
        ]
    );
}

#[test]
fn quoting_survives_odd_values() {
    assert_eq!(super::quote("a\"b\\c\n"), r#""a\"b\\c\n""#);
    let (v, _) = ok(
        "kind: ratelimitconfig\nmetadata: {name: rl}\nspec:\n  domain: 'd\"x'\n  descriptors: [{key: 'k\\', value: 'v\"', rate_limit: {unit: hour, requests_per_unit: 1}}]\n",
    );
    assert_eq!(v.config.rules.len(), 1);
}
