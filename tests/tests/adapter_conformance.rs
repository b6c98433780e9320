//! The conformance kit of the adapter API (`mixer_adapter_api::testkit`) over every adapter
//! built into the mixer, each with a real backend where it has one: a real Redis for
//! redisquota, a real mixer's OTLP ingest for the OTLP exporter, and a closed port for each
//! backend's outage; and over an SDK adapter (the allowlist example, its own process) through
//! the out-of-process transport the server uses.

#[path = "support/redis.rs"]
mod redis;

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mixer_adapter_api::host::Params;
use mixer_adapter_api::testkit::{Case, Unreachable, assert_conforms};
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, Handler, ParamError, Stability,
};
use mixer_model::{FieldValue, Instance, Template, Timestamp, Value};
use mixer_remote::{
    InferredField, RemoteAdapters, RemoteConnection, RemoteHandlerSpec, RemoteInstance,
};
use mixer_tests::Mixer;
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

fn map(entries: &[(&str, &str)]) -> FieldValue {
    FieldValue::Map(
        entries
            .iter()
            .map(|(k, v)| (Arc::from(*k), Value::from(*v)))
            .collect(),
    )
}

fn now() -> Value {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    Value::Timestamp(Timestamp(nanos))
}

/// One valid instance of each template, named as the cases' params expect.
fn of(template: Template) -> Instance {
    match template {
        Template::Authorization => instance(
            "auth.instance.default",
            template,
            vec![
                ("subject", map(&[("user", "alice")])),
                ("action", map(&[("method", "GET")])),
            ],
        ),
        Template::CheckNothing => instance("nothing.instance.default", template, vec![]),
        Template::ListEntry => instance(
            "entry.instance.default",
            template,
            vec![("value", value("a"))],
        ),
        Template::Quota => instance(
            "requestcount.instance.default",
            template,
            vec![("dimensions", map(&[("source", "reviews")]))],
        ),
        Template::Metric => instance(
            "requestcount.instance.default",
            template,
            vec![
                ("value", value(1_i64)),
                ("dimensions", map(&[("source", "reviews")])),
            ],
        ),
        Template::LogEntry => instance(
            "accesslog.instance.default",
            template,
            vec![
                ("variables", map(&[("source", "reviews")])),
                ("timestamp", FieldValue::Value(now())),
                ("severity", value("info")),
            ],
        ),
        Template::TraceSpan => instance(
            "span.instance.default",
            template,
            vec![
                ("trace_id", value("0123456789abcdef0123456789abcdef")),
                ("span_id", value("0123456789abcdef")),
                ("span_name", value("GET /")),
                ("start_time", FieldValue::Value(now())),
                ("end_time", FieldValue::Value(now())),
            ],
        ),
        Template::ReportNothing => instance("nothing.instance.default", template, vec![]),
    }
}

fn case(name: &str, params: serde_json::Value, unreachable: Option<Unreachable>) -> Case {
    let registry = mixer_server::adapters::builtin();
    let adapter = registry
        .get(name)
        .unwrap_or_else(|| panic!("no built-in adapter {name}"))
        .clone();
    let config = adapter.compile(&params).expect("the case's params compile");
    let instances = adapter.templates_of(&config).into_iter().map(of).collect();
    Case {
        adapter,
        params,
        unreachable,
        instances,
        offers_every_variety: false,
    }
}

/// The path of an example Wasm plugin built into `MIXER_WASM_GUESTS` (or `target/wasm-guests`).
fn guest(name: &str) -> String {
    let dir = std::env::var("MIXER_WASM_GUESTS")
        .unwrap_or_else(|_| format!("{}/../target/wasm-guests", env!("CARGO_MANIFEST_DIR")));
    let path = Path::new(&dir).join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: build it with adapters/examples/wasm/build.sh",
        path.display()
    );
    path.display().to_string()
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
    let redis = redis::Redis::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("stdio.log");
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
    factory: Arc<dyn RemoteAdapters>,
}

static ALLOWLIST: AdapterInfo = AdapterInfo {
    name: "allowlist",
    description: "the SDK's allowlist example, in a process of its own",
    templates: &[Template::ListEntry],
    cacheable: true,
    stability: Stability::Alpha,
};

impl Remote {
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
        let instances = [RemoteInstance {
            name: "entry.instance.default".into(),
            template: Template::ListEntry,
            fields: vec![InferredField {
                field: "value",
                key: None,
                value_type: Some(mixer_model::ValueType::String),
            }],
        }];
        f(&RemoteHandlerSpec {
            handler_name,
            adapter: "allowlist",
            params: &params["params"],
            params_descriptor: None,
            session_based: None,
            connection: &connection,
            instances: &instances,
        })
    }
}

impl Adapter for Remote {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &ALLOWLIST
    }

    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        self.with_spec(&params, "conformance.allowlist".into(), |spec| {
            self.factory.validate(spec)
        })?;
        Ok(params)
    }

    fn build(&self, params: &Params, ctx: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        let mut built = None;
        self.with_spec(params, ctx.handler_name.clone(), |spec| {
            built = Some(self.factory.build(spec));
            Ok(())
        })
        .map_err(|errors| {
            let said: Vec<String> = errors.iter().map(ToString::to_string).collect();
            AdapterError::permanent(mixer_adapter_api::ErrorKind::Internal, said.join("; "))
        })?;
        built.expect("with_spec calls its builder once the address is there")
    }
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_allowlist() -> (SocketAddr, Process) {
    let addr = mixer_tests::free_addr();
    let mut process = Process(
        Command::new(env!("CARGO_BIN_EXE_allowlist-under-test"))
            .arg(addr.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the allowlist adapter"),
    );
    let start = Instant::now();
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Ok(Some(status)) = process.0.try_wait() {
            panic!("the allowlist adapter exited before listening on {addr}: {status}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "allowlist not listening"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (addr, process)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_adapter_conforms_through_the_out_of_process_transport() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("allowed.txt");
    std::fs::write(&file, "a\n").expect("write the allow list");
    let (addr, _process) = tokio::task::spawn_blocking(start_allowlist)
        .await
        .expect("join");
    let factory = mixer_server::adapters::builtin()
        .remote()
        .expect("the server registers the out-of-process client")
        .clone();
    let case = Case {
        adapter: Arc::new(Remote { factory }),
        params: json!({"address": addr.to_string(), "params": {"file": file}}),
        unreachable: Some(Unreachable {
            params: json!({"address": format!("127.0.0.1:{}", closed_port()),
                "params": {"file": file}}),
            immediate: &[Template::ListEntry],
        }),
        instances: vec![of(Template::ListEntry)],
        offers_every_variety: true,
    };
    assert_conforms(&case).await;
}
