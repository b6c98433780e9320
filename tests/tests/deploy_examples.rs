//! The examples under `deploy/examples/`, each run by the real program it is for: nginx
//! `auth_request` and Caddy `forward_auth` in front of a real mixer, the Prometheus scrape
//! config through `promtool` and a real scrape, the Grafana dashboard's queries against a
//! running mixer's metrics (and evaluated by Prometheus), and the Envoy bootstrap parsed into
//! Envoy's own protos (no Envoy binary here; PyPI xds-protos), where an unknown field fails.
//!
//! A missing program skips a test, except under `CI=1` where it fails.

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mixer_proto::istio::mixer::v1 as pb;
use mixer_proto::istio::mixer::v1::mixer_client::MixerClient;
use mixer_tests::caddy::{self, Caddy};
use mixer_tests::{Mixer, free_addr, header, http_request, installed_tool, upstream};
#[path = "support/deploy.rs"]
mod deploy;
use deploy::deploy_python;
use serde_json::Value;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples")
}

fn example(path: &str) -> String {
    std::fs::read_to_string(examples().join(path)).expect("read the example")
}

fn mixer_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

/// A child process killed when the test ends.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A limit of 3 requests a minute for host quota.example.com, charged by forward-auth.
const QUOTA: &str = include_str!("../configs/forward_auth_quota.yaml");

/// A mixer with the base overlay's default config (policies/default) and a quota, trusting
/// forwarding headers from loopback (where the proxy under test runs).
fn start_mixer(dir: &Path, files: &[(&str, &str)], extra: &[&str]) -> Mixer {
    let config = dir.join("config");
    std::fs::create_dir_all(&config).expect("mkdir");
    for (name, text) in files {
        std::fs::write(config.join(name), text).expect("write");
    }
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/default/config/default.yaml"),
        config.join("default.yaml"),
    )
    .expect("copy the default config");
    std::fs::write(config.join("quota.yaml"), QUOTA).expect("write");
    let mut args = vec![
        "--config",
        config.to_str().expect("utf-8"),
        "--trusted-proxies",
        "127.0.0.1",
    ];
    args.extend_from_slice(extra);
    let mixer = Mixer::start(mixer_binary(), &args);
    mixer.wait_ready(Duration::from_secs(20));
    mixer
}

/// The example's cluster addresses replaced by the loopback ones of this test.
fn localize(text: &str, listen: SocketAddr, mixer_http: SocketAddr, app: SocketAddr) -> String {
    text.replace(
        "mixer.mixer.svc.cluster.local:9092",
        &mixer_http.to_string(),
    )
    .replace("app.default.svc.cluster.local:8080", &app.to_string())
    .replace("listen 8080;", &format!("listen {listen};"))
    .replace(
        ":8080 {",
        &format!(":{} {{\n\tbind {}", listen.port(), listen.ip()),
    )
}

/// What a proxy in front of the default config must do: pass the mixer's header for the
/// upstream, pass a denial on as 403, and a quota refusal as 429 with Retry-After.
fn check_proxy_behaviour(listen: SocketAddr, proxy: &str) {
    let (status, _, body) =
        http_request(listen, "GET", "/shop", &[("x-user", "bob")]).expect("request");
    assert_eq!(status, 200, "{proxy}: an allowed request reaches the app");
    assert!(
        body.contains("x-mixer-user: bob"),
        "{proxy}: the app gets x-mixer-user from the mixer: {body}"
    );
    let (status, _, _) =
        http_request(listen, "GET", "/shop", &[("x-mixer-deny", "true")]).expect("request");
    assert_eq!(status, 403, "{proxy}: the mixer's denial");
    let quota = [("host", "quota.example.com")];
    for n in 1..=3 {
        let (status, _, _) = http_request(listen, "GET", "/", &quota).expect("request");
        assert_eq!(status, 200, "{proxy}: request {n} of 3 allowed");
    }
    let (status, headers, _) = http_request(listen, "GET", "/", &quota).expect("request");
    assert_eq!(status, 429, "{proxy}: the 4th request is over the quota");
    assert!(
        header(&headers, "retry-after").is_some(),
        "{proxy}: Retry-After passed on: {headers:?}"
    );
}

#[test]
fn nginx_auth_request_example_runs_in_front_of_a_real_mixer() {
    let Some(nginx) = mixer_tests::nginx::binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mixer = start_mixer(dir.path(), &[], &[]);
    let (listen, app) = (free_addr(), upstream::echo_head());
    let site = localize(&example("nginx/mixer-auth.conf"), listen, mixer.http, app);
    // `Nginx::start` runs `nginx -t` on the example first.
    let _nginx = mixer_tests::nginx::Nginx::start(&nginx, dir.path(), &site, &[listen]);
    check_proxy_behaviour(listen, "nginx");
}

#[test]
fn caddy_forward_auth_example_runs_in_front_of_a_real_mixer() {
    let Some(caddy) = caddy::binary() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mixer = start_mixer(dir.path(), &[], &[]);
    let (listen, app) = (free_addr(), upstream::echo_head());
    // The example's site, with Caddy's admin endpoint and automatic HTTPS off for the test.
    let site = localize(&example("caddy/Caddyfile"), listen, mixer.http, app);
    let caddyfile = format!("{{\n\tadmin off\n\tauto_https off\n}}\n{site}");
    let _caddy = Caddy::start(&caddy, dir.path(), &caddyfile, listen);
    check_proxy_behaviour(listen, "caddy");
}

#[test]
fn envoy_example_parses_into_envoys_own_protos() {
    let Some(python) = deploy_python("envoy.config.bootstrap.v3.bootstrap_pb2, yaml") else {
        return;
    };
    let script = examples().join("envoy/check_bootstrap.py");
    let run = |file: &Path| {
        Command::new(&python)
            .arg(&script)
            .arg(file)
            .output()
            .expect("run check_bootstrap.py")
    };
    let out = run(&examples().join("envoy/envoy.yaml"));
    assert!(
        out.status.success(),
        "the Envoy example is not a valid bootstrap: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // A misspelt field inside a typed_config must fail, or passing proves nothing.
    let text = example("envoy/envoy.yaml");
    let tampered = text.replacen(
        "\n              failure_mode_allow: false",
        "\n              failure_mode_alow: false",
        1,
    );
    assert_ne!(tampered, text);
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("envoy.yaml");
    std::fs::write(&bad, tampered).expect("write");
    let out = run(&bad);
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stdout).contains("failure_mode_alow"),
        "a misspelt field was accepted: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    // The filters point at the mixer's gRPC port through the headless Service.
    let bootstrap: Value = serde_saphyr::from_str(&text).expect("yaml");
    let mixer = bootstrap["static_resources"]["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .find(|c| c["name"] == "mixer")
        .expect("a mixer cluster");
    let address = &mixer["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
        ["socket_address"];
    assert_eq!(address["address"], "mixer-headless.mixer.svc.cluster.local");
    assert_eq!(address["port_value"], 9091);
    let hcm = &bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
    let filters: Vec<&str> = hcm["http_filters"]
        .as_array()
        .expect("filters")
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    assert_eq!(
        filters,
        [
            "envoy.filters.http.ext_authz",
            "envoy.filters.http.ratelimit",
            "envoy.filters.http.router"
        ]
    );
    let text = hcm.to_string();
    assert_eq!(
        text.matches(r#""cluster_name":"mixer""#).count(),
        3,
        "ext_authz, rate limit and the access log all call the mixer"
    );
}

/// Reports through the prometheus adapter, for the report metrics the dashboard shows.
const REPORTS: &str = r#"
kind: handler
metadata: {name: prom, namespace: istio-system}
spec:
  compiledAdapter: prometheus
  params:
    metrics:
    - name: requests_total
      instance_name: requestcount.instance.istio-system
      kind: COUNTER
      label_names: [method]
---
kind: instance
metadata: {name: requestcount, namespace: istio-system}
spec:
  compiledTemplate: metric
  params:
    value: "1"
    dimensions:
      method: request.method | "unknown"
---
kind: rule
metadata: {name: promhttp, namespace: istio-system}
spec:
  match: context.protocol == "http"
  actions:
  - handler: prom
    instances: [requestcount]
"#;

/// A mixer made to produce every series the dashboard reads: checks allowed and denied (a
/// cache hit among them), handler calls, reports delivered and dropped (a queue of one
/// record), a reload that worked and one that failed, a connection refused at the cap.
async fn exercised_mixer(dir: &Path) -> Mixer {
    let mixer = start_mixer(
        dir,
        &[("reports.yaml", REPORTS)],
        &["--report-queue-records", "1", "--http-max-connections", "2"],
    );
    let wait_for = |what: &str, series: &str, at_least: f64| {
        let start = Instant::now();
        while mixer.metric(series).unwrap_or(0.0) < at_least {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "{what}: {series}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    for _ in 0..3 {
        http_request(mixer.http, "GET", "/check", &[("x-user", "ann")]).expect("check");
    }
    http_request(mixer.http, "GET", "/check", &[("x-mixer-deny", "true")]).expect("check");

    let method = mixer_model::Value::from("GET");
    let protocol = mixer_model::Value::from("http");
    let record = mixer_frontends::mixer_v1::encode(
        [("request.method", &method), ("context.protocol", &protocol)],
        mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT,
    );
    let mut client = MixerClient::connect(format!("http://{}", mixer.grpc))
        .await
        .expect("connect");
    for _ in 0..5 {
        client
            .report(pb::ReportRequest {
                attributes: vec![record.clone(); 200],
                repeated_attributes_semantics:
                    pb::report_request::RepeatedAttributesSemantics::IndependentEncoding as i32,
                default_words: vec![],
                global_word_count: mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT as u32,
            })
            .await
            .expect("report");
    }

    // Two connections held open fill the forward-auth cap of 2; a third is refused.
    let held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(mixer.http).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let _ = http_request(mixer.http, "GET", "/check", &[]);
    drop(held);

    std::fs::write(
        dir.join("config/broken.yaml"),
        "kind: rule\nmetadata: {name: x}\nspec: {match: 1}\n",
    )
    .expect("write");
    wait_for(
        "the broken config refused",
        r#"mixer_config_reloads_total{result="failure"}"#,
        1.0,
    );
    // Fixed with content unlike the active one (the same content back would not reload).
    std::fs::write(
        dir.join("config/broken.yaml"),
        "kind: instance\nmetadata: {name: spare, namespace: istio-system}\nspec: {compiledTemplate: checknothing}\n",
    )
    .expect("write");
    // The first load and the one after the fix.
    wait_for(
        "the fixed config loaded",
        r#"mixer_config_reloads_total{result="success"}"#,
        2.0,
    );
    wait_for(
        "a report record dropped",
        r#"mixer_report_dropped_total{handler="prom.handler.istio-system",reason="queue_full"}"#,
        1.0,
    );
    mixer
}

/// Metric names in PromQL text: identifiers starting with `mixer_`.
fn mixer_metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("mixer_") {
        let start = i + at;
        let before_ok =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end = expr[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(expr.len(), |n| start + n);
        if before_ok {
            names.push(expr[start..end].to_string());
        }
        i = end;
    }
    names
}

/// Every `expr` and templating query of the dashboard.
fn dashboard_queries() -> Vec<String> {
    let dashboard: Value =
        serde_json::from_str(&example("grafana/mixer-dashboard.json")).expect("dashboard JSON");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            queries.push(target["expr"].as_str().expect("expr").to_string());
        }
    }
    for var in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if var["type"] == "query" {
            queries.push(var["query"].as_str().expect("query").to_string());
        }
    }
    queries
}

/// Sample names on `/metrics` (histograms as their `_bucket`, `_sum` and `_count`).
fn exported_names(mixer: &Mixer) -> BTreeSet<String> {
    let (_, _, body) = http_request(mixer.admin, "GET", "/metrics", &[]).expect("metrics");
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_exported_by_a_running_mixer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mixer = exercised_mixer(dir.path()).await;
    let exported = exported_names(&mixer);
    let queries = dashboard_queries();
    let mut queried = BTreeSet::new();
    for q in &queries {
        queried.extend(mixer_metric_names(q));
    }
    // What the dashboard must show (issue 20): checks by result, latency, cache hit ratio,
    // adapter errors, report drops, reloads.
    for needed in [
        "mixer_checks_total",
        "mixer_check_duration_seconds_bucket",
        "mixer_check_cache_hits_total",
        "mixer_check_cache_misses_total",
        "mixer_handler_calls_total",
        "mixer_report_dropped_total",
        "mixer_config_reloads_total",
    ] {
        assert!(
            queried.contains(needed),
            "the dashboard does not query {needed}"
        );
    }
    let missing: Vec<&String> = queried.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics the mixer does not export: {missing:?} (exported: {exported:?})"
    );
}

/// The example's `mixer` job with its Kubernetes discovery replaced by the test's mixer (and a
/// 1 s interval, so the test need not wait 15 s): everything else is the example's.
fn scrape_config_for(target: SocketAddr) -> Value {
    let mut config: Value =
        serde_saphyr::from_str(&example("prometheus/prometheus.yml")).expect("yaml");
    let job = &mut config["scrape_configs"][0];
    assert_eq!(job["job_name"], "mixer");
    let job = job.as_object_mut().expect("a job");
    job.remove("dns_sd_configs")
        .expect("discovery in the example");
    job.insert(
        "static_configs".into(),
        serde_json::json!([{"targets": [target.to_string()]}]),
    );
    job.insert("scrape_interval".into(), "1s".into());
    job.insert("scrape_timeout".into(), "1s".into());
    config["global"]["scrape_interval"] = "1s".into();
    config["global"]["evaluation_interval"] = "1s".into();
    config
}

fn promql(prometheus: SocketAddr, q: &str) -> Value {
    let encoded: String = q
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    // Null while Prometheus is starting.
    http_request(
        prometheus,
        "GET",
        &format!("/api/v1/query?query={encoded}"),
        &[],
    )
    .ok()
    .and_then(|(_, _, body)| serde_json::from_str(&body).ok())
    .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_example_passes_promtool_scrapes_a_mixer_and_runs_the_dashboard() {
    let Some(promtool) = installed_tool(
        &["/usr/bin/promtool", "/usr/local/bin/promtool"],
        "apt-get install -y prometheus",
    ) else {
        return;
    };
    let Some(prometheus_bin) = installed_tool(
        &["/usr/bin/prometheus", "/usr/local/bin/prometheus"],
        "apt-get install -y prometheus",
    ) else {
        return;
    };
    let check = |file: &Path| {
        let out = Command::new(&promtool)
            .args(["check", "config"])
            .arg(file)
            .output()
            .expect("run promtool");
        assert!(
            out.status.success(),
            "promtool check config {}: {}{}",
            file.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    check(&examples().join("prometheus/prometheus.yml"));

    let dir = tempfile::tempdir().expect("tempdir");
    let mixer = exercised_mixer(dir.path()).await;
    let config = dir.path().join("prometheus.yml");
    std::fs::write(&config, scrape_config_for(mixer.admin).to_string()).expect("write");
    check(&config);
    let listen = free_addr();
    let _prometheus = Process(
        Command::new(&prometheus_bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={listen}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus"),
    );
    let value = |answer: &Value| -> Option<f64> {
        answer["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|v| v.parse().ok())
    };
    let start = Instant::now();
    while value(&promql(listen, r#"up{job="mixer"}"#)) != Some(1.0) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "Prometheus never scraped the mixer with the example's job"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // A few scrapes, so that rates have two samples.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        value(&promql(listen, r#"sum(mixer_checks_total{job="mixer"})"#)).is_some_and(|v| v >= 4.0),
        "the checks the test sent are in Prometheus"
    );
    // Every dashboard query, with Grafana's variables as a dashboard showing all pods sets
    // them, is valid PromQL to this Prometheus; the check panels have data.
    for q in dashboard_queries() {
        let q = q
            .replace("$__rate_interval", "1m")
            .replace("$__range", "1h")
            .replace("$namespace", ".*")
            .replace("$pod", ".*");
        let q = if q.starts_with("label_values(") {
            // A Grafana function, not PromQL: its metric selector is.
            let inner = q.trim_start_matches("label_values(");
            inner.rsplit_once(',').map_or(inner, |(m, _)| m).to_string()
        } else {
            q
        };
        let answer = promql(listen, &q);
        assert_eq!(answer["status"], "success", "{q}: {answer}");
        if q.contains("mixer_checks_total") || q.contains("mixer_check_duration_seconds") {
            assert!(
                answer["data"]["result"]
                    .as_array()
                    .is_some_and(|r| !r.is_empty()),
                "{q}: no data although checks were made"
            );
        }
    }
}
