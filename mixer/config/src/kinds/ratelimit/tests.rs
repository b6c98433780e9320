use std::sync::{Arc, Mutex};

use mixer_adapter_api::host::{FailPolicy, Params};
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, Stability,
};
use mixer_model::Template;

use crate::{AdapterRegistry, ConfigOptions, SourceFile, Validated};

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
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }
    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        self.0.lock().expect("lock").push(params.clone());
        if params.get("bad").is_some() {
            return Err(vec![ParamError::new("bad", "not allowed")]);
        }
        Ok(params)
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
    assert_eq!(&*h.name, "msg.ratelimitconfig.istio-system");
    assert_eq!(h.adapter, "memquota");
    assert_eq!(params.last(), Some(&h.params));
    assert_eq!(
        h.params,
        serde_json::json!({"quotas": [
            {"name": "msg-message_type-marketing-to_number.instance.istio-system", "maxAmount": 5, "validDuration": "86400s", "shadowMode": true},
            {"name": "msg-to_number.instance.istio-system", "maxAmount": 100, "validDuration": "86400s", "shadowMode": false},
            {"name": "msg-remote_address.instance.istio-system", "maxAmount": 10, "validDuration": "1s", "shadowMode": false},
            {"name": "msg-remote_address-50_0_0_5.instance.istio-system", "maxAmount": 0, "validDuration": "1s", "shadowMode": false},
            {"name": "msg-remote_address-10__any.instance.istio-system", "maxAmount": 7, "validDuration": "60s", "shadowMode": false},
        ]})
    );
    let names: Vec<&str> = c.instances.iter().map(|i| &*i.name).collect();
    assert_eq!(
        names,
        [
            "msg-message_type-marketing-to_number.instance.istio-system",
            "msg-to_number.instance.istio-system",
            "msg-remote_address.instance.istio-system",
            "msg-remote_address-50_0_0_5.instance.istio-system",
            "msg-remote_address-10__any.instance.istio-system",
            // Unlimited: a rule the rate limit front end answers without counting.
            "msg-ldap.instance.istio-system",
        ]
    );
    let unlimited: Vec<(usize, bool)> = c
        .rate_limits
        .iter()
        .map(|b| (b.instance, b.unlimited))
        .collect();
    assert_eq!(
        unlimited,
        [
            (0, false),
            (1, false),
            (2, false),
            (3, false),
            (4, false),
            (5, true)
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
            r#"ratelimit.domain == "messaging" && ratelimit.descriptor_keys == "ldap" && "ldap" in ratelimit.descriptor"#,
        ]
    );
    for (i, r) in c.rules.iter().enumerate() {
        assert_eq!(r.actions[0].handler, 0);
        assert_eq!(r.actions[0].instances, [i]);
        assert_eq!(r.name.replace(".rule.", ".instance."), *c.instances[i].name);
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
    assert_eq!(h.fail_policy, Some(FailPolicy::Closed));
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
    rate_limit: {unit: minute, requests_per_unit: 1, name: x, replaces: [{name: x}, {name: ""}]}
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
            // envoyproxy/ratelimit's own messages (test/config/replaces_self.yaml, replaces_empty.yaml).
            "rl.yaml: ratelimitconfig rl: spec.descriptors[3].rate_limit.replaces[0].name: replaces should not contain name of same descriptor",
            "rl.yaml: ratelimitconfig rl: spec.descriptors[3].rate_limit.replaces[1].name: should not have an empty replaces entry",
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
    // The generated handler is named for its kind (`rl.ratelimitconfig.istio-system`), so a
    // written handler `rl` does not collide with it; the generated instances are instances.
    assert_eq!(
        e,
        [
            "rl.yaml: ratelimitconfig rl: metadata.name: the generated instance rl-k.instance.istio-system has the name of another instance"
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

fn run_files(
    files: &[(&str, &str)],
    backend: Option<&str>,
) -> (Result<Validated, Vec<String>>, Vec<Params>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_denier::Denier));
    registry.register(Arc::new(mixer_adapter_noop::Noop));
    registry.register(Arc::new(FakeMemquota(seen.clone())));
    let sources: Vec<SourceFile> = files.iter().map(|(n, t)| SourceFile::new(*n, *t)).collect();
    let options = ConfigOptions {
        ratelimit_backend: backend.map(str::to_string),
        ..ConfigOptions::default()
    };
    let result = crate::validate(&sources, &registry, &options)
        .map_err(|errs| errs.iter().map(ToString::to_string).collect());
    let params = seen.lock().expect("lock").clone();
    (result, params)
}

/// envoyproxy/ratelimit's examples/ratelimit/config/config.yaml, unchanged.
const MONGO_CPS: &str = "---\ndomain: mongo_cps\ndescriptors:\n  - key: database\n    value: users\n    rate_limit:\n      unit: second\n      requests_per_unit: 500\n\n  - key: database\n    value: default\n    rate_limit:\n      unit: second\n      requests_per_unit: 500\n";

const DENY_RULE: &str = "kind: handler\nmetadata: {name: deny}\nspec: {compiledAdapter: denier}\n---\nkind: instance\nmetadata: {name: nothing}\nspec: {compiledTemplate: checknothing}\n---\nkind: rule\nmetadata: {name: r}\nspec: {actions: [{handler: deny, instances: [nothing]}]}\n";

#[test]
fn a_bare_envoyproxy_ratelimit_file_is_a_ratelimitconfig_named_after_its_domain() {
    let (result, _) = run_files(
        &[("config.yaml", MONGO_CPS), ("istio.yaml", DENY_RULE)],
        None,
    );
    let v = result.expect("valid");
    let c = &v.config;
    let handlers: Vec<(&str, &str)> = c
        .handlers
        .iter()
        .map(|h| (&*h.name, h.adapter.as_str()))
        .collect();
    assert_eq!(
        handlers,
        [
            ("deny.handler.istio-system", "denier"),
            ("mongo_cps.ratelimitconfig.istio-system", "memquota")
        ]
    );
    let h = c
        .handler("mongo_cps.ratelimitconfig.istio-system")
        .expect("generated");
    assert_eq!(h.file, "config.yaml");
    assert_eq!(
        h.params["quotas"][0],
        serde_json::json!({"name": "mongo_cps-database-users.instance.istio-system", "maxAmount": 500, "validDuration": "1s", "shadowMode": false})
    );
    let rules: Vec<&str> = c.rules.iter().map(|r| &*r.name).collect();
    assert_eq!(
        rules,
        [
            "r.rule.istio-system",
            "mongo_cps-database-users.rule.istio-system",
            "mongo_cps-database-default.rule.istio-system"
        ]
    );
}

#[test]
fn bare_files_report_paths_from_their_top_and_refuse_ratelimitconfig_keys() {
    let (result, _) = run_files(
        &[(
            "rl.yaml",
            "domain: edge\nbackend: {adapter: noop}\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
        )],
        None,
    );
    assert_eq!(
        result.expect_err("invalid"),
        [
            "rl.yaml: ratelimit domain edge: backend: unknown field",
            "rl.yaml: ratelimit domain edge: descriptors[0].rate_limit.unit: unknown unit \"fortnight\"; expected second, minute, hour, day or week",
        ]
    );
    // Two files of one domain: refused, as envoyproxy/ratelimit does.
    let (result, _) = run_files(&[("a.yaml", MONGO_CPS), ("b.yaml", MONGO_CPS)], None);
    let e = result.expect_err("duplicate domain");
    assert!(
        e.contains(&"b.yaml: ratelimit domain mongo_cps: domain: duplicate domain 'mongo_cps' in config file (also in a.yaml)".to_string()),
        "{e:#?}"
    );
}

const TWO_MEMQUOTAS: &str = "kind: handler\nmetadata: {name: shared}\nspec:\n  compiledAdapter: memquota\n  params: {quotas: [{name: q, maxAmount: 1, validDuration: 1s}], minDeduplicationDuration: 2s}\n---\nkind: memquota\nmetadata: {name: other}\nspec: {}\n";

#[test]
fn the_backend_of_bare_files_is_the_only_quota_handler_or_the_flag_s_choice() {
    // One memquota handler: its params (without its own quotas) and fail policy.
    let one = "kind: handler\nmetadata: {name: shared}\nspec:\n  compiledAdapter: memquota\n  failPolicy: CLOSED\n  params: {quotas: [{name: q, maxAmount: 1, validDuration: 1s}], minDeduplicationDuration: 2s}\n";
    let (result, _) = run_files(&[("h.yaml", one), ("config.yaml", MONGO_CPS)], None);
    let v = result.expect("valid");
    let h = v
        .config
        .handler("mongo_cps.ratelimitconfig.istio-system")
        .expect("generated");
    assert_eq!(h.params["minDeduplicationDuration"], "2s");
    assert_eq!(h.params["quotas"].as_array().map(Vec::len), Some(2));
    assert_eq!(h.fail_policy, Some(FailPolicy::Closed));

    // Two: ambiguous without the flag...
    let (result, _) = run_files(
        &[("h.yaml", TWO_MEMQUOTAS), ("config.yaml", MONGO_CPS)],
        None,
    );
    assert_eq!(
        result.expect_err("ambiguous"),
        [
            "config.yaml: ratelimit domain mongo_cps: several quota handlers could count the limits of envoyproxy/ratelimit files (shared.handler.istio-system, other.memquota.istio-system); choose one with --ratelimit-backend"
        ]
    );
    // ...which chooses one.
    let (result, _) = run_files(
        &[("h.yaml", TWO_MEMQUOTAS), ("config.yaml", MONGO_CPS)],
        Some("shared"),
    );
    let v = result.expect("valid");
    let h = v
        .config
        .handler("mongo_cps.ratelimitconfig.istio-system")
        .expect("generated");
    assert_eq!(h.params["minDeduplicationDuration"], "2s");
    let (result, _) = run_files(
        &[("h.yaml", TWO_MEMQUOTAS), ("config.yaml", MONGO_CPS)],
        Some("nope"),
    );
    assert_eq!(
        result.expect_err("unknown"),
        [
            "config.yaml: ratelimit domain mongo_cps: --ratelimit-backend \"nope\" names no handler of the config"
        ]
    );
    let (result, _) = run_files(
        &[("h.yaml", DENY_RULE), ("config.yaml", MONGO_CPS)],
        Some("deny"),
    );
    assert_eq!(
        result.expect_err("not a quota handler"),
        [
            "config.yaml: ratelimit domain mongo_cps: --ratelimit-backend deny.handler.istio-system is a denier handler; envoyproxy/ratelimit files need a memquota or redisquota one"
        ]
    );
}

#[test]
fn wildcards_anywhere_and_shared_thresholds() {
    // Shapes of envoyproxy/ratelimit's test/config/wildcard.yaml and share_threshold.yaml.
    let (result, _) = run_files(
        &[(
            "w.yaml",
            "domain: test-domain\ndescriptors:\n  - key: midWild\n    value: bar*b\n    rate_limit: {unit: minute, requests_per_unit: 20}\n  - key: files\n    value: files/*\n    share_threshold: true\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
        )],
        None,
    );
    let v = result.expect("valid");
    let c = &v.config;
    assert_eq!(
        c.rules[0].match_expr.as_ref().map(|e| e.source()),
        Some(
            r#"ratelimit.domain == "test-domain" && ratelimit.descriptor_keys == "midWild" && ratelimit.descriptor["midWild"].matches("(?s)^bar.*b$")"#
        )
    );
    let crate::FieldExprValue::Map(dims) = &c.instances[1].fields[0].value else {
        panic!("map")
    };
    assert_eq!(
        dims[0].1.source(),
        r#""files/*""#,
        "one counter for every match"
    );
    assert_eq!(
        &*c.instances[1].name,
        "test-domain-files-files__any.instance.istio-system"
    );
}

#[test]
fn replaces_names_and_modes_are_kept_for_the_front_end() {
    let (result, params) = run_files(
        &[(
            "r.yaml",
            "domain: rl\ndescriptors:\n  - key: a\n    quota_mode: true\n    metadata: {service: {name: a}}\n    rate_limit: {unit: minute, requests_per_unit: 1, name: limit_a}\n  - key: b\n    rate_limit:\n      replaces: [{name: limit_a}]\n      unlimited: true\n",
        )],
        None,
    );
    let v = result.expect("valid");
    assert_eq!(
        v.config.rate_limits,
        [
            crate::RateLimitBehaviour {
                instance: 0,
                name: Some("limit_a".into()),
                replaces: vec![],
                unlimited: false,
                quota_mode: true,
                stat_key: "rl.a".into(),
                stat_levels: vec!["a".into()],
                shadow_mode: false,
                detailed_metric: false,
            },
            crate::RateLimitBehaviour {
                instance: 1,
                name: None,
                replaces: vec!["limit_a".into()],
                unlimited: true,
                quota_mode: false,
                stat_key: "rl.b".into(),
                stat_levels: vec!["b".into()],
                shadow_mode: false,
                detailed_metric: false,
            },
        ]
    );
    // The unlimited limit is never counted: no quota for it.
    let quotas = params.last().expect("validated")["quotas"]
        .as_array()
        .map(Vec::len);
    assert_eq!(quotas, Some(1));
}

#[test]
fn statistics_keys_are_envoyproxy_ratelimits() {
    // The keys `loadDescriptors` in envoyproxy/ratelimit's src/config/config_impl.go gives
    // these limits: `key` or `key_value` per level after the domain, wildcards with their `*`.
    let (result, _) = run_files(
        &[(
            "r.yaml",
            "domain: rl\ndescriptors:\n  - key: foo\n    descriptors:\n      - key: bar\n        value: bkthomps\n        shadow_mode: true\n        rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: unspec\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: path\n    value: /api/*\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
        )],
        None,
    );
    let v = result.expect("valid");
    let keys: Vec<(&str, bool, bool)> = v
        .config
        .rate_limits
        .iter()
        .map(|b| (b.stat_key.as_str(), b.shadow_mode, b.detailed_metric))
        .collect();
    assert_eq!(
        keys,
        [
            ("rl.foo.bar_bkthomps", true, false),
            ("rl.unspec", false, true),
            ("rl.path_/api/*", false, false)
        ]
    );
    assert_eq!(v.config.rate_limits[0].stat_levels, ["foo", "bar"]);
}
