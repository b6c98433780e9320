//! `deploy/kubernetes/`, checked offline: every overlay rendered with the real `kubectl
//! kustomize` equals its committed golden file (`MIXER_UPDATE_GOLDEN=1` rewrites them), every
//! rendered object validates strictly against the Kubernetes 1.32 schemas (PyPI
//! `kubernetes-validate`: an unknown field is an error), invariants hold over the rendered
//! objects, and the rendered config and arguments are served by the real mixer, its probe port
//! answering `grpc.health.v1.Health/Check`.
//!
//! Without kubectl or the validator the tests are skipped, except under `CI=1` where that is a
//! failure (`.ci/run` installs the validator and says what is missing).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mixer_tests::free_addr;
#[path = "support/deploy.rs"]
mod deploy;
use deploy::{check_golden, deploy_dir, kubectl, missing, objects, render};
use serde_json::Value;

/// Every overlay (and the base), by the name of its golden file.
const OVERLAYS: &[(&str, &str)] = &[
    ("base", "base"),
    ("dev", "overlays/dev"),
    ("ha", "overlays/ha"),
    ("redis", "overlays/redis"),
    ("monitoring", "overlays/monitoring"),
    ("tls", "overlays/tls"),
];

/// The Kubernetes version the objects are validated against (kubectl 1.32 on the build
/// machines; the Deployment's `preStop.sleep` needs 1.30 or later).
const KUBERNETES_VERSION: &str = "1.32";

fn kubernetes_dir() -> PathBuf {
    deploy_dir("kubernetes")
}

/// `kubernetes-validate` from the venv `.ci/run` makes (`MIXER_KUBERNETES_VALIDATE`).
fn validator() -> Option<PathBuf> {
    let path = PathBuf::from(
        std::env::var("MIXER_KUBERNETES_VALIDATE")
            .unwrap_or_else(|_| "/tmp/mixer-deploy-venv/bin/kubernetes-validate".into()),
    );
    let ok = Command::new(&path)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Some(path)
    } else {
        missing(&format!(
            "{} not found: python3 -m venv /tmp/mixer-deploy-venv && \
             /tmp/mixer-deploy-venv/bin/pip install -r deploy/requirements.txt \
             (or set MIXER_KUBERNETES_VALIDATE)",
            path.display()
        ))
    }
}

fn golden_path(name: &str) -> PathBuf {
    kubernetes_dir()
        .join("rendered")
        .join(format!("{name}.yaml"))
}

/// Each overlay as kubectl renders it now, by golden name.
fn rendered() -> Option<Vec<(&'static str, String)>> {
    let kubectl = kubectl()?;
    Some(
        OVERLAYS
            .iter()
            .map(|(name, dir)| (*name, render(&kubectl, &kubernetes_dir().join(dir))))
            .collect(),
    )
}

#[test]
fn every_overlay_renders_as_its_golden_file() {
    let Some(rendered) = rendered() else { return };
    let golden: Vec<(PathBuf, String)> = rendered
        .into_iter()
        .map(|(name, text)| (golden_path(name), text))
        .collect();
    check_golden("deploy_kubernetes", &golden);
}

#[test]
fn every_rendered_object_validates_strictly_against_kubernetes_1_32() {
    let Some(rendered) = rendered() else { return };
    let Some(validator) = validator() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let validate = |file: &Path| {
        Command::new(&validator)
            .args(["--kubernetes-version", KUBERNETES_VERSION, "--strict"])
            .args(["--quiet"])
            .arg(file)
            .output()
            .expect("run kubernetes-validate")
    };
    // The validator must refuse an unknown field, or passing proves nothing.
    let (_, base) = &rendered[0];
    let tampered = base.replacen(
        "imagePullPolicy: IfNotPresent",
        "imagePullPolicy: IfNotPresent\n        imagePulPolicy: Always",
        1,
    );
    assert_ne!(&tampered, base, "the base has the line to tamper with");
    let bad = dir.path().join("tampered.yaml");
    std::fs::write(&bad, tampered).expect("write");
    let out = validate(&bad);
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stdout).contains("imagePulPolicy"),
        "kubernetes-validate --strict accepted an unknown field: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    for (name, text) in &rendered {
        // One file per overlay (the validator names the object that fails), custom resources
        // aside: they are not in the Kubernetes schemas (see below).
        let mut documents = Vec::new();
        for object in objects(text) {
            if object["kind"] == "ServiceMonitor" {
                let id = format!("{name}: ServiceMonitor/{}", object["metadata"]["name"]);
                check_service_monitor(&id, &object);
            } else {
                documents.push(serde_json::to_string(&object).expect("json"));
            }
        }
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, documents.join("\n---\n")).expect("write");
        let out = validate(&file);
        let said = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !said.contains("Couldn't find schema"),
            "{name} does not validate against Kubernetes {KUBERNETES_VERSION}: {said}"
        );
    }
}

/// The ServiceMonitor is checked leniently, by hand: no schema for it is vendored. Every
/// field it uses must be one the Prometheus Operator's CRD
/// (monitoring.coreos.com_servicemonitors.yaml, `monitoring.coreos.com/v1`) defines, and the
/// endpoint must name the Service's admin port.
fn check_service_monitor(id: &str, object: &Value) {
    let known = |value: &Value, allowed: &[&str], at: &str| {
        for key in value.as_object().expect("an object").keys() {
            assert!(
                allowed.contains(&key.as_str()),
                "{id}: {at}.{key} is not a ServiceMonitor field"
            );
        }
    };
    assert_eq!(object["apiVersion"], "monitoring.coreos.com/v1", "{id}");
    known(object, &["apiVersion", "kind", "metadata", "spec"], "");
    let spec = &object["spec"];
    known(
        spec,
        &[
            "selector",
            "namespaceSelector",
            "endpoints",
            "jobLabel",
            "targetLabels",
            "podTargetLabels",
            "sampleLimit",
        ],
        "spec",
    );
    known(
        &spec["selector"],
        &["matchLabels", "matchExpressions"],
        "spec.selector",
    );
    known(
        &spec["namespaceSelector"],
        &["any", "matchNames"],
        "spec.namespaceSelector",
    );
    for endpoint in spec["endpoints"].as_array().expect("endpoints") {
        known(
            endpoint,
            &[
                "port",
                "path",
                "scheme",
                "interval",
                "scrapeTimeout",
                "honorLabels",
                "relabelings",
                "metricRelabelings",
            ],
            "spec.endpoints[]",
        );
        assert_eq!(endpoint["port"], "admin", "{id}: scrapes the admin port");
        assert_eq!(endpoint["path"], "/metrics", "{id}");
    }
}

/// The objects of one rendered overlay, by kind and name.
struct Rendered {
    name: &'static str,
    objects: Vec<Value>,
}

impl Rendered {
    fn all(&self, kind: &str) -> Vec<&Value> {
        self.objects.iter().filter(|o| o["kind"] == kind).collect()
    }

    fn one(&self, kind: &str, name: &str) -> Option<&Value> {
        self.objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }

    fn mixer(&self) -> &Value {
        self.one("Deployment", "mixer")
            .unwrap_or_else(|| panic!("{}: no Deployment mixer", self.name))
    }
}

fn labels(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn selects(selector: &Value, pod_labels: &BTreeMap<String, String>) -> bool {
    let wanted = labels(selector);
    !wanted.is_empty() && wanted.iter().all(|(k, v)| pod_labels.get(k) == Some(v))
}

/// The value of `--flag=VALUE` in a container's args.
fn flag<'a>(args: &'a [Value], name: &str) -> Option<&'a str> {
    args.iter()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix(name)?.strip_prefix('='))
}

fn seconds(text: &str) -> u64 {
    text.strip_suffix('s')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text:?} is not whole seconds"))
}

fn check_invariants(r: &Rendered) {
    let name = r.name;
    // Everything in the mixer's namespace, what overlays add included (a resource an overlay
    // adds without one would go to whatever namespace kubectl's context names).
    for object in &r.objects {
        let cluster_scoped = ["Namespace", "ClusterRole", "ClusterRoleBinding"];
        if !cluster_scoped.contains(&object["kind"].as_str().unwrap_or_default()) {
            assert_eq!(
                object["metadata"]["namespace"], "mixer",
                "{name}: {} {} is not in namespace mixer",
                object["kind"], object["metadata"]["name"]
            );
        }
    }
    // kubernetesenv reads pods and their owners: get/list/watch only, bound to the mixer's
    // own service account in its namespace.
    let role = r
        .one("ClusterRole", "mixer-kubernetesenv")
        .expect("ClusterRole mixer-kubernetesenv");
    for rule in role["rules"].as_array().expect("rules") {
        assert_eq!(
            rule["verbs"],
            serde_json::json!(["get", "list", "watch"]),
            "{name}: {rule}"
        );
    }
    let granted: Vec<&str> = role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["resources"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    for needed in ["pods", "replicasets", "replicationcontrollers"] {
        assert!(
            granted.contains(&needed),
            "{name}: kubernetesenv cannot watch {needed}"
        );
    }
    let binding = r
        .one("ClusterRoleBinding", "mixer-kubernetesenv")
        .expect("ClusterRoleBinding mixer-kubernetesenv");
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "mixer", "namespace": "mixer"}]),
        "{name}"
    );
    for deployment in r.all("Deployment") {
        let dname = &deployment["metadata"]["name"];
        let id = format!("{name}: Deployment {dname}");
        let pod = &deployment["spec"]["template"];
        let pod_labels = labels(&pod["metadata"]["labels"]);
        assert!(
            selects(&deployment["spec"]["selector"]["matchLabels"], &pod_labels),
            "{id}: selector does not match its pod labels"
        );
        let spec = &pod["spec"];
        assert_eq!(spec["automountServiceAccountToken"], false, "{id}");
        assert_eq!(spec["securityContext"]["runAsNonRoot"], true, "{id}");
        assert_eq!(
            spec["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
            "{id}"
        );
        for spread in spec["topologySpreadConstraints"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(
                selects(&spread["labelSelector"]["matchLabels"], &pod_labels),
                "{id}: a topology spread constraint does not select its own pods"
            );
        }
        for c in spec["containers"].as_array().expect("containers") {
            let cid = format!("{id} container {}", c["name"]);
            for what in ["requests", "limits"] {
                for resource in ["cpu", "memory"] {
                    assert!(
                        c["resources"][what][resource].is_string(),
                        "{cid}: no {what}.{resource}"
                    );
                }
            }
            let sc = &c["securityContext"];
            assert_eq!(sc["runAsNonRoot"], true, "{cid}: runAsNonRoot");
            assert!(
                sc["runAsUser"].as_u64().is_some_and(|u| u > 0),
                "{cid}: a fixed non-root UID"
            );
            assert_eq!(sc["readOnlyRootFilesystem"], true, "{cid}: read-only root");
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{cid}");
            assert_eq!(
                sc["capabilities"]["drop"],
                serde_json::json!(["ALL"]),
                "{cid}"
            );
            assert!(
                sc["capabilities"]["add"].is_null(),
                "{cid}: adds capabilities"
            );
            for mount in c["volumeMounts"].as_array().into_iter().flatten() {
                assert!(
                    mount["subPath"].is_null() && mount["subPathExpr"].is_null(),
                    "{cid}: {} is a subPath mount, which Kubernetes never updates",
                    mount["mountPath"]
                );
            }
        }
        // Every Service that selects these pods targets a port the pods have.
        for service in r.all("Service") {
            if !selects(&service["spec"]["selector"], &pod_labels) {
                continue;
            }
            let sid = format!("{name}: Service {}", service["metadata"]["name"]);
            for port in service["spec"]["ports"].as_array().expect("ports") {
                let target = &port["targetPort"];
                let found = spec["containers"]
                    .as_array()
                    .expect("containers")
                    .iter()
                    .flat_map(|c| c["ports"].as_array().into_iter().flatten())
                    .any(|p| &p["name"] == target || &p["containerPort"] == target);
                assert!(
                    found,
                    "{sid}: targetPort {target} is no container port of {dname}"
                );
            }
        }
    }

    // The mixer itself.
    let deployment = r.mixer();
    let spec = &deployment["spec"]["template"]["spec"];
    let replicas = deployment["spec"]["replicas"].as_u64().expect("replicas");
    assert_eq!(
        deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0,
        "{name}: a rollout never lowers capacity"
    );
    let container = &spec["containers"][0];
    let args = container["args"].as_array().expect("args");
    let port_of = |port_name: &str| {
        container["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|p| p["name"] == port_name)
            .and_then(|p| p["containerPort"].as_u64())
            .unwrap_or_else(|| panic!("{name}: no container port {port_name}"))
    };
    // Each named port is the one its listener binds.
    for (port_name, listener) in [
        ("grpc", "--grpc-addr"),
        ("http", "--http-addr"),
        ("admin", "--admin-addr"),
    ] {
        let addr: SocketAddr = flag(args, listener)
            .unwrap_or_else(|| panic!("{name}: no {listener}"))
            .parse()
            .expect("an address");
        assert!(
            addr.ip().is_unspecified(),
            "{name}: {listener} binds every address"
        );
        assert_eq!(
            u64::from(addr.port()),
            port_of(port_name),
            "{name}: {listener}"
        );
    }
    // Probes: gRPC health on the admin port (see deploy/README.md for why not the gRPC port).
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
        let grpc = &container[probe]["grpc"];
        assert!(grpc.is_object(), "{name}: {probe} is a gRPC probe");
        assert_eq!(
            grpc["port"].as_u64(),
            Some(port_of("admin")),
            "{name}: {probe} port"
        );
        assert!(
            grpc["service"].is_null(),
            "{name}: {probe} asks for the server's overall health (service \"\")"
        );
    }
    // Longer than the preStop pause, the shutdown delay, and the drain and the report
    // delivery after it (each up to --drain-timeout).
    let drain = seconds(flag(args, "--drain-timeout").expect("--drain-timeout"));
    let delay = flag(args, "--shutdown-delay").map_or(0, seconds);
    let pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_u64()
        .expect("a preStop sleep");
    let grace = spec["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("grace");
    assert!(
        grace > pause + delay + 2 * drain,
        "{name}: grace period {grace}s is not over preStop {pause}s + shutdown delay {delay}s \
         + 2 x drain {drain}s"
    );
    // The config: a directory mount of a volume holding the ConfigMap, named by --config.
    let config_dir = flag(args, "--config").expect("--config");
    let mount = container["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .find(|m| m["mountPath"] == config_dir)
        .unwrap_or_else(|| panic!("{name}: nothing mounted at --config {config_dir}"));
    let volume = spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the config volume");
    let sources = volume["projected"]["sources"]
        .as_array()
        .expect("projected");
    for source in sources {
        let (kind, object) = if source["configMap"].is_object() {
            ("ConfigMap", &source["configMap"])
        } else {
            ("Secret", &source["secret"])
        };
        assert!(
            r.one(kind, object["name"].as_str().expect("name"))
                .is_some(),
            "{name}: the config volume's {kind} {} is not rendered",
            object["name"]
        );
    }

    // HPA and PDB agree with the replicas.
    let hpas = r.all("HorizontalPodAutoscaler");
    let pdbs = r.all("PodDisruptionBudget");
    if replicas < 2 {
        assert!(
            hpas.is_empty() && pdbs.is_empty(),
            "{name}: one replica with an HPA or a PDB"
        );
    } else {
        assert_eq!(hpas.len(), 1, "{name}: one HPA");
        let hpa = &hpas[0]["spec"];
        assert_eq!(hpa["scaleTargetRef"]["name"], "mixer", "{name}");
        assert_eq!(
            hpa["minReplicas"].as_u64(),
            Some(replicas),
            "{name}: HPA minReplicas"
        );
        assert!(hpa["maxReplicas"].as_u64() >= Some(replicas), "{name}");
        assert_eq!(hpa["metrics"][0]["resource"]["name"], "cpu", "{name}");
        assert_eq!(pdbs.len(), 1, "{name}: one PDB");
        let pdb = &pdbs[0]["spec"];
        let pod_labels = labels(&deployment["spec"]["template"]["metadata"]["labels"]);
        assert!(
            selects(&pdb["selector"]["matchLabels"], &pod_labels),
            "{name}: PDB"
        );
        // A drain can always take one pod, and never all of them.
        let allowed = match (pdb["maxUnavailable"].as_u64(), pdb["minAvailable"].as_u64()) {
            (Some(max), None) => max,
            (None, Some(min)) => replicas.saturating_sub(min),
            other => panic!("{name}: PDB with {other:?}"),
        };
        assert!(
            (1..replicas).contains(&allowed),
            "{name}: the PDB lets {allowed} of {replicas} go"
        );
    }

    // Services: grpc, http and admin by name; gRPC speaks h2c (https under TLS).
    let tls = flag(args, "--tls-cert").is_some();
    for sname in ["mixer", "mixer-headless"] {
        let service = r
            .one("Service", sname)
            .unwrap_or_else(|| panic!("{name}: no Service {sname}"));
        let ports = service["spec"]["ports"].as_array().expect("ports");
        let names: Vec<&str> = ports.iter().filter_map(|p| p["name"].as_str()).collect();
        assert_eq!(names, ["grpc", "http", "admin"], "{name}: Service {sname}");
        let want = if tls { "https" } else { "kubernetes.io/h2c" };
        assert_eq!(
            ports[0]["appProtocol"], want,
            "{name}: Service {sname} grpc"
        );
    }
    assert_eq!(
        r.one("Service", "mixer-headless").expect("headless")["spec"]["clusterIP"],
        "None",
        "{name}"
    );

    // The NetworkPolicy covers the mixer's pods and names its ports.
    let policy = r
        .one("NetworkPolicy", "mixer")
        .expect("NetworkPolicy mixer");
    let pod_labels = labels(&deployment["spec"]["template"]["metadata"]["labels"]);
    assert!(selects(
        &policy["spec"]["podSelector"]["matchLabels"],
        &pod_labels
    ));
    let ingress_ports: Vec<&Value> = policy["spec"]["ingress"]
        .as_array()
        .expect("ingress")
        .iter()
        .flat_map(|rule| rule["ports"].as_array().into_iter().flatten())
        .map(|p| &p["port"])
        .collect();
    for port in ["grpc", "http", "admin"] {
        assert!(
            ingress_ports.iter().any(|p| *p == port),
            "{name}: the NetworkPolicy lets nothing in to {port}"
        );
    }
    // A Redis the overlay brings is reachable through the mixer's egress rules.
    if let Some(redis) = r.one("Deployment", "mixer-redis") {
        let redis_labels = labels(&redis["spec"]["template"]["metadata"]["labels"]);
        let reachable = policy["spec"]["egress"]
            .as_array()
            .expect("egress")
            .iter()
            .any(|rule| {
                rule["to"].as_array().into_iter().flatten().any(|to| {
                    to["namespaceSelector"].is_null()
                        && selects(&to["podSelector"]["matchLabels"], &redis_labels)
                }) && rule["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|p| p["port"] == 6379)
            });
        assert!(
            reachable,
            "{name}: the NetworkPolicy keeps the mixer from its Redis"
        );
    }
}

#[test]
fn invariants_hold_in_every_overlay() {
    let Some(rendered) = rendered() else { return };
    for (name, text) in rendered {
        check_invariants(&Rendered {
            name,
            objects: objects(&text),
        });
    }
}

#[test]
fn overlays_set_what_they_promise() {
    let Some(rendered) = rendered() else { return };
    let by_name: BTreeMap<&str, Rendered> = rendered
        .into_iter()
        .map(|(name, text)| {
            (
                name,
                Rendered {
                    name,
                    objects: objects(&text),
                },
            )
        })
        .collect();
    let replicas = |o: &str| by_name[o].mixer()["spec"]["replicas"].as_u64();
    assert_eq!(replicas("base"), Some(2));
    assert_eq!(replicas("dev"), Some(1));
    assert_eq!(replicas("ha"), Some(3));
    assert!(by_name["redis"].one("Deployment", "mixer-redis").is_some());
    assert!(by_name["redis"].one("Secret", "mixer-redis").is_some());
    assert_eq!(by_name["monitoring"].all("ServiceMonitor").len(), 1);
    let args = by_name["tls"].mixer()["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .clone();
    assert_eq!(flag(&args, "--tls-cert"), Some("/etc/mixer/tls/tls.crt"));
    assert_eq!(flag(&args, "--tls-key"), Some("/etc/mixer/tls/tls.key"));
    assert_eq!(
        flag(&args, "--tls-client-ca"),
        Some("/etc/mixer/tls/ca.crt")
    );
}

/// The files the config volume of `overlay` holds, as the kubelet would write them.
fn config_files(r: &Rendered) -> Vec<(String, String)> {
    let spec = &r.mixer()["spec"]["template"]["spec"];
    let volume = spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == "config")
        .expect("config volume");
    let mut files = Vec::new();
    for source in volume["projected"]["sources"].as_array().expect("sources") {
        let (kind, field, reference) = if source["configMap"].is_object() {
            ("ConfigMap", "data", &source["configMap"])
        } else {
            ("Secret", "stringData", &source["secret"])
        };
        let object = r
            .one(kind, reference["name"].as_str().expect("name"))
            .expect("the source object");
        for (key, text) in object[field].as_object().expect("data") {
            files.push((key.clone(), text.as_str().expect("text").to_string()));
        }
    }
    files
}

fn mixer_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

#[test]
fn the_rendered_config_validates_with_the_real_mixer() {
    let Some(rendered) = rendered() else { return };
    for (name, text) in rendered {
        let r = Rendered {
            name,
            objects: objects(&text),
        };
        let dir = tempfile::tempdir().expect("tempdir");
        for (file, text) in config_files(&r) {
            std::fs::write(dir.path().join(file), text).expect("write");
        }
        let out = Command::new(mixer_binary())
            .arg("validate")
            .arg(dir.path())
            .output()
            .expect("run mixer validate");
        assert!(
            out.status.success(),
            "{name}: mixer validate refuses the rendered config: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The base's container args run the real mixer (listeners moved to loopback ports, the
/// config folder to a temp dir holding the ConfigMap's files), and the port the probes name
/// answers grpc.health.v1.Health/Check with SERVING, over HTTP/2 without TLS as the kubelet
/// asks.
#[tokio::test]
async fn the_rendered_args_serve_and_the_probe_port_answers_grpc_health() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

    let Some(rendered) = rendered() else { return };
    let (name, text) = &rendered[0];
    let r = Rendered {
        name,
        objects: objects(text),
    };
    let container = &r.mixer()["spec"]["template"]["spec"]["containers"][0];
    let dir = tempfile::tempdir().expect("tempdir");
    for (file, text) in config_files(&r) {
        std::fs::write(dir.path().join(file), text).expect("write");
    }
    let probe_port = container["readinessProbe"]["grpc"]["port"]
        .as_u64()
        .expect("probe port");
    let mut probe_addr = None;
    let mut args = Vec::new();
    for arg in container["args"].as_array().expect("args") {
        let arg = arg.as_str().expect("string arg");
        let Some((flag, value)) = arg.split_once('=') else {
            args.push(arg.to_string());
            continue;
        };
        if flag == "--config" {
            args.push(format!("--config={}", dir.path().display()));
        } else if let Ok(addr) = value.parse::<SocketAddr>() {
            let local = free_addr();
            if u64::from(addr.port()) == probe_port {
                probe_addr = Some(local);
            }
            args.push(format!("{flag}={local}"));
        } else {
            args.push(arg.to_string());
        }
    }
    let probe_addr = probe_addr.expect("a listener binds the probe port");
    let _mixer = Killed(
        Command::new(mixer_binary())
            .args(&args)
            .stdout(Stdio::null())
            .spawn()
            .expect("start the mixer"),
    );
    let start = Instant::now();
    let status = loop {
        let answer = async {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{probe_addr}"))
                .ok()?
                .connect()
                .await
                .ok()?;
            let mut client = HealthClient::new(channel);
            client
                .check(HealthCheckRequest {
                    service: String::new(),
                })
                .await
                .ok()
                .map(|r| r.into_inner().status)
        };
        match answer.await {
            Some(s) if s == ServingStatus::Serving as i32 => break s,
            other => {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "the probe port {probe_addr} never answered SERVING (last: {other:?})"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(status, ServingStatus::Serving as i32);
}
