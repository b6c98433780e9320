//! One check through the deny-header plugin beside the built-in denier, and a report batch
//! of 500 metric instances through count-by beside a built-in Prometheus counter by the
//! same dimension; each plugin with a fresh instance per call and
//! with warm instances (`params.instances`), so that the default is chosen by measurement;
//! and the warm report again with a fuel limit, for what fuel accounting costs.
//! Needs the example plugins: adapters/examples/wasm/build.sh.
//!
//! The deadlines are raised from their defaults (1 ms for a check): the bench measures the
//! call, and a benchmark process sharing two cores is descheduled for longer than that.

use std::path::PathBuf;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use mixer_adapter_api::host::{AnyAdapter, decode_params};
use mixer_adapter_api::{Adapter, BuildContext};
use mixer_model::{FieldValue, Instance, Template, Value};
use mixer_wasm::WasmAdapter;
use serde_json::json;

fn guest(name: &str) -> String {
    let dir = std::env::var_os("MIXER_WASM_GUESTS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/wasm-guests"),
        PathBuf::from,
    );
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run adapters/examples/wasm/build.sh",
        path.display()
    );
    path.display().to_string()
}

fn ctx(name: &str) -> BuildContext {
    BuildContext {
        handler_name: Arc::from(name),
    }
}

fn authz() -> Instance {
    Instance {
        name: Arc::from("request.istio-system"),
        template: Template::Authorization,
        fields: vec![(
            "action.properties",
            FieldValue::Map(vec![(Arc::from("x-plugin-deny"), Value::from("false"))]),
        )],
    }
}

/// Criterion reports a mean and its spread, not the tail; the budgets are at p50 and p99.
/// So each check is also timed call by call, 20,000 times after 2,000 unmeasured, and the
/// percentiles printed (a time per call includes the clock's own cost, about 20 ns here).
fn tail(name: &str, mut call: impl FnMut()) {
    for _ in 0..2_000 {
        call();
    }
    let mut times: Vec<std::time::Duration> = (0..20_000)
        .map(|_| {
            let started = std::time::Instant::now();
            call();
            started.elapsed()
        })
        .collect();
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    println!(
        "{name}: p50 {:?}, p99 {:?}, p99.9 {:?} (20,000 calls)",
        at(0.50),
        at(0.99),
        at(0.999)
    );
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let instance = authz();

    let denier = mixer_adapter_denier::Denier
        .compile_and_build(&json!({"status": {"code": 0}}), &ctx("builtin"))
        .expect("denier");
    tail("check/builtin-denier", || {
        rt.block_on(denier.as_check().unwrap().check(&instance))
            .unwrap();
    });
    c.bench_function("check/builtin-denier", |b| {
        b.iter(|| {
            rt.block_on(denier.as_check().unwrap().check(&instance))
                .unwrap()
        })
    });

    let wasm = WasmAdapter::default();
    let limits = json!({"checkDeadline": "50ms", "reportDeadline": "1s"});
    for mode in ["fresh", "warm"] {
        let params = json!({
            "module": guest("deny-header"),
            "config": {"header": "x-plugin-deny"},
            "limits": limits,
            "instances": mode,
        });
        let handler = wasm
            .compile_and_build(&params, &ctx("deny"))
            .expect("plugin");
        let check = handler.as_check().unwrap();
        tail(&format!("check/wasm-{mode}-instance"), || {
            rt.block_on(check.check(&instance)).unwrap();
        });
        c.bench_function(&format!("check/wasm-{mode}-instance"), |b| {
            b.iter(|| rt.block_on(check.check(&instance)).unwrap())
        });
    }

    let metric = Instance {
        name: Arc::from("requestcount.istio-system"),
        template: Template::Metric,
        fields: vec![
            ("value", FieldValue::Value(Value::Int64(1))),
            (
                "dimensions",
                FieldValue::Map(vec![(Arc::from("destination"), Value::from("reviews"))]),
            ),
        ],
    };
    let batch = vec![metric; 500];

    // The same count, built in: a Prometheus counter by the same dimension.
    let prometheus = mixer_adapter_prometheus::Prometheus
        .compile_and_build(
            &json!({"metrics": [{
                "name": "requests_total",
                "instanceName": "requestcount.istio-system",
                "kind": "COUNTER",
                "labelNames": ["destination"],
            }]}),
            &ctx("builtin-count"),
        )
        .expect("prometheus");
    let report = prometheus.as_report().expect("reports");
    c.bench_function("report/builtin-prometheus-500-metrics", |b| {
        b.iter(|| rt.block_on(report.report(&batch)).unwrap())
    });
    // With a fuel limit the plugin runs on the engine that compiles fuel accounting in:
    // what `limits.fuel` costs, beside the same warm report without it.
    let fueled = json!({"checkDeadline": "50ms", "reportDeadline": "1s", "fuel": 1_000_000_000u64});
    for (mode, instances, limits) in [
        ("fresh", "fresh", &limits),
        ("warm", "warm", &limits),
        ("warm-fuel", "warm", &fueled),
    ] {
        let params = json!({
            "module": guest("count-by"),
            "config": {"dimension": "destination"},
            "limits": limits,
            "instances": instances,
        });
        let loaded = Adapter::compile(&wasm, decode_params(&params).expect("decodes"));
        let handler = wasm.build_handler(&loaded.expect("plugin"), &ctx("count"));
        // Synchronously: the measure is the plugin's, not the blocking pool's hop.
        c.bench_function(&format!("report/wasm-{mode}-500-metrics"), |b| {
            b.iter(|| handler.report_now(&batch).unwrap())
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
