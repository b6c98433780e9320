//! The conformance kit of the adapter API (`mixer_adapter_api::testkit`) over every adapter
//! built into the mixer, each with a real backend where it has one: a real Redis for
//! redisquota, a real mixer's OTLP ingest for the OTLP exporter, and a closed port for each
//! backend's outage; over an SDK adapter (the allowlist example, its own process) through
//! the out-of-process transport the server uses; and over built-in adapters, unchanged,
//! served by the SDK and reached through that same transport: a built-in adapter moves out of
//! process without a rewrite. And `mixer conformance`, the kit as an adapter author runs it,
//! through the real binary: against the allowlist example, a Wasm example plugin, an adapter
//! over TLS, and a deliberately broken (hanging) adapter, whose report names the broken promise.

#[path = "../../adapters/kubernetesenv/tests/standin/mod.rs"]
mod standin;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::host::{AnyAdapter, Params};
use mixer_adapter_api::testkit::{self, Case, Unreachable, assert_conforms, default_instance};
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, QuotaArgs, Stability,
};
use mixer_model::{FieldValue, Instance, Template, Value};
use mixer_remote::{
    InferredField, RemoteAdapter, RemoteConnection, RemoteHandlerSpec, RemoteInstance,
};
use mixer_tests::Mixer;
use mixer_tests::adapters::{Process, start_adapter_binary};
use serde_json::json;

fn instance(name: &str, template: Template, fields: Vec<(&'static str, FieldValue)>) -> Instance {
    Instance {
        name: name.into(),
        template,
        fields,
    }
}

fn value(v: impl Into<Value>) -> FieldValue {
    FieldValue::Value(v.into())
}

fn case(name: &str, params: serde_json::Value, unreachable: Option<Unreachable>) -> Case {
    let mut case = testkit::case(built_in(name), params);
    case.unreachable = unreachable;
    case
}

/// The path of an example Wasm plugin (`mixer_tests::wasm_guest`); a missing one fails the
/// test here even outside CI, as the built-in adapters' case needs each.
fn guest(name: &str) -> String {
    mixer_tests::wasm_guest(name)
        .unwrap_or_else(|| {
            panic!("{name}.wasm is missing: build it with adapters/examples/wasm/build.sh")
        })
        .display()
        .to_string()
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    mixer_tests::free_addr().port()
}

fn quotas() -> serde_json::Value {
    json!([{"name": "requestcount.instance.default", "maxAmount": 10, "validDuration": "1s"}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_built_in_adapter_conforms() {
    let redis = mixer_tests::redis::Redis::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("stdio.log");
    let api_keys = dir.path().join("keys.yaml");
    std::fs::write(&api_keys, "keys: [{name: a, key: fake-key}]").expect("write keys");
    // No Kubernetes API server installs here: kubernetesenv lists and watches a stand-in
    // serving Kubernetes JSON (adapters/kubernetesenv/tests/standin).
    let mut objects = standin::items("pods.json");
    objects.extend(standin::items("replicasets.json"));
    let apiserver = standin::StandIn::start(objects).await;
    let kubeconfig = apiserver.kubeconfig(dir.path());
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let receiver = tokio::task::spawn_blocking(move || {
        let m = Mixer::start(binary, &[]);
        m.wait_ready(Duration::from_secs(10));
        m
    })
    .await
    .expect("join");
    let cases = [
        case("denier", json!({}), None),
        case("noop", json!({}), None),
        case("listchecker", json!({"overrides": ["a"]}), None),
        // Inline keys (RFC 7517's example EC key): the kit's token is malformed, so the call is
        // answered with a denial and never needs a key server.
        case(
            "jwt",
            json!({"issuer": "https://issuer.example", "jwks": r#"{"keys": [{"kty": "EC",
                "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
                "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}]}"#}),
            None,
        ),
        case(
            "prometheus",
            json!({"metrics": [{"name": "requests_total", "kind": "COUNTER",
                "instanceName": "requestcount.instance.default", "labelNames": ["source"]}]}),
            None,
        ),
        case(
            "stdio",
            json!({"logStream": "FILE", "outputPath": log}),
            None,
        ),
        case("memquota", json!({"quotas": quotas()}), None),
        case("apikey", json!({"file": api_keys}), None),
        case("kubernetesenv", json!({"kubeconfigPath": kubeconfig}), None),
        case(
            "redisquota",
            // A second, not the 5 ms default: this checks behaviour, and a loaded CI machine
            // can keep a local Redis from answering within 5 ms.
            json!({"redisServerUrl": format!("127.0.0.1:{}", redis.port), "quotas": quotas(),
                "callTimeout": "1s"}),
            Some(Unreachable {
                params: json!({"redisServerUrl": format!("127.0.0.1:{}", closed_port()),
                    "quotas": quotas()}),
                immediate: &[Template::Quota],
            }),
        ),
        case(
            "otlp",
            json!({"endpoint": format!("http://{}", receiver.grpc), "retry": {"enabled": false}}),
            // Metrics are aggregated and exported on an interval; logs and spans at once.
            Some(Unreachable {
                params: json!({"endpoint": format!("http://127.0.0.1:{}", closed_port()),
                    "retry": {"enabled": false}}),
                immediate: &[Template::LogEntry, Template::TraceSpan],
            }),
        ),
        // The example plugins (adapters/examples/wasm/build.sh, run by .ci/run); each declares
        // its own templates when its module loads.
        case(
            "wasm",
            json!({"module": guest("deny-header"), "limits": {"checkDeadline": "100ms"},
                "config": {"header": "x-plugin-deny", "value": "true", "message": "denied"}}),
            None,
        ),
        case(
            "wasm",
            json!({"module": guest("count-by"), "limits": {"reportDeadline": "500ms"},
                "config": {"dimension": "destination"}}),
            None,
        ),
        // An attribute generator of the @0.2.0 world; the kit's apikey instance sends k-123.
        case(
            "wasm",
            json!({"module": guest("key-labels"), "limits": {"checkDeadline": "100ms"},
                "config": {"keys": {"k-123": {"principal": "team-a"}}}}),
            None,
        ),
    ];
    let registry = mixer_server::adapters::builtin();
    let mut covered: Vec<&str> = cases.iter().map(|c| c.adapter.info().name).collect();
    covered.dedup();
    let mut registered: Vec<&str> = registry.names().collect();
    covered.sort_unstable();
    registered.sort_unstable();
    assert_eq!(
        covered, registered,
        "every built-in adapter has a case here"
    );
    for c in &cases {
        assert_conforms(c).await;
    }
    assert!(receiver.terminate().success());
}

/// An out-of-process adapter seen through the adapter API: `params` are
/// `{"address": ..., "params": {...}}`, the address of the adapter's process and its own params.
struct Remote {
    factory: Arc<dyn RemoteAdapter>,
    /// What the adapter declares, as its process does.
    info: AdapterInfo,
    /// The instances its rules send it, for Validate and CreateSession.
    instances: Vec<RemoteInstance>,
}

static ALLOWLIST: AdapterInfo = AdapterInfo {
    name: "allowlist",
    description: "the SDK's allowlist example, in a process of its own",
    templates: &[Template::ListEntry],
    cacheable: true,
    stability: Stability::Alpha,
};

impl Remote {
    fn new(info: AdapterInfo, instances: Vec<RemoteInstance>) -> Remote {
        let factory = mixer_server::adapters::builtin()
            .remote()
            .expect("the server registers the out-of-process client")
            .clone();
        Remote {
            factory,
            info,
            instances,
        }
    }

    /// A remote adapter declaring `info`, sent an instance of each of its templates.
    fn of_templates(info: &AdapterInfo) -> Remote {
        let instances = info
            .templates
            .iter()
            .map(|t| RemoteInstance {
                name: default_instance(*t).name,
                template: *t,
                fields: Vec::new(),
            })
            .collect();
        Remote::new(info.clone(), instances)
    }

    fn with_spec<T>(
        &self,
        params: &Params,
        handler_name: Arc<str>,
        f: impl FnOnce(&RemoteHandlerSpec<'_>) -> Result<T, Vec<ParamError>>,
    ) -> Result<T, Vec<ParamError>> {
        let Some(address) = params["address"].as_str() else {
            return Err(vec![ParamError::new(
                "address",
                "the adapter's address is missing",
            )]);
        };
        let connection = RemoteConnection {
            address: address.to_owned(),
            timeout: Some(Duration::from_millis(500)),
            authentication: None,
        };
        f(&RemoteHandlerSpec {
            handler_name,
            adapter: self.info.name,
            params: &params["params"],
            params_descriptor: None,
            session_based: None,
            connection: &connection,
            instances: &self.instances,
            declared_templates: None,
        })
    }
}

impl Adapter for Remote {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &self.info
    }

    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        let name = format!("conformance.{}", self.info.name);
        self.with_spec(&params, name.into(), |spec| {
            self.factory.compile_remote(spec)
        })?;
        Ok(params)
    }

    fn build(&self, params: &Params, ctx: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        let mut built = None;
        self.with_spec(params, ctx.handler_name.clone(), |spec| {
            let compiled = self.factory.compile_remote(spec)?;
            built = Some(self.factory.build_compiled(&compiled.config, ctx));
            Ok(())
        })
        .map_err(|errors| {
            let said: Vec<String> = errors.iter().map(ToString::to_string).collect();
            AdapterError::permanent(mixer_adapter_api::ErrorKind::Internal, said.join("; "))
        })?;
        built.expect("with_spec calls its builder once the address is there")
    }
}

/// The allowlist example, served by the SDK in a process of its own.
fn start_allowlist() -> (SocketAddr, Process) {
    let addr = mixer_tests::free_addr();
    let binary = Path::new(env!("CARGO_BIN_EXE_allowlist-under-test"));
    (addr, start_adapter_binary(binary, addr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_adapter_conforms_through_the_out_of_process_transport() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("allowed.txt");
    std::fs::write(&file, "a\n").expect("write the allow list");
    let (addr, _process) = tokio::task::spawn_blocking(start_allowlist)
        .await
        .expect("join");
    let entry = RemoteInstance {
        name: "entry.instance.default".into(),
        template: Template::ListEntry,
        fields: vec![InferredField {
            field: "value",
            key: None,
            value_type: Some(mixer_model::ValueType::String),
        }],
    };
    let case = Case {
        adapter: Arc::new(Remote::new(ALLOWLIST.clone(), vec![entry])),
        params: json!({"address": addr.to_string(), "params": {"file": file}}),
        unreachable: Some(Unreachable {
            params: json!({"address": format!("127.0.0.1:{}", closed_port()),
                "params": {"file": file}}),
            immediate: &[Template::ListEntry],
        }),
        instances: vec![default_instance(Template::ListEntry)],
        offers_every_variety: true,
    };
    assert_conforms(&case).await;
}

/// A built-in adapter, unchanged, served by the SDK on a loopback port, on a runtime of its
/// own: the mixer's client reaches it only through the adapter protocol, as it would the
/// adapter's own process.
struct Served {
    addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Served {
    fn start(adapter: Arc<dyn AnyAdapter>) -> Served {
        Served::start_with(adapter, None)
    }

    /// [`Served::start`], over TLS when `tls` is given.
    fn start_with(
        adapter: Arc<dyn AnyAdapter>,
        tls: Option<mixer_adapter_sdk::ServerTls>,
    ) -> Served {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the adapter");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("adapter address");
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let mut server = mixer_adapter_sdk::Server::from_arc(adapter);
            if let Some(tls) = tls {
                server = server.tls(tls);
            }
            let _ = server
                .serve_with_shutdown(listener, std::future::pending())
                .await;
        });
        Served {
            addr,
            runtime: Some(runtime),
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

fn built_in(name: &str) -> Arc<dyn AnyAdapter> {
    mixer_server::adapters::builtin()
        .get(name)
        .unwrap_or_else(|| panic!("no built-in adapter {name}"))
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn built_in_adapters_served_by_the_sdk_conform_through_the_out_of_process_transport() {
    for (name, params) in [
        ("denier", json!({"status": {"code": 7}})),
        ("memquota", json!({"quotas": quotas()})),
        ("listchecker", json!({"overrides": ["a"]})),
    ] {
        let adapter = built_in(name);
        let served = Served::start(adapter.clone());
        let templates = adapter.info().templates;
        let case = Case {
            adapter: Arc::new(Remote::of_templates(adapter.info())),
            params: json!({"address": served.addr.to_string(), "params": params}),
            // Out of process, every call goes to the adapter at once.
            unreachable: Some(Unreachable {
                params: json!({"address": format!("127.0.0.1:{}", closed_port()),
                    "params": params}),
                immediate: templates,
            }),
            instances: templates.iter().map(|t| default_instance(*t)).collect(),
            offers_every_variety: true,
        };
        assert_conforms(&case).await;
    }
}

/// The keyring example's params: one key with a label.
fn keyring_params() -> serde_json::Value {
    json!({"keys": {"k-123": {"principal": "team-a", "labels": {"tier": "gold"}}}})
}

/// An attribute generator (the keyring example, `apikey`) served by the SDK and reached
/// through the out-of-process transport: it conforms, its answer's outputs are its
/// template's, and the mixer's client reads the same outputs and denials the adapter gives
/// built in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_attribute_generator_conforms_and_answers_through_the_out_of_process_transport() {
    let keyring: Arc<dyn AnyAdapter> = Arc::new(mixer_example_keyring::Keyring);
    let served = Served::start(keyring.clone());
    let case = Case {
        adapter: Arc::new(Remote::of_templates(keyring.info())),
        params: json!({"address": served.addr.to_string(), "params": keyring_params()}),
        unreachable: Some(Unreachable {
            params: json!({"address": format!("127.0.0.1:{}", closed_port()),
                "params": keyring_params()}),
            immediate: &[Template::ApiKey],
        }),
        instances: vec![default_instance(Template::ApiKey)],
        offers_every_variety: true,
    };
    let report = assert_conforms(&case).await;
    assert!(
        report
            .promises
            .contains(&(testkit::promise::GENERATED, testkit::Outcome::Held)),
        "{report}"
    );
    let ctx = BuildContext {
        handler_name: "keyring.default".into(),
    };
    let remote = case
        .adapter
        .compile_and_build(&case.params, &ctx)
        .expect("the remote handler builds");
    let built_in = keyring
        .compile_and_build(&keyring_params(), &ctx)
        .expect("the built-in handler builds");
    for key in [Some("k-123"), Some("k-999"), None] {
        let i = instance(
            "key.instance.default",
            Template::ApiKey,
            key.map(|k| ("key", value(k))).into_iter().collect(),
        );
        let over_the_wire = remote
            .as_attributes()
            .expect("generates")
            .generate(&i)
            .await
            .expect("an answer");
        let local = built_in
            .as_attributes()
            .expect("generates")
            .generate(&i)
            .await
            .expect("an answer");
        assert_eq!(over_the_wire, local, "key {key:?}");
    }
    let denied = remote
        .as_attributes()
        .expect("generates")
        .generate(&instance(
            "key.instance.default",
            Template::ApiKey,
            vec![("key", value("k-999"))],
        ))
        .await
        .expect("an answer");
    assert_eq!(
        denied.denial.map(|d| d.status.code),
        Some(mixer_model::Code::Unauthenticated)
    );
    remote.close().await;
}

/// The same adapter, built in and served by the SDK, answers the same: status code and
/// message, and how long and how often the answer may be reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_built_in_adapter_served_by_the_sdk_answers_as_it_does_built_in() {
    let ctx = BuildContext {
        handler_name: "same.default".into(),
    };
    // Each value, and whether the adapter denies it.
    for (name, params, asked) in [
        (
            "denier",
            json!({"status": {"code": 7, "message": "not allowed"}, "validDuration": "10s",
                "validUseCount": 3}),
            &[("a", true)][..],
        ),
        (
            "listchecker",
            json!({"overrides": ["a"], "cachingInterval": "30s", "cachingUseCount": 7}),
            &[("a", false), ("b", true)][..],
        ),
    ] {
        let adapter = built_in(name);
        let served = Served::start(adapter.clone());
        let remote = Remote::of_templates(adapter.info());
        let address = json!({"address": served.addr.to_string(), "params": params});
        let here = adapter.compile_and_build(&params, &ctx).expect("builds");
        let there = AnyAdapter::compile_and_build(&remote, &address, &ctx).expect("builds");
        for (entry, denied) in asked {
            let instance = instance(
                "entry.instance.default",
                Template::ListEntry,
                vec![("value", value(*entry))],
            );
            let built_in = here.as_check().expect("checks").check(&instance).await;
            let served = there.as_check().expect("checks").check(&instance).await;
            let built_in = built_in.expect("an answer");
            assert_eq!(built_in.status.is_ok(), !denied, "{name}, {entry}");
            assert_eq!(served.expect("an answer"), built_in, "{name}, {entry}");
        }
        here.close().await;
        there.close().await;
    }
    // The denier's quota answer too (memquota's depends on the clock).
    let adapter = built_in("denier");
    let served = Served::start(adapter.clone());
    let remote = Remote::of_templates(adapter.info());
    let params = json!({"status": {"code": 8, "message": "no quota"}, "validDuration": "2s"});
    let address = json!({"address": served.addr.to_string(), "params": params});
    let here = adapter.compile_and_build(&params, &ctx).expect("builds");
    let there = AnyAdapter::compile_and_build(&remote, &address, &ctx).expect("builds");
    let quota = default_instance(Template::Quota);
    let args = QuotaArgs {
        amount: 3,
        ..QuotaArgs::default()
    };
    let built_in = here
        .as_quota()
        .expect("quota")
        .allocate(&quota, &args)
        .await;
    let served = there
        .as_quota()
        .expect("quota")
        .allocate(&quota, &args)
        .await;
    let built_in = built_in.expect("an answer");
    assert_eq!(built_in.status.message, "no quota");
    assert_eq!(served.expect("an answer"), built_in);
}

/// `mixer conformance ARGS` as an adapter author runs it: its exit code and its report.
fn mixer_conformance(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mixer-under-test"))
        .arg("conformance")
        .args(args)
        .output()
        .expect("run mixer conformance");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), printed)
}

#[test]
fn mixer_conformance_passes_the_allowlist_example_in_its_own_process() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("allowed.txt");
    std::fs::write(&file, "a\n").expect("write the allow list");
    // A value not on the list: a denial is an answer too.
    let instances = dir.path().join("instances.yaml");
    std::fs::write(&instances, "- {template: listentry, fields: {value: b}}\n")
        .expect("write the instances");
    let (addr, _process) = start_allowlist();
    let params = json!({"file": file}).to_string();
    // No --template: the SDK serves gRPC server reflection, which says what it serves.
    let (code, report) = mixer_conformance(&[
        "--adapter",
        &addr.to_string(),
        "--params",
        &params,
        "--instances",
        &instances.display().to_string(),
    ]);
    assert_eq!(code, Some(0), "{report}");
    for line in [
        format!("conformance of the adapter at {addr}:"),
        "templates exercised: listentry".to_owned(),
        format!("  held         {}", testkit::promise::ANSWERS),
        format!("  held         {}", testkit::promise::UNDECLARED),
        "all 7 promises checked held".to_owned(),
    ] {
        assert!(report.contains(&line), "{line:?} not in:\n{report}");
    }
}

#[test]
fn mixer_conformance_passes_an_out_of_process_attribute_generator() {
    let served = Served::start(Arc::new(mixer_example_keyring::Keyring));
    let params = keyring_params().to_string();
    let (code, report) =
        mixer_conformance(&["--adapter", &served.addr.to_string(), "--params", &params]);
    assert_eq!(code, Some(0), "{report}");
    for line in [
        "templates exercised: apikey".to_owned(),
        format!("  held         {}", testkit::promise::GENERATED),
        format!("  held         {}", testkit::promise::UNDECLARED),
        "all 8 promises checked held".to_owned(),
    ] {
        assert!(report.contains(&line), "{line:?} not in:\n{report}");
    }
}

#[test]
fn mixer_conformance_passes_an_example_wasm_plugin() {
    let Some(plugin) = mixer_tests::wasm_guest("deny-header") else {
        return;
    };
    let (code, report) = mixer_conformance(&[
        "--wasm",
        &plugin.display().to_string(),
        "--params",
        r#"{limits: {checkDeadline: 100ms}, config: {header: x-plugin-deny, value: "true", message: denied}}"#,
    ]);
    assert_eq!(code, Some(0), "{report}");
    assert!(
        report.contains("templates exercised: authorization"),
        "{report}"
    );
    assert!(report.contains("all 7 promises checked held"), "{report}");
}

#[test]
fn mixer_conformance_passes_an_attribute_generating_wasm_plugin() {
    let Some(plugin) = mixer_tests::wasm_guest("key-labels") else {
        return;
    };
    let (code, report) = mixer_conformance(&[
        "--wasm",
        &plugin.display().to_string(),
        "--params",
        r#"{limits: {checkDeadline: 100ms}, config: {keys: {k-123: {principal: team-a, labels: {tier: gold}}}}}"#,
    ]);
    assert_eq!(code, Some(0), "{report}");
    for line in [
        "templates exercised: apikey".to_owned(),
        format!("  held         {}", testkit::promise::GENERATED),
        "all 8 promises checked held".to_owned(),
    ] {
        assert!(report.contains(&line), "{line:?} not in:\n{report}");
    }
}

/// Declares listentry and answers no call of it: a deliberately broken adapter.
struct Hanging;

static HANGING: AdapterInfo = AdapterInfo {
    name: "hanging",
    description: "never answers a check",
    templates: &[Template::ListEntry],
    cacheable: true,
    stability: Stability::Alpha,
};

impl Adapter for Hanging {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &HANGING
    }

    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        Ok(params)
    }

    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(Hanging))
    }
}

impl Handler for Hanging {
    fn as_check(&self) -> Option<&dyn mixer_adapter_api::CheckHandler> {
        Some(self)
    }
}

#[async_trait::async_trait]
impl mixer_adapter_api::CheckHandler for Hanging {
    async fn check(&self, _: &Instance) -> Result<mixer_model::CheckResult, AdapterError> {
        std::future::pending().await
    }
}

#[test]
fn mixer_conformance_names_the_promise_a_broken_adapter_breaks() {
    let served = Served::start(Arc::new(Hanging));
    let (code, report) = mixer_conformance(&[
        "--adapter",
        &served.addr.to_string(),
        "--template",
        "listentry",
        "--timeout",
        "200ms",
    ]);
    assert_eq!(code, Some(1), "{report}");
    let broken = format!("  BROKEN       {}\n", testkit::promise::ANSWERS);
    let at = report
        .find(&broken)
        .unwrap_or_else(|| panic!("{broken:?} not in:\n{report}"));
    let why = report[at + broken.len()..]
        .lines()
        .next()
        .unwrap_or_default();
    assert!(
        // The mixer's deadline, or the adapter's own answer to the deadline it was sent.
        why.contains("a listentry call failed")
            && (why.contains("200ms") || why.contains("deadline")),
        "{why:?} in:\n{report}"
    );
    assert!(
        report.contains("1 of 7 promises checked broken"),
        "{report}"
    );
}

#[test]
fn mixer_conformance_help_says_what_it_checks_and_how_to_run_it() {
    let (code, help) = mixer_conformance(&["--help"]);
    assert_eq!(code, Some(0), "{help}");
    for word in [
        "--adapter",
        "--wasm",
        "--params",
        "--template",
        "reflection",
        "Exit status",
    ] {
        assert!(help.contains(word), "{word:?} not in:\n{help}");
    }
    let (code, said) = mixer_conformance(&[]);
    assert_eq!(code, Some(2), "{said}");
    assert!(
        said.contains("--adapter") && said.contains("--wasm"),
        "{said}"
    );
}

/// A certificate authority and a certificate it issued for `localhost` and 127.0.0.1, in PEM.
fn ca_and_server_certificate() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA");
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
    params
        .subject_alt_names
        .push(SanType::IpAddress([127, 0, 0, 1].into()));
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &ca).expect("sign");
    (ca.as_ref().pem(), cert.pem(), key.serialize_pem())
}

#[test]
fn mixer_conformance_reaches_an_adapter_over_tls() {
    let (ca, cert, key) = ca_and_server_certificate();
    let dir = tempfile::tempdir().expect("temp dir");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca).expect("write the CA");
    let tls = mixer_adapter_sdk::ServerTls::new(cert, key);
    let served = Served::start_with(built_in("listchecker"), Some(tls));
    let adapter = served.addr.to_string();
    let ca_file = ca_file.display().to_string();
    let args = [
        "--adapter",
        &adapter,
        "--params",
        "{overrides: [a]}",
        "--ca-certificates",
        &ca_file,
    ];
    // The templates are learned by gRPC server reflection over the same TLS connection.
    let (code, report) = mixer_conformance(&args);
    assert_eq!(code, Some(0), "{report}");
    assert!(
        report.contains("templates exercised: listentry"),
        "{report}"
    );
    assert!(report.contains("all 7 promises checked held"), "{report}");
}

/// `--unreachable-params`: redisquota, served by the SDK, with a real Redis and then with a
/// closed port for one.
#[test]
fn mixer_conformance_checks_an_adapter_with_its_backend_unreachable() {
    let redis = mixer_tests::redis::Redis::start();
    let served = Served::start(built_in("redisquota"));
    let params = json!({"redisServerUrl": format!("127.0.0.1:{}", redis.port),
        "quotas": quotas(), "callTimeout": "1s"})
    .to_string();
    let unreachable = json!({"redisServerUrl": format!("127.0.0.1:{}", closed_port()),
        "quotas": quotas()})
    .to_string();
    let (code, report) = mixer_conformance(&[
        "--adapter",
        &served.addr.to_string(),
        "--template",
        "quota",
        "--params",
        &params,
        "--unreachable-params",
        &unreachable,
    ]);
    assert_eq!(code, Some(0), "{report}");
    let held = format!("  held         {}", testkit::promise::UNREACHABLE);
    assert!(report.contains(&held), "{held:?} not in:\n{report}");
    assert!(report.contains("all 8 promises checked held"), "{report}");
}
