//! `mixer conformance`: the adapter conformance kit (`mixer_adapter_api::testkit`) run
//! against an adapter in another process, in any language (`--adapter HOST:PORT`), or a Wasm
//! plugin (`--wasm FILE`), through the transport `serve` uses; it prints the kit's report,
//! each promise and whether it held, and exits 0 when none is broken, 1 otherwise.

/// How `mixer conformance` is used, after its options in `--help`.
pub const AFTER_HELP: &str = "\
Examples:
  mixer conformance --adapter 127.0.0.1:9070 --params '{file: allowed.txt}'
  mixer conformance --adapter 127.0.0.1:9070 --template listentry --params params.yaml
  mixer conformance --wasm plugin.wasm --params '{config: {header: x-deny}, limits: {checkDeadline: 50ms}}'

Each call goes through the transport `serve` uses (the out-of-process adapter client, or the
Wasm plugin host), with one instance of each template exercised. The kit checks what every
adapter owes the mixer (answers in time, errors that say why, only the templates it declares),
not whether its decisions are right: test your logic yourself. Its calls are real: give params
that point at scratch resources (a file a metric adapter may append to, a test database).
Exit status: 0 when every promise checked held, 1 when one is broken or the adapter could not
be checked at all.";

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::host::Params;
use mixer_adapter_api::testkit::{self, Case, Report, Unreachable};
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, BuildContext, ErrorKind, Handler, ParamError, Stability,
};
use mixer_model::{FieldValue, Instance, Template, Value};
use mixer_remote::{
    Authentication, InferredField, MutualTls, PemFile, RemoteConnection, RemoteHandlerSpec,
    RemoteInstance, Tls,
};

/// What `mixer conformance` checks, and how.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["adapter", "wasm"])))]
pub struct ConformanceArgs {
    /// The address of an out-of-process adapter (any language): its templates are learned by
    /// gRPC server reflection (its `Handle<Template>Service` services) unless --template
    /// names them.
    #[arg(long, value_name = "HOST:PORT")]
    adapter: Option<String>,
    /// A Wasm plugin (a component file, as a `wasm` handler's `module`).
    #[arg(long, value_name = "FILE")]
    wasm: Option<PathBuf>,
    /// The handler's params, as a handler document's `params`: a YAML or JSON file, or the
    /// text itself (`'{allowed: [a]}'`). For --wasm, a `wasm` handler's params (`config`,
    /// `limits`) without `module`. Default: `{}`.
    #[arg(long, value_name = "FILE|YAML")]
    params: Option<String>,
    /// A template to exercise, by its config name (`listentry`); repeat or separate with
    /// commas. Default: every template the adapter declares. Required for an out-of-process
    /// adapter that does not serve gRPC server reflection.
    #[arg(long = "template", value_name = "TEMPLATE", value_delimiter = ',')]
    templates: Vec<String>,
    /// A YAML or JSON file of instances to send in place of the kit's default one of their
    /// template: a list of `{template: listentry, name: ..., fields: {value: b}}` (`name`
    /// optional; a field is a string, number or boolean, or a map of them such as
    /// `dimensions`).
    #[arg(long, value_name = "FILE")]
    instances: Option<PathBuf>,
    /// Params whose backend cannot answer (a closed port): the kit then checks that every
    /// call fails in time, saying why, so the handler's fail policy can apply. Without it
    /// that promise is not checked.
    #[arg(long, value_name = "FILE|YAML")]
    unreachable_params: Option<String>,
    /// Reach the out-of-process adapter over TLS, trusting the CAs in this PEM file on top of
    /// the system's (a handler's `authentication.tls.caCertificates`); reflection is asked
    /// over the same connection.
    #[arg(long, value_name = "PEM")]
    ca_certificates: Option<PathBuf>,
    /// With TLS: the name the adapter's certificate must carry (and the SNI sent); default
    /// the host of --adapter.
    #[arg(long, value_name = "NAME")]
    server_name: Option<String>,
    /// Mutual TLS: the certificate (chain) presented to the adapter; with --private-key.
    #[arg(long, value_name = "PEM", requires = "private_key")]
    client_certificate: Option<PathBuf>,
    /// Mutual TLS: the key of --client-certificate.
    #[arg(long, value_name = "PEM", requires = "client_certificate")]
    private_key: Option<PathBuf>,
    /// The deadline of each call to an out-of-process adapter (a handler's
    /// `connection.timeout`).
    #[arg(long, default_value = "1s", value_parser = crate::parse_duration)]
    timeout: Duration,
}

/// Runs the kit against the adapter `args` names and prints its report.
pub fn run(args: &ConformanceArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mixer conformance: no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(check(args)) {
        Ok(report) => {
            println!("{report}");
            if report.holds() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("mixer conformance: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn check(args: &ConformanceArgs) -> Result<Report, String> {
    let params = match &args.params {
        Some(p) => read_params(p, "--params")?,
        None => Params::Object(Default::default()),
    };
    let unreachable = match &args.unreachable_params {
        Some(p) => Some(read_params(p, "--unreachable-params")?),
        None => None,
    };
    let asked = args
        .templates
        .iter()
        .map(|name| {
            Template::from_name(name.trim()).ok_or_else(|| {
                let known: Vec<&str> = Template::ALL.iter().map(|t| t.name()).collect();
                format!(
                    "--template {name:?} is no template (one of: {})",
                    known.join(", ")
                )
            })
        })
        .collect::<Result<Vec<Template>, String>>()?;
    let given = match &args.instances {
        Some(file) => read_instances(file)?,
        None => Vec::new(),
    };
    let (case, name) = match (&args.adapter, &args.wasm) {
        (Some(address), _) => (
            remote_case(
                address,
                Link {
                    timeout: args.timeout,
                    tls: tls(args)?,
                },
                asked,
                &given,
                params,
                unreachable,
            )
            .await?,
            format!("the adapter at {address}"),
        ),
        (None, Some(module)) => (
            wasm_case(module, &asked, &given, params, unreachable)?,
            format!("the plugin {}", module.display()),
        ),
        (None, None) => return Err("name an adapter: --adapter HOST:PORT or --wasm FILE".into()),
    };
    let exercised: Vec<&str> = case.instances.iter().map(|i| i.template.name()).collect();
    println!("templates exercised: {}", exercised.join(", "));
    let mut report = testkit::report(&case).await;
    report.adapter = name;
    if args.adapter.is_some() {
        // Its info was made here, from what it serves: nothing of the adapter's to check.
        for (promise, outcome) in &mut report.promises {
            if *promise == testkit::promise::INFO {
                *outcome = testkit::Outcome::NotChecked(
                    "an out-of-process adapter declares its templates by the services it serves"
                        .into(),
                );
            }
        }
    }
    Ok(report)
}

/// How the mixer's client reaches an out-of-process adapter.
struct Link {
    /// Each call's deadline.
    timeout: Duration,
    /// TLS, as a handler's `connection.authentication` gives it.
    tls: Option<Authentication>,
}

/// The TLS the options ask for, with its PEM files read (rustls judges them when the
/// client is built, as at config load).
fn tls(args: &ConformanceArgs) -> Result<Option<Authentication>, String> {
    let pem = |path: &PathBuf, flag: &str| {
        std::fs::read(path)
            .map(|bytes| PemFile {
                path: path.clone(),
                pem: Arc::from(bytes),
            })
            .map_err(|e| format!("{flag} {}: {e}", path.display()))
    };
    let ca_certificates = match &args.ca_certificates {
        Some(p) => Some(pem(p, "--ca-certificates")?),
        None => None,
    };
    let server_name = args.server_name.clone();
    Ok(match (&args.client_certificate, &args.private_key) {
        (Some(cert), Some(key)) => Some(Authentication::Mutual(MutualTls {
            client_certificate: pem(cert, "--client-certificate")?,
            private_key: pem(key, "--private-key")?,
            ca_certificates,
            server_name,
        })),
        _ if ca_certificates.is_some() || server_name.is_some() => Some(Authentication::Tls(Tls {
            ca_certificates,
            token: None,
            server_name,
        })),
        _ => None,
    })
}

/// Params from a file, or the text itself, as YAML (of which JSON is a part).
fn read_params(given: &str, flag: &str) -> Result<Params, String> {
    let path = std::path::Path::new(given);
    let text = if path.is_file() {
        std::fs::read_to_string(path).map_err(|e| format!("{flag} {given}: {e}"))?
    } else {
        given.to_owned()
    };
    match serde_saphyr::from_str::<Params>(&text) {
        // An adapter's params are a map; anything else is most likely a mistyped file name.
        Ok(params @ (Params::Object(_) | Params::Null)) => Ok(params),
        Ok(_) => Err(format!(
            "{flag} {given:?}: no such file, and not a map of params"
        )),
        Err(e) => Err(format!(
            "{flag}: neither a readable file nor YAML params: {e}"
        )),
    }
}

/// One instance of a `--instances` file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct GivenInstance {
    template: String,
    name: Option<String>,
    #[serde(default)]
    fields: serde_json::Map<String, serde_json::Value>,
}

fn read_instances(file: &std::path::Path) -> Result<Vec<Instance>, String> {
    let at = |e: &dyn std::fmt::Display| format!("--instances {}: {e}", file.display());
    let text = std::fs::read_to_string(file).map_err(|e| at(&e))?;
    let given: Vec<GivenInstance> = serde_saphyr::from_str(&text).map_err(|e| at(&e))?;
    given
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            let template = Template::from_name(&g.template)
                .ok_or_else(|| at(&format!("[{i}].template: {:?} is no template", g.template)))?;
            let mut fields = Vec::new();
            for (field, value) in g.fields {
                let value = field_value(&value)
                    .ok_or_else(|| at(&format!("[{i}].fields.{field}: {value} is no field value (a string, number or boolean, or a map of them)")))?;
                fields.push((leak_str(field), value));
            }
            let name = g
                .name
                .unwrap_or_else(|| testkit::default_instance(template).name.to_string());
            Ok(Instance {
                name: name.into(),
                template,
                fields,
            })
        })
        .collect()
}

fn field_value(value: &serde_json::Value) -> Option<FieldValue> {
    match value {
        serde_json::Value::Object(entries) => entries
            .iter()
            .map(|(k, v)| Some((Arc::from(k.as_str()), scalar(v)?)))
            .collect::<Option<Vec<_>>>()
            .map(FieldValue::Map),
        other => scalar(other).map(FieldValue::Value),
    }
}

fn scalar(value: &serde_json::Value) -> Option<Value> {
    match value {
        serde_json::Value::String(s) => Some(Value::from(s.as_str())),
        serde_json::Value::Bool(b) => Some(Value::from(*b)),
        serde_json::Value::Number(n) => n
            .as_i64()
            .map(Value::from)
            .or_else(|| n.as_f64().map(Value::from)),
        _ => None,
    }
}

/// `instances`, each of a template `given` has one of replaced by it, and the rest of
/// `given` added.
fn with_given(mut instances: Vec<Instance>, given: &[Instance]) -> Vec<Instance> {
    for g in given {
        match instances.iter_mut().find(|i| i.template == g.template) {
            Some(i) => *i = g.clone(),
            None => instances.push(g.clone()),
        }
    }
    instances
}

fn wasm_case(
    module: &std::path::Path,
    asked: &[Template],
    given: &[Instance],
    params: Params,
    unreachable: Option<Params>,
) -> Result<Case, String> {
    if !module.is_file() {
        return Err(format!("--wasm {}: no such file", module.display()));
    }
    let with_module = |params: Params, flag: &str| match params {
        Params::Object(mut fields) => {
            fields.insert("module".into(), module.display().to_string().into());
            Ok(Params::Object(fields))
        }
        Params::Null => Ok(serde_json::json!({"module": module.display().to_string()})),
        other => Err(format!(
            "{flag}: a wasm handler's params are a map (`config`, `limits`), not {other}"
        )),
    };
    let adapter = crate::adapters::builtin()
        .get("wasm")
        .ok_or("the Wasm plugin host is not built in")?
        .clone();
    let mut case = testkit::case(adapter, with_module(params, "--params")?);
    if !asked.is_empty() {
        case.instances.retain(|i| asked.contains(&i.template));
        for t in asked {
            if !case.instances.iter().any(|i| i.template == *t) {
                case.instances.push(testkit::default_instance(*t));
            }
        }
    }
    case.instances = with_given(std::mem::take(&mut case.instances), given);
    if let Some(params) = unreachable {
        case.unreachable = Some(Unreachable {
            params: with_module(params, "--unreachable-params")?,
            immediate: leak(case.instances.iter().map(|i| i.template).collect()),
        });
    }
    Ok(case)
}

/// The kit's case for the adapter at `address`: every call goes to it at once, and its
/// handler offers every variety (the mixer learns what the adapter serves only by calling),
/// so calls of a template it does not declare must fail.
async fn remote_case(
    address: &str,
    link: Link,
    asked: Vec<Template>,
    given: &[Instance],
    params: Params,
    unreachable: Option<Params>,
) -> Result<Case, String> {
    let templates = if asked.is_empty() {
        learn_templates(address, &link).await.map_err(|why| {
            format!(
                "could not learn the templates of the adapter at {address} by gRPC server \
                 reflection ({why}); name them with --template"
            )
        })?
    } else {
        asked
    };
    let templates = leak(templates);
    let defaults = templates.iter().map(|t| testkit::default_instance(*t));
    let instances = with_given(defaults.collect(), given);
    let remote = Remote {
        info: AdapterInfo {
            name: leak_str(address.to_owned()),
            description: "an out-of-process adapter, through the mixer's adapter client",
            templates,
            cacheable: true,
            stability: Stability::Alpha,
        },
        address: address.to_owned(),
        link,
        instances: instances.iter().map(remote_instance).collect(),
    };
    Ok(Case {
        adapter: Arc::new(remote),
        params,
        unreachable: unreachable.map(|params| Unreachable {
            params,
            immediate: templates,
        }),
        instances,
        offers_every_variety: true,
    })
}

// The report and the case hold `&'static` names and slices; the command runs the kit once
// and exits, so what is leaked is leaked once.
fn leak<T>(items: Vec<T>) -> &'static [T] {
    Box::leak(items.into_boxed_slice())
}

fn leak_str(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

/// What the mixer sends an adapter about an instance at Validate and CreateSession: each
/// field's type, as the config's expressions would give it.
fn remote_instance(instance: &Instance) -> RemoteInstance {
    let mut fields = Vec::new();
    for (field, value) in &instance.fields {
        match (value, value.entries()) {
            (FieldValue::Value(v), _) => fields.push(InferredField {
                field,
                key: None,
                value_type: Some(v.value_type()),
            }),
            (_, entries) => {
                fields.extend(
                    entries
                        .unwrap_or_default()
                        .iter()
                        .map(|(key, v)| InferredField {
                            field,
                            key: Some(key.clone()),
                            value_type: Some(v.value_type()),
                        }),
                );
            }
        }
    }
    RemoteInstance {
        name: instance.name.clone(),
        template: instance.template,
        fields,
    }
}

/// The templates the adapter at `address` serves, by gRPC server reflection through the
/// mixer's own adapter client (so over the TLS given), which asks `grpc.reflection.v1`, else
/// `v1alpha` (what Python's grpcio-reflection serves).
async fn learn_templates(address: &str, link: &Link) -> Result<Vec<Template>, String> {
    let connection = RemoteConnection {
        address: address.to_owned(),
        timeout: Some(link.timeout),
        authentication: link.tls.clone(),
    };
    match mixer_oop::templates_served(&connection, link.timeout.max(Duration::from_secs(2))).await?
    {
        None => Err("it serves no gRPC server reflection".into()),
        Some(t) if t.is_empty() => Err("it lists no Handle<Template>Service".into()),
        Some(t) => Ok(t),
    }
}

/// An out-of-process adapter seen through the adapter API, its params the adapter's own.
struct Remote {
    info: AdapterInfo,
    address: String,
    link: Link,
    /// The instances the kit sends it, for Validate and CreateSession.
    instances: Vec<RemoteInstance>,
}

impl Adapter for Remote {
    type Config = Params;
    type Compiled = Params;

    fn info(&self) -> &AdapterInfo {
        &self.info
    }

    fn compile(&self, params: Params) -> Result<Params, Vec<ParamError>> {
        through_mixer_oop(self, &params, "conformance.validate".into(), false)
            .map_err(|e| vec![ParamError::new("", e.message)])?;
        Ok(params)
    }

    fn build(&self, params: &Params, ctx: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        through_mixer_oop(self, params, ctx.handler_name.clone(), true)?.ok_or_else(|| {
            AdapterError::permanent(ErrorKind::Internal, "the adapter client built nothing")
        })
    }
}

/// The mixer's own out-of-process adapter client (mixer/oop), as `serve` sets it up: asks
/// the adapter's `Validate` (`build` false) or builds the handler (`build` true). The one
/// place this command uses that crate. An adapter that does not answer `Validate` is a
/// broken promise here, where `serve` would accept its params with a warning.
fn through_mixer_oop(
    remote: &Remote,
    params: &Params,
    handler_name: Arc<str>,
    build: bool,
) -> Result<Option<Arc<dyn Handler>>, AdapterError> {
    let connection = RemoteConnection {
        address: remote.address.clone(),
        timeout: Some(remote.link.timeout),
        authentication: remote.link.tls.clone(),
    };
    let spec = RemoteHandlerSpec {
        handler_name,
        adapter: remote.info.name,
        params,
        params_descriptor: None,
        session_based: None,
        connection: &connection,
        instances: &remote.instances,
        declared_templates: Some(remote.info.templates),
    };
    let factory = mixer_oop::RemoteAdapterFactory::new(mixer_oop::OopOptions {
        validate_timeout: remote.link.timeout.max(Duration::from_secs(2)),
        ..mixer_oop::OopOptions::default()
    });
    if build {
        return factory
            .build_handler(&spec)
            .map(|h| Some(h as Arc<dyn Handler>));
    }
    let invalid = |m: String| AdapterError::permanent(ErrorKind::Internal, m);
    match factory.validate_blocking(&spec) {
        mixer_oop::ValidateOutcome::Accepted => Ok(None),
        mixer_oop::ValidateOutcome::Rejected(why) => Err(invalid(why)),
        mixer_oop::ValidateOutcome::Unreachable(why) => {
            Err(invalid(format!("Validate did not answer: {why}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reflection service over a descriptor set that names one `Handle<Template>Service`
    /// and one other service, as an adapter that also serves health would; on a loopback port.
    async fn reflection(v1alpha_only: bool) -> std::net::SocketAddr {
        use prost::Message as _;
        let service = |name: &str| prost_types::ServiceDescriptorProto {
            name: Some(name.into()),
            ..Default::default()
        };
        let file = |package: &str, service| prost_types::FileDescriptorProto {
            name: Some(format!("{package}/service.proto")),
            package: Some(package.into()),
            service: vec![service],
            syntax: Some("proto3".into()),
            ..Default::default()
        };
        let set = prost_types::FileDescriptorSet {
            file: vec![
                file("listentry", service("HandleListEntryService")),
                file("other", service("Other")),
            ],
        }
        .encode_to_vec();
        let builder = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(&set);
        let router = if v1alpha_only {
            tonic::transport::Server::builder()
                .add_service(builder.build_v1alpha().expect("reflection"))
        } else {
            tonic::transport::Server::builder().add_service(builder.build_v1().expect("reflection"))
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(
            router.serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        addr
    }

    #[tokio::test]
    async fn the_templates_are_learned_by_reflection_v1_or_v1alpha() {
        for v1alpha_only in [false, true] {
            let addr = reflection(v1alpha_only).await;
            let link = Link {
                timeout: Duration::from_secs(5),
                tls: None,
            };
            let templates = learn_templates(&addr.to_string(), &link)
                .await
                .expect("reflection answers");
            assert_eq!(
                templates,
                [Template::ListEntry],
                "v1alpha only: {v1alpha_only}"
            );
        }
    }

    #[tokio::test]
    async fn an_adapter_without_reflection_is_asked_for_its_templates() {
        // A listener that is no gRPC server at all.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        drop(listener);
        let why = remote_case(
            &addr.to_string(),
            Link {
                timeout: Duration::from_millis(500),
                tls: None,
            },
            Vec::new(),
            &[],
            Params::Null,
            None,
        )
        .await
        .err()
        .expect("no templates");
        assert!(
            why.contains("by gRPC server reflection") && why.ends_with("name them with --template"),
            "{why}"
        );
    }

    #[test]
    fn an_instances_file_replaces_the_default_instance_of_its_template() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("instances.yaml");
        std::fs::write(
            &file,
            "- {template: listentry, fields: {value: b}}\n\
             - {template: metric, name: m.instance.ns, fields: {value: 2, dimensions: {code: 200}}}\n",
        )
        .expect("write");
        let given = read_instances(&file).expect("instances");
        let defaults = vec![
            testkit::default_instance(Template::ListEntry),
            testkit::default_instance(Template::CheckNothing),
        ];
        let instances = with_given(defaults, &given);
        assert_eq!(instances.len(), 3);
        assert_eq!(&*instances[0].name, "entry.instance.default");
        assert_eq!(
            instances[0].fields,
            [("value", FieldValue::Value(Value::from("b")))]
        );
        assert_eq!(instances[1].template, Template::CheckNothing);
        assert_eq!(&*instances[2].name, "m.instance.ns");
        assert_eq!(
            instances[2].fields[1],
            (
                "dimensions",
                FieldValue::Map(vec![(Arc::from("code"), Value::from(200_i64))])
            )
        );

        std::fs::write(&file, "- {template: listentry, fields: {value: [1]}}\n").expect("write");
        let why = read_instances(&file).expect_err("a list is no field value");
        assert!(
            why.contains("[0].fields.value: [1] is no field value"),
            "{why}"
        );
        std::fs::write(&file, "- {template: listentry, feilds: {}}\n").expect("write");
        let why = read_instances(&file).expect_err("an unknown key");
        assert!(why.contains("feilds"), "{why}");
    }

    #[test]
    fn params_are_a_file_or_the_text_itself() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("params.yaml");
        std::fs::write(&file, "allowed: [a]\n").expect("write");
        let from_file = read_params(&file.display().to_string(), "--params").expect("a file");
        assert_eq!(from_file, serde_json::json!({"allowed": ["a"]}));
        let inline = read_params(r#"{"allowed": ["a"]}"#, "--params").expect("inline");
        assert_eq!(inline, from_file);
        let bad = read_params("{allowed: [a", "--params").expect_err("not YAML");
        assert!(bad.starts_with("--params: neither"), "{bad}");
        let typo = read_params("parms.yaml", "--params").expect_err("no such file");
        assert_eq!(
            typo,
            r#"--params "parms.yaml": no such file, and not a map of params"#
        );
    }
}
