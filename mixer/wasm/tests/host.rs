//! The host against WAT fixtures: answers, every kind of fault, config validation, and what
//! a plugin may import.

mod fixtures;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fixtures::*;
use mixer_adapter_api::host::AnyAdapter;
use mixer_adapter_api::{BuildContext, ErrorKind, Handler, QuotaArgs};
use mixer_model::{Code, FieldValue, Instance, Template, Value};
use mixer_wasm::{HostOptions, Limits, WasmAdapter};
use serde_json::json;

struct Fixture {
    _dir: tempfile::TempDir,
    path: String,
}

fn write(text: &str) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("plugin.wat");
    std::fs::write(&path, text).expect("write fixture");
    Fixture {
        path: path.display().to_string(),
        _dir: dir,
    }
}

fn adapter() -> WasmAdapter {
    WasmAdapter::new(HostOptions::default())
}

fn build(adapter: &WasmAdapter, params: serde_json::Value, name: &str) -> Arc<dyn Handler> {
    adapter.compile(&params).expect("params validate");
    adapter
        .compile_and_build(
            &params,
            &BuildContext {
                handler_name: Arc::from(name),
            },
        )
        .expect("handler builds")
}

fn authz() -> Instance {
    Instance {
        name: Arc::from("authz.istio-system"),
        template: Template::Authorization,
        fields: vec![
            (
                "subject.user",
                FieldValue::Value(Value::String(Arc::from("alice"))),
            ),
            (
                "action.properties",
                FieldValue::Map(vec![(
                    Arc::from("x-plugin-deny"),
                    Value::String(Arc::from("true")),
                )]),
            ),
        ],
    }
}

fn check_plugin(check: &str) -> Fixture {
    write(&plugin(
        &[AUTHORIZATION, CHECKNOTHING],
        VALIDATE_OK,
        check,
        REPORT_OK,
    ))
}

#[tokio::test]
async fn answers_cross_the_boundary() {
    let a = adapter();
    let allow = check_plugin(ALLOW);
    let h = build(&a, json!({"module": allow.path}), "allow.istio-system");
    let r = h
        .as_check()
        .expect("checks")
        .check(&authz())
        .await
        .expect("decides");
    assert_eq!(r.status.code, Code::Ok);
    assert_eq!(r.valid_duration, Duration::from_secs(1));
    assert_eq!(r.valid_use_count, 5);

    let deny = check_plugin(DENY);
    let h = build(&a, json!({"module": deny.path}), "deny.istio-system");
    let r = h.as_check().unwrap().check(&authz()).await.unwrap();
    assert_eq!(r.status.code, Code::PermissionDenied);
    assert_eq!(r.status.message, "denied by fixture");
    // It declared check templates only.
    assert!(h.as_report().is_none() && h.as_quota().is_none());
}

#[tokio::test]
async fn quota_and_report() {
    let a = adapter();
    let f = write(&plugin(&[QUOTA, METRIC], VALIDATE_OK, ALLOW, REPORT_OK));
    let h = build(&a, json!({"module": f.path}), "q.istio-system");
    let quota = Instance {
        name: Arc::from("q.istio-system"),
        template: Template::Quota,
        fields: vec![],
    };
    let args = QuotaArgs {
        amount: 5,
        ..QuotaArgs::default()
    };
    let r = h
        .as_quota()
        .expect("quota")
        .allocate(&quota, &args)
        .await
        .unwrap();
    assert_eq!(r.status.code, Code::Ok);
    assert_eq!(r.granted_amount, 3);
    assert_eq!(r.valid_duration, Duration::from_secs(1));
    let metric = Instance {
        name: Arc::from("m.istio-system"),
        template: Template::Metric,
        fields: vec![("value", FieldValue::Value(Value::Int64(1)))],
    };
    let batch = vec![metric; 500];
    h.as_report()
        .expect("report")
        .report(&batch)
        .await
        .expect("report ok");
}

#[tokio::test]
async fn a_plugin_that_declines_is_an_error_not_a_denial() {
    let a = adapter();
    let f = check_plugin(DECLINE);
    let h = build(&a, json!({"module": f.path}), "decline.istio-system");
    let e = h.as_check().unwrap().check(&authz()).await.unwrap_err();
    assert!(e.message.contains("no backend"), "{e:?}");
}

/// Each fault: the call fails as an adapter error of the right kind, the fault is counted
/// by kind, and the next call on the same handler works (a fresh instance each time).
async fn fault(check: &str, limits: serde_json::Value, kind: &str, error: ErrorKind) {
    let a = adapter();
    let f = check_plugin(check);
    let name = format!("{kind}.istio-system");
    let h = build(&a, json!({"module": f.path, "limits": limits}), &name);
    let started = Instant::now();
    for _ in 0..2 {
        let e = h.as_check().unwrap().check(&authz()).await.unwrap_err();
        assert_eq!(e.kind, error, "{e:?}");
        assert!(e.message.contains(kind), "{e:?}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    let host = a.host().unwrap();
    assert_eq!(host.metrics().faults(&name, kind), 2);
    let mut page = String::new();
    h.as_exposition().unwrap().render(&mut page);
    assert!(
        page.contains(&format!(
            "mixer_wasm_plugin_faults_total{{handler=\"{name}\",kind=\"{kind}\"}} 2"
        )),
        "{page}"
    );
}

#[tokio::test]
async fn a_trap_is_a_fault() {
    fault(TRAP, json!(null), "trap", ErrorKind::Internal).await;
    fault(OUT_OF_BOUNDS, json!(null), "trap", ErrorKind::Internal).await;
}

#[tokio::test]
async fn an_endless_loop_stops_at_its_deadline() {
    let started = Instant::now();
    fault(
        LOOP,
        json!({"checkDeadline": "2ms"}),
        "deadline",
        ErrorKind::Timeout,
    )
    .await;
    // Two calls of 2 ms (plus a tick each), not a hang.
    assert!(started.elapsed() < Duration::from_millis(500));
}

#[tokio::test]
async fn the_deadline_fires_across_host_calls() {
    fault(SLOW_HOST, json!(null), "deadline", ErrorKind::Timeout).await;
}

#[tokio::test]
async fn memory_past_the_cap_is_a_fault() {
    fault(GROW, json!({"memoryMib": 4}), "memory", ErrorKind::Internal).await;
}

#[tokio::test]
async fn fuel_bounds_a_call_deterministically() {
    fault(
        LOOP,
        json!({"fuel": 10000, "checkDeadline": "10s"}),
        "fuel",
        ErrorKind::Timeout,
    )
    .await;
}

#[test]
fn validate_rejects_with_the_plugins_message_and_path() {
    let a = adapter();
    let f = write(&plugin(&[AUTHORIZATION], VALIDATE_REJECT, ALLOW, REPORT_OK));
    let errors = a
        .compile(&json!({"module": f.path, "config": {"header": ""}}))
        .unwrap_err();
    let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["config.header: must not be empty"]);
}

/// A warm instance keeps its linear memory from call to call: the fixture's bump allocator
/// never frees, so reused it reaches a 1 MiB cap after some thousands of calls, where fresh
/// instances never do. The instance that hit the cap is dropped and the next call works.
#[tokio::test]
async fn a_warm_instance_keeps_its_memory_until_a_fault_drops_it() {
    let a = adapter();
    let p = check_plugin(ALLOW);
    let limits = json!({"memoryMib": 1, "checkDeadline": "100ms"});
    let warm = build(
        &a,
        json!({"module": p.path, "instances": "warm", "keepWarm": 1, "limits": limits}),
        "warm.istio-system",
    );
    let check = warm.as_check().unwrap();
    let mut calls = 0;
    let error = loop {
        calls += 1;
        match check.check(&authz()).await {
            Ok(r) => assert!(calls < 100_000, "never reached its cap ({r:?})"),
            Err(e) => break e,
        }
    };
    assert!(calls > 100, "the cap came after {calls} calls");
    assert!(error.message.contains("memory"), "{error:?}");
    let m = a.host().unwrap().metrics();
    assert_eq!(m.faults("warm.istio-system", "memory"), 1);
    check
        .check(&authz())
        .await
        .expect("a new instance after the fault");

    let fresh = build(
        &a,
        json!({"module": p.path, "limits": limits}),
        "fresh.istio-system",
    );
    let check = fresh.as_check().unwrap();
    for _ in 0..calls + 10 {
        check
            .check(&authz())
            .await
            .expect("fresh instances never fill up");
    }
    assert_eq!(m.faults("fresh.istio-system", "memory"), 0);
}

#[test]
fn instance_params_are_checked() {
    let a = adapter();
    let f = check_plugin(ALLOW);
    let e = a
        .compile(&json!({"module": f.path, "instances": "hot"}))
        .unwrap_err();
    assert_eq!(e[0].path, "instances");
    let e = a
        .compile(&json!({"module": f.path, "keepWarm": 2}))
        .unwrap_err();
    assert_eq!(e[0].path, "keepWarm");
    let e = a
        .compile(&json!({"module": f.path, "instances": "warm", "keepWarm": 0}))
        .unwrap_err();
    assert_eq!(e[0].path, "keepWarm");
    a.compile(&json!({"module": f.path, "instances": "warm", "keepWarm": 2}))
        .expect("valid");
}

#[test]
fn bad_params_name_their_field() {
    let a = adapter();
    let e = a
        .compile(&json!({"module": "/nonexistent/x.wasm"}))
        .unwrap_err();
    assert_eq!(e[0].path, "module");
    assert!(e[0].message.contains("cannot read"), "{e:?}");
    let e = a.compile(&json!({"modul": "x"})).unwrap_err();
    assert!(e[0].message.contains("unknown field"), "{e:?}");
    let f = check_plugin(ALLOW);
    let e = a
        .compile(&json!({"module": f.path, "limits": {"checkDeadline": "never"}}))
        .unwrap_err();
    assert_eq!(e[0].path, "limits.checkDeadline");
    let junk = write("(module)");
    let e = a.compile(&json!({"module": junk.path})).unwrap_err();
    assert!(e[0].message.contains("not a valid Wasm component"), "{e:?}");
}

#[test]
fn a_plugin_declares_its_templates() {
    let a = adapter();
    let f = check_plugin(ALLOW);
    let params = json!({"module": f.path});
    assert_eq!(
        Some(a.templates_of(&a.compile(&params).expect("compiles"))),
        Some(vec![Template::Authorization, Template::CheckNothing])
    );
}

#[tokio::test]
async fn an_instance_of_another_template_is_refused() {
    let a = adapter();
    let f = check_plugin(ALLOW);
    let h = build(&a, json!({"module": f.path}), "t.istio-system");
    let listentry = Instance {
        name: Arc::from("l.istio-system"),
        template: Template::ListEntry,
        fields: vec![],
    };
    let e = h.as_check().unwrap().check(&listentry).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidInstance);
    assert!(
        e.message.contains("does not take template listentry"),
        "{e:?}"
    );
}

#[test]
fn a_plugin_cannot_reach_host_files() {
    let a = adapter();
    let f = write(READS_FILES);
    let e = a.compile(&json!({"module": f.path})).unwrap_err();
    assert_eq!(e[0].path, "module");
    assert!(
        e[0].message
            .contains("imports wasi:filesystem/preopens@0.2.0, which the mixer does not provide"),
        "{e:?}"
    );
}

#[test]
fn an_unchanged_module_is_compiled_once() {
    let a = adapter();
    let f = check_plugin(ALLOW);
    let host = a.host().unwrap();
    let one = host
        .load(std::path::Path::new(&f.path), &Limits::default())
        .unwrap();
    let two = host
        .load(std::path::Path::new(&f.path), &Limits::default())
        .unwrap();
    assert!(Arc::ptr_eq(&one, &two));
    std::fs::write(
        &f.path,
        plugin(&[AUTHORIZATION], VALIDATE_OK, DENY, REPORT_OK),
    )
    .unwrap();
    let three = host
        .load(std::path::Path::new(&f.path), &Limits::default())
        .unwrap();
    assert!(!Arc::ptr_eq(&one, &three));
    assert_eq!(three.templates(), [Template::Authorization]);
    // The fixtures are components of the previous world, mixer:adapter@0.1.0: they still
    // load, and every test here runs them through it.
    assert_eq!(three.world_version(), "0.1.0");
    // A fuel limit needs code compiled with fuel accounting: the same file, compiled again
    // by the metered engine, and cached there too.
    let fueled = Limits {
        fuel: Some(1_000_000),
        ..Limits::default()
    };
    let four = host.load(std::path::Path::new(&f.path), &fueled).unwrap();
    assert!(!Arc::ptr_eq(&three, &four));
    let five = host.load(std::path::Path::new(&f.path), &fueled).unwrap();
    assert!(Arc::ptr_eq(&four, &five));
}

#[test]
fn without_the_pool_instances_come_on_demand() {
    let a = WasmAdapter::new(HostOptions {
        pooling: false,
        ..HostOptions::default()
    });
    assert!(!a.host().unwrap().pooled());
    let f = check_plugin(ALLOW);
    a.compile(&json!({"module": f.path}))
        .expect("loads on demand too");
}

/// A handler whose plugin loops to a 300 ms deadline, with `concurrency` calls at once.
fn looping_handler(a: &WasmAdapter, f: &Fixture, name: &str, concurrency: u32) -> Arc<dyn Handler> {
    build(
        a,
        json!({"module": f.path, "limits": {"checkDeadline": "300ms", "concurrency": concurrency}}),
        name,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_beyond_the_concurrency_limit_is_refused_not_queued_until_the_deadline() {
    let a = adapter();
    let f = check_plugin(LOOP);
    let name = "busy.istio-system";
    let h = looping_handler(&a, &f, name, 1);
    // Two calls at once on the handler's one slot: whichever gets it runs to the 300 ms
    // deadline; the other is refused after its short wait, long before that, not queued.
    let call = |h: Arc<dyn Handler>| {
        tokio::spawn(async move {
            let answer = h.as_check().unwrap().check(&authz()).await;
            (answer, std::time::Instant::now())
        })
    };
    let (one, two) = (call(h.clone()), call(h.clone()));
    let (one, two) = (one.await.unwrap(), two.await.unwrap());
    let ((refused, refused_at), (ran, ran_at)) = match (&one.0, &two.0) {
        (Err(e), _) if e.kind == ErrorKind::Overloaded => (one, two),
        _ => (two, one),
    };
    let refused = refused.expect_err("one call is refused");
    assert_eq!(refused.kind, ErrorKind::Overloaded, "{refused:?}");
    assert!(refused.message.contains("concurrency"), "{refused:?}");
    assert!(refused.retryable, "{refused:?}");
    let ran = ran.expect_err("the other runs to its deadline");
    assert_eq!(ran.kind, ErrorKind::Timeout, "{ran:?}");
    assert!(
        refused_at < ran_at,
        "the refused call waited for the running one"
    );
    assert!(a.host().unwrap().metrics().faults(name, "concurrency") >= 1);
    // The slot is free again.
    let again = h.as_check().unwrap().check(&authz()).await.unwrap_err();
    assert_eq!(again.kind, ErrorKind::Timeout, "{again:?}");
}

/// On a runtime with a single thread, a call with a long deadline must leave that thread to
/// the runtime's other tasks: a timer set after the call started fires while it runs.
#[tokio::test(flavor = "current_thread")]
async fn a_long_call_does_not_hold_the_serving_thread() {
    let a = adapter();
    let f = check_plugin(LOOP);
    let h = looping_handler(&a, &f, "long.istio-system", 2);
    let call = {
        let h = h.clone();
        tokio::spawn(async move { h.as_check().unwrap().check(&authz()).await })
    };
    // Lets the call start (and, run inline, block this thread until its deadline).
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        !call.is_finished(),
        "the call ran on the runtime's only thread"
    );
    let e = call.await.unwrap().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e:?}");
}

#[tokio::test]
async fn a_plugin_logging_without_end_is_capped_and_counted() {
    let a = adapter();
    let f = check_plugin(LOG_LOOP);
    let name = "chatty.istio-system";
    let h = build(
        &a,
        json!({"module": f.path, "limits": {"checkDeadline": "20ms"}}),
        name,
    );
    let e = h.as_check().unwrap().check(&authz()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e:?}");
    // Thousands of calls to `log` in 20 ms, all but the call's first few dropped.
    assert!(a.host().unwrap().metrics().log_lines_dropped(name) > 100);
    let mut page = String::new();
    h.as_exposition().unwrap().render(&mut page);
    assert!(
        page.contains(&format!(
            "mixer_wasm_plugin_log_lines_dropped_total{{handler=\"{name}\"}}"
        )),
        "{page}"
    );
}
