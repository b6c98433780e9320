//! A slow Wasm plugin costs its own rules only (issue #32, section 5), through a real
//! `mixer serve`: 40 clients hammering a plugin that loops until its 200 ms deadline leave a
//! built-in check on another rule, and the health endpoint, answering within 100 ms; the
//! calls beyond the handler's concurrency limit are answered by its fail policy and counted.
//! A plugin that logs without end has its lines capped and the dropped ones counted.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, http_request};

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

/// The Wasm host's own fixtures (WAT text), written as binary components for the server,
/// which has no WAT parser.
#[path = "../../mixer/wasm/tests/fixtures/mod.rs"]
mod fixtures;

/// Writes `fixtures::plugin` with `check` as `dir/NAME.wasm`.
fn fixture(dir: &Path, name: &str, check: &str) {
    use fixtures::{AUTHORIZATION, CHECKNOTHING, REPORT_OK, VALIDATE_OK};
    let text = fixtures::plugin(
        &[AUTHORIZATION, CHECKNOTHING],
        VALIDATE_OK,
        check,
        REPORT_OK,
    );
    let bytes = wat::parse_str(&text).expect("fixture parses");
    std::fs::write(dir.join(format!("{name}.wasm")), bytes).expect("write fixture");
}

/// A looping plugin and a logging one, each failing closed behind its own rule (chosen by
/// `x-plugin`), and a built-in denier behind a third (`x-builtin: yes`).
const CONFIG: &str = r#"apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: loop, namespace: istio-system}
spec:
  compiledAdapter: wasm
  failPolicy: CLOSED
  params:
    module: loop.wasm
    limits: {checkDeadline: 200ms}
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: loop, namespace: istio-system}
spec:
  match: request.headers["x-plugin"] == "loop"
  actions: [{handler: loop, instances: [nothing]}]
---
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: chatty, namespace: istio-system}
spec:
  compiledAdapter: wasm
  failPolicy: CLOSED
  params:
    module: chatty.wasm
    limits: {checkDeadline: 50ms}
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: chatty, namespace: istio-system}
spec:
  match: request.headers["x-plugin"] == "chatty"
  actions: [{handler: chatty, instances: [nothing]}]
---
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: builtin, namespace: istio-system}
spec:
  compiledAdapter: denier
  params: {status: {code: 7, message: "denied by the built-in"}}
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: builtin, namespace: istio-system}
spec:
  match: request.headers["x-builtin"] == "yes"
  actions: [{handler: builtin, instances: [nothing]}]
"#;

/// The mixer on `dir`'s config, its log written to `dir/mixer.log`.
fn start(dir: &Path) -> Mixer {
    fixture(dir, "loop", fixtures::LOOP);
    fixture(dir, "chatty", fixtures::LOG_LOOP);
    std::fs::write(dir.join("config.yaml"), CONFIG).expect("write");
    let mixer = Mixer::start_with_env_and_log(
        binary(),
        &["--config", dir.to_str().expect("utf-8")],
        &[],
        &dir.join("mixer.log"),
    );
    mixer.wait_ready(Duration::from_secs(60));
    mixer
}

/// How long a built-in check takes, or what was wrong with its answer (a stalled mixer
/// makes the client's 5 s read time out).
fn builtin_check(mixer: &Mixer) -> Result<Duration, String> {
    let started = Instant::now();
    let (status, _, body) = http_request(mixer.http, "GET", "/check", &[("x-builtin", "yes")])
        .map_err(|e| format!("check after {:?}: {e}", started.elapsed()))?;
    let took = started.elapsed();
    if status != 403 || !body.contains("denied by the built-in") {
        return Err(format!("not the built-in's denial: {status} {body}"));
    }
    Ok(took)
}

fn healthz(mixer: &Mixer) -> Result<Duration, String> {
    let started = Instant::now();
    let (status, _, body) = http_request(mixer.admin, "GET", "/healthz", &[])
        .map_err(|e| format!("healthz after {:?}: {e}", started.elapsed()))?;
    if status != 200 {
        return Err(format!("healthz: {status} {body}"));
    }
    Ok(started.elapsed())
}

#[test]
fn a_looping_plugin_under_load_does_not_delay_other_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mixer = Arc::new(start(dir.path()));
    // Unloaded: the figure the delay is measured against (the slowest of a few, so that one
    // scheduling hiccup does not make the baseline too small).
    let baseline = (0..5)
        .map(|_| builtin_check(&mixer).expect("unloaded built-in check"))
        .max()
        .expect("five");

    // 40 clients, each with one call to the looping plugin at a time, a new one every
    // deadline at most: 40 calls in flight, as a proxy with 40 waiting requests has.
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, unavailable) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let clients: Vec<_> = (0..40)
        .map(|_| {
            let (mixer, stop, answered, unavailable) = (
                mixer.clone(),
                stop.clone(),
                answered.clone(),
                unavailable.clone(),
            );
            std::thread::spawn(move || {
                // Bounded in count as well as by `stop`.
                for _ in 0..200 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let started = Instant::now();
                    if let Ok((status, _, _)) =
                        http_request(mixer.http, "GET", "/check", &[("x-plugin", "loop")])
                    {
                        answered.fetch_add(1, Ordering::SeqCst);
                        // Failing closed: a deadline or a full handler is 503, never 200.
                        if status == 503 {
                            unavailable.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    if let Some(rest) = Duration::from_millis(200).checked_sub(started.elapsed()) {
                        std::thread::sleep(rest);
                    }
                }
            })
        })
        .collect();
    // Let the load build up: every client's first call sent.
    std::thread::sleep(Duration::from_millis(300));
    let mut loaded = Vec::new();
    for _ in 0..10 {
        loaded.push(builtin_check(&mixer));
        loaded.push(healthz(&mixer));
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.join().expect("client");
    }
    // Asserted only now, with the clients stopped, so that a failure stops the mixer too.
    let loaded: Vec<Duration> = loaded
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("under load: {e}"));
    let worst = loaded.iter().max().copied().expect("measured");
    let answered = answered.load(Ordering::SeqCst);
    let unavailable = unavailable.load(Ordering::SeqCst);
    eprintln!(
        "built-in check unloaded (slowest of 5): {baseline:?}; under load (slowest of 20): {worst:?}; \
         plugin calls answered: {answered}, 503: {unavailable}"
    );
    assert!(
        worst <= baseline + Duration::from_millis(100),
        "a built-in check took {worst:?} while the plugin was hammered (unloaded: {baseline:?}): {loaded:?}"
    );
    assert!(
        answered >= 40,
        "the load did not happen: {answered} answers"
    );
    assert_eq!(
        answered, unavailable,
        "a looping plugin failing closed allowed a call"
    );
    // Calls beyond the handler's limit were refused without running, and counted.
    let refused = mixer
        .metric(r#"mixer_wasm_plugin_faults_total{handler="loop.handler.istio-system",kind="concurrency"}"#)
        .unwrap_or(0.0);
    assert!(
        refused > 0.0,
        "no call was refused at the concurrency limit"
    );
    Arc::try_unwrap(mixer).ok().expect("sole owner").terminate();
}

#[test]
fn a_plugin_logging_without_end_is_capped_and_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mixer = start(dir.path());
    for _ in 0..3 {
        let (status, _, body) =
            http_request(mixer.http, "GET", "/check", &[("x-plugin", "chatty")]).expect("check");
        // It loops until its deadline: failing closed.
        assert_eq!(status, 503, "{body}");
    }
    let dropped = mixer
        .metric(
            r#"mixer_wasm_plugin_log_lines_dropped_total{handler="chatty.handler.istio-system"}"#,
        )
        .expect("dropped log lines are counted");
    // Thousands of calls to `log` in 3 × 50 ms; at most 16 lines per call written.
    assert!(dropped > 1000.0, "{dropped}");
    mixer.terminate();
    let log = std::fs::read_to_string(dir.path().join("mixer.log")).expect("the log");
    let written = log
        .lines()
        .filter(|l| l.contains("denied by fixture"))
        .count();
    assert!(
        (1..=3 * 16).contains(&written),
        "{written} plugin lines written"
    );
}
