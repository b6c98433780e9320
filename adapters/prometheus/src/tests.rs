//! Handler behaviour: values, labels, buckets, expiry, rendering.

use std::sync::Arc;
use std::time::Duration;

use mixer_adapter_api::host::AnyAdapter;
use mixer_adapter_api::{BuildContext, ErrorKind};
use mixer_model::{FieldValue, Instance, StringMap, Template, Value};
use serde_json::json;

use crate::{Prometheus, PrometheusHandler, PrometheusParams};

fn build(params: serde_json::Value) -> Arc<PrometheusHandler> {
    let params: PrometheusParams =
        mixer_adapter_api::host::decode_params(&params).expect("decodes");
    Prometheus
        .build_handler(
            &params.compile().expect("valid params"),
            &BuildContext {
                handler_name: "prom.istio-system".into(),
            },
        )
        .expect("built")
}

fn metric(name: &str, value: Value, dims: &[(&str, Value)]) -> Instance {
    Instance {
        name: name.into(),
        template: Template::Metric,
        fields: vec![
            ("value", FieldValue::Value(value)),
            (
                "dimensions",
                FieldValue::Map(dims.iter().map(|(k, v)| ((*k).into(), v.clone())).collect()),
            ),
        ],
    }
}

fn render(h: &PrometheusHandler) -> String {
    let mut out = String::new();
    mixer_adapter_api::Exposition::render(h, &mut out);
    out
}

async fn report(
    h: &PrometheusHandler,
    instances: &[Instance],
) -> Result<(), mixer_adapter_api::AdapterError> {
    mixer_adapter_api::ReportHandler::report(h, instances).await
}

fn standard() -> serde_json::Value {
    json!({"metrics": [
        {"name": "requests_total", "instanceName": "requestcount.instance.istio-system",
         "kind": "COUNTER", "labelNames": ["source_app", "response_code"],
         "description": "Total requests."},
        {"name": "connections", "instanceName": "connections.istio-system",
         "kind": "GAUGE", "labelNames": ["destination_app"]},
        {"name": "request_duration_seconds", "instanceName": "requestduration.istio-system",
         "kind": "DISTRIBUTION", "labelNames": ["source_app"],
         "buckets": {"explicitBuckets": {"bounds": [0.01, 0.1, 1]}}},
        {"name": "bytes", "namespace": "mesh", "instanceName": "bytes.istio-system",
         "kind": "DISTRIBUTION",
         "buckets": {"linearBuckets": {"numFiniteBuckets": 2, "width": 100, "offset": 0}}}
    ]})
}

#[tokio::test]
async fn counters_add_gauges_set_histograms_observe() {
    let h = build(standard());
    let app = |a: &str| ("source_app", Value::from(a));
    report(
        &h,
        &[
            metric(
                "requestcount.istio-system",
                Value::Int64(1),
                &[app("web"), ("response_code", Value::Int64(200))],
            ),
            metric(
                "requestcount.istio-system",
                Value::Double(2.5),
                &[app("web"), ("response_code", Value::Int64(200))],
            ),
            metric(
                "requestcount.istio-system",
                Value::from("4"),
                &[app("api"), ("response_code", Value::Int64(503))],
            ),
            metric(
                "connections.istio-system",
                Value::Int64(7),
                &[("destination_app", Value::from("db"))],
            ),
            metric(
                "connections.istio-system",
                Value::Int64(3),
                &[("destination_app", Value::from("db"))],
            ),
            metric(
                "requestduration.istio-system",
                Value::Double(0.005),
                &[app("web")],
            ),
            metric(
                "requestduration.istio-system",
                Value::Double(0.05),
                &[app("web")],
            ),
            metric(
                "requestduration.istio-system",
                Value::Double(5.0),
                &[app("web")],
            ),
            metric("bytes.istio-system", Value::Int64(150), &[]),
        ],
    )
    .await
    .expect("recorded");
    let text = render(&h);
    for line in [
        "# HELP istio_requests_total Total requests.",
        "# TYPE istio_requests_total counter",
        "istio_requests_total{response_code=\"200\",source_app=\"web\"} 3.5",
        "istio_requests_total{response_code=\"503\",source_app=\"api\"} 4",
        "# HELP istio_connections connections",
        "# TYPE istio_connections gauge",
        "istio_connections{destination_app=\"db\"} 3",
        "# TYPE istio_request_duration_seconds histogram",
        "istio_request_duration_seconds_bucket{source_app=\"web\",le=\"0.01\"} 1",
        "istio_request_duration_seconds_bucket{source_app=\"web\",le=\"0.1\"} 2",
        "istio_request_duration_seconds_bucket{source_app=\"web\",le=\"1\"} 2",
        "istio_request_duration_seconds_bucket{source_app=\"web\",le=\"+Inf\"} 3",
        "istio_request_duration_seconds_sum{source_app=\"web\"} 5.055",
        "istio_request_duration_seconds_count{source_app=\"web\"} 3",
        "mesh_bytes_bucket{le=\"0\"} 0",
        "mesh_bytes_bucket{le=\"100\"} 0",
        "mesh_bytes_bucket{le=\"200\"} 1",
        "mesh_bytes_bucket{le=\"+Inf\"} 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

#[tokio::test]
async fn label_mapping_and_value_conversions() {
    let h = build(json!({"metrics": [
        {"name": "g", "instanceName": "g.ns", "kind": "GAUGE",
         "labelNames": ["response-code", "source.ip", "flag", "missing", "latency"]}
    ]}));
    let ip: std::net::IpAddr = "::ffff:10.0.0.1".parse().expect("ip");
    report(
        &h,
        &[metric(
            "g.ns",
            Value::Duration(mixer_model::Duration(1_500_000_000)),
            &[
                // Looked up under the configured name...
                ("response-code", Value::Int64(404)),
                // ...or under the exposed (sanitized) one.
                ("source_ip", Value::IpAddress(ip)),
                ("flag", Value::Bool(true)),
                (
                    "latency",
                    Value::Duration(mixer_model::Duration(19_000_000)),
                ),
                ("extra", Value::from("ignored")),
            ],
        )],
    )
    .await
    .expect("recorded");
    let text = render(&h);
    assert!(
        text.contains(
            "istio_g{flag=\"true\",latency=\"19ms\",missing=\"unknown\",responsecode=\"404\",source_ip=\"10.0.0.1\"} 1.5"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn bad_values_fail_alone_and_others_are_recorded() {
    let h = build(standard());
    let err = report(
        &h,
        &[
            metric("requestcount.istio-system", Value::from("lots"), &[]),
            metric("requestcount.istio-system", Value::Int64(-1), &[]),
            Instance {
                name: "connections.istio-system".into(),
                template: Template::Metric,
                fields: vec![],
            },
            metric("requestduration.istio-system", Value::Double(f64::NAN), &[]),
            metric("requestcount.istio-system", Value::Int64(2), &[]),
        ],
    )
    .await
    .expect_err("bad values");
    assert_eq!(err.kind, ErrorKind::InvalidInstance);
    assert!(!err.retryable);
    assert_eq!(
        err.message.matches("could not record").count(),
        4,
        "{}",
        err.message
    );
    assert!(
        err.message.contains("\"lots\" is not a number"),
        "{}",
        err.message
    );
    let text = render(&h);
    assert!(
        text.contains("istio_requests_total{response_code=\"unknown\",source_app=\"unknown\"} 2"),
        "{text}"
    );
}

#[tokio::test]
async fn instances_for_other_metrics_and_templates_are_ignored() {
    let h = build(standard());
    report(
        &h,
        &[
            metric("someoneelse.istio-system", Value::Int64(1), &[]),
            Instance {
                name: "requestcount.istio-system".into(),
                template: Template::LogEntry,
                fields: vec![],
            },
        ],
    )
    .await
    .expect("ignored");
    // Nothing recorded: vectors without series are not rendered at all.
    assert_eq!(render(&h), "");
}

#[tokio::test(start_paused = true)]
async fn idle_series_expire() {
    let mut params = standard();
    params["metricsExpirationPolicy"] =
        json!({"metricsExpiryDuration": "10m", "expiryCheckIntervalDuration": "1m"});
    let h = build(params);
    let web = [
        ("source_app", Value::from("web")),
        ("response_code", Value::Int64(200)),
    ];
    let api = [
        ("source_app", Value::from("api")),
        ("response_code", Value::Int64(200)),
    ];
    report(
        &h,
        &[metric("requestcount.istio-system", Value::Int64(1), &web)],
    )
    .await
    .expect("ok");
    report(
        &h,
        &[metric("requestcount.istio-system", Value::Int64(1), &api)],
    )
    .await
    .expect("ok");
    assert_eq!(h.tracked_series(), 2);

    tokio::time::advance(Duration::from_secs(6 * 60)).await;
    // `web` is updated again; `api` stays idle.
    report(
        &h,
        &[metric("requestcount.istio-system", Value::Int64(1), &web)],
    )
    .await
    .expect("ok");
    tokio::time::advance(Duration::from_secs(5 * 60)).await;
    let text = render(&h);
    assert!(text.contains("source_app=\"web\"} 2"), "{text}");
    assert!(!text.contains("source_app=\"api\""), "{text}");
    assert_eq!(h.tracked_series(), 1);

    tokio::time::advance(Duration::from_secs(11 * 60)).await;
    assert_eq!(render(&h), "");
    assert_eq!(h.tracked_series(), 0);

    // A series that comes back starts again from zero.
    report(
        &h,
        &[metric("requestcount.istio-system", Value::Int64(1), &api)],
    )
    .await
    .expect("ok");
    assert!(render(&h).contains("source_app=\"api\"} 1"));
}

#[tokio::test(start_paused = true)]
async fn label_churn_is_bounded_by_expiry() {
    let h = build(json!({
        "metrics": [{"name": "c", "instanceName": "c.ns", "kind": "COUNTER", "labelNames": ["id"]}],
        "metricsExpirationPolicy": {"metricsExpiryDuration": "2s", "expiryCheckIntervalDuration": "1s"}
    }));
    for i in 0..100 {
        report(
            &h,
            &[metric("c.ns", Value::Int64(1), &[("id", Value::Int64(i))])],
        )
        .await
        .expect("ok");
        tokio::time::advance(Duration::from_millis(500)).await;
    }
    // Only the series of the last ~3 seconds are alive.
    assert!(h.tracked_series() <= 7, "{}", h.tracked_series());
    let rendered = render(&h);
    assert!(
        rendered
            .lines()
            .filter(|l| l.starts_with("istio_c{"))
            .count()
            <= 7
    );
}

#[tokio::test]
async fn two_handlers_have_separate_registries() {
    let a = build(json!({"metrics": [{"name": "a", "instanceName": "x.ns", "kind": "COUNTER"}]}));
    let b = build(json!({"metrics": [{"name": "a", "instanceName": "x.ns", "kind": "COUNTER"}]}));
    report(&a, &[metric("x.ns", Value::Int64(1), &[])])
        .await
        .expect("ok");
    report(&b, &[metric("x.ns", Value::Int64(5), &[])])
        .await
        .expect("ok");
    assert!(render(&a).contains("istio_a 1"));
    assert!(render(&b).contains("istio_a 5"));
}

#[test]
fn info_and_validation_through_the_adapter() {
    let info = Prometheus.info();
    assert_eq!(info.name, "prometheus");
    assert_eq!(info.templates, [Template::Metric]);
    let errs = Prometheus
        .compile(&json!({"metrics": [
            {"name": "x", "instanceName": "a.ns", "kind": "COUNTER"},
            {"name": "x", "instanceName": "b.ns", "kind": "GAUGE"}
        ]}))
        .expect_err("duplicate");
    assert_eq!(errs[0].path, "metrics[1].name");
    assert!(
        errs[0].message.contains("already used by metrics[0]"),
        "{}",
        errs[0]
    );
    assert!(Prometheus.compile(&serde_json::Value::Null).is_ok());
    let err = Prometheus
        .compile_and_build(
            &json!({"metrics": [{"instanceName": "a.ns"}]}),
            &BuildContext {
                handler_name: "h".into(),
            },
        )
        .err()
        .expect("build refuses invalid params");
    assert!(err.message.contains("metrics[0].kind"), "{}", err.message);
}

fn buckets(pairs: &[(&str, &str)]) -> Value {
    Value::StringMap(Arc::new(StringMap::from_pairs(
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())),
    )))
}

fn precounted() -> serde_json::Value {
    json!({"metrics": [
        {"namespace": "otel", "name": "histogram", "instanceName": "hist.istio-system",
         "kind": "DISTRIBUTION", "precounted": "CUMULATIVE", "sumDimension": "sum",
         "labelNames": ["metric"], "description": "Cumulative histograms."},
        {"namespace": "otel", "name": "delta_histogram", "instanceName": "deltahist.istio-system",
         "kind": "DISTRIBUTION", "precounted": "DELTA", "sumDimension": "sum",
         "labelNames": ["metric"]}
    ]})
}

#[tokio::test]
async fn precounted_histograms_set_when_cumulative_and_add_when_delta() {
    let h = build(precounted());
    let name = ("metric", Value::from("shop.latency"));
    let point = |instance: &str, b: &[(&str, &str)], sum: f64| {
        metric(
            instance,
            buckets(b),
            &[name.clone(), ("sum", Value::Double(sum))],
        )
    };
    report(
        &h,
        &[
            point(
                "hist.istio-system",
                &[("0", "0"), ("5", "1"), ("50", "1"), ("+Inf", "1")],
                5.0,
            ),
            // The next cumulative point holds everything so far: it replaces the first.
            point(
                "hist.istio-system",
                &[("0", "0"), ("5", "1"), ("50", "2"), ("+Inf", "3")],
                555.0,
            ),
            point("deltahist.istio-system", &[("1", "1"), ("+Inf", "2")], 3.0),
            point("deltahist.istio-system", &[("1", "2"), ("+Inf", "2")], 1.0),
        ],
    )
    .await
    .expect("recorded");
    let text = render(&h);
    for line in [
        "# HELP otel_histogram Cumulative histograms.",
        "# TYPE otel_histogram histogram",
        "otel_histogram_bucket{metric=\"shop.latency\",le=\"0\"} 0",
        "otel_histogram_bucket{metric=\"shop.latency\",le=\"5\"} 1",
        "otel_histogram_bucket{metric=\"shop.latency\",le=\"50\"} 2",
        "otel_histogram_bucket{metric=\"shop.latency\",le=\"+Inf\"} 3",
        "otel_histogram_sum{metric=\"shop.latency\"} 555",
        "otel_histogram_count{metric=\"shop.latency\"} 3",
        "# TYPE otel_delta_histogram histogram",
        "otel_delta_histogram_bucket{metric=\"shop.latency\",le=\"1\"} 3",
        "otel_delta_histogram_bucket{metric=\"shop.latency\",le=\"+Inf\"} 4",
        "otel_delta_histogram_sum{metric=\"shop.latency\"} 4",
        "otel_delta_histogram_count{metric=\"shop.latency\"} 4",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    // The sum is a value, not a label.
    assert!(!text.contains("sum=\""), "{text}");
    assert_eq!(h.tracked_series(), 2);
}

#[tokio::test]
async fn bad_precounted_points_are_instance_errors_and_others_are_recorded() {
    let h = build(precounted());
    let dims = |sum: Value| vec![("metric", Value::from("m")), ("sum", sum)];
    let e = report(
        &h,
        &[
            metric(
                "hist.istio-system",
                Value::Double(2.0),
                &dims(Value::Double(1.0)),
            ),
            metric(
                "hist.istio-system",
                buckets(&[("5", "1")]),
                &dims(Value::Double(1.0)),
            ),
            metric(
                "hist.istio-system",
                buckets(&[("+Inf", "1")]),
                &dims(Value::from("lots")),
            ),
            metric(
                "hist.istio-system",
                buckets(&[("1", "1"), ("+Inf", "2")]),
                &dims(Value::Double(7.5)),
            ),
        ],
    )
    .await
    .expect_err("three bad points");
    assert_eq!(e.kind, ErrorKind::InvalidInstance);
    for why in ["STRING_MAP", "+Inf", "sum \"sum\""] {
        assert!(e.message.contains(why), "{why}: {}", e.message);
    }
    let text = render(&h);
    assert!(
        text.contains("otel_histogram_bucket{metric=\"m\",le=\"1\"} 1")
            && text.contains("otel_histogram_sum{metric=\"m\"} 7.5"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn idle_precounted_series_expire() {
    let mut params = precounted();
    params["metricsExpirationPolicy"] = json!({"metricsExpiryDuration": "1m"});
    let h = build(params);
    report(
        &h,
        &[metric(
            "hist.istio-system",
            buckets(&[("1", "1"), ("+Inf", "1")]),
            &[("metric", Value::from("m"))],
        )],
    )
    .await
    .expect("recorded");
    assert!(render(&h).contains("otel_histogram_count{metric=\"m\"} 1"));
    tokio::time::advance(Duration::from_secs(120)).await;
    let text = render(&h);
    assert!(!text.contains("otel_histogram_count"), "{text}");
    assert_eq!(h.tracked_series(), 0);
}

/// A handler whose series count against a process cap of its own, so that tests running
/// side by side do not share the process's.
fn build_in_process(
    params: serde_json::Value,
    name: &str,
    process: &'static crate::series_cap::ProcessSeries,
) -> PrometheusHandler {
    let params: PrometheusParams =
        mixer_adapter_api::host::decode_params(&params).expect("decodes");
    PrometheusHandler::with_process(
        params.compile().expect("valid params"),
        name.into(),
        process,
    )
    .expect("built")
}

fn by_user(max_series: Option<u64>) -> serde_json::Value {
    let mut params = json!({"metrics": [
        {"name": "c", "instanceName": "c.ns", "kind": "COUNTER", "labelNames": ["user_id"]},
        {"name": "g", "instanceName": "g.ns", "kind": "GAUGE", "labelNames": ["user_id"]}
    ]});
    if let Some(max) = max_series {
        params["maxSeries"] = json!(max);
    }
    params
}

fn user(metric_name: &str, id: i64) -> Instance {
    metric(
        metric_name,
        Value::Int64(1),
        &[("user_id", Value::Int64(id))],
    )
}

fn series_lines(text: &str, prefix: &str) -> usize {
    text.lines().filter(|l| l.starts_with(prefix)).count()
}

#[tokio::test]
async fn new_series_past_the_handler_cap_are_dropped_counted_and_old_ones_update() {
    static PROCESS: crate::series_cap::ProcessSeries = crate::series_cap::ProcessSeries::new(1000);
    let name = "capped.handler-cap";
    let h = build_in_process(by_user(Some(5)), name, &PROCESS);
    // The cap counts the handler's series across its metrics: 3 counters and 2 gauges.
    for id in 0..3 {
        report(&h, &[user("c.ns", id)]).await.expect("recorded");
    }
    for id in 0..100 {
        // A point dropped by the cap is not an error of the instance.
        report(&h, &[user("g.ns", id)]).await.expect("not an error");
    }
    assert_eq!(h.tracked_series(), 5);
    assert_eq!(h.counted_series(), 5);
    assert_eq!(PROCESS.overflowed(name, "handler"), 98);
    assert_eq!(PROCESS.overflowed(name, "process"), 0);
    // Series that exist keep updating.
    report(&h, &[user("c.ns", 2), user("c.ns", 2)])
        .await
        .expect("recorded");
    let text = render(&h);
    assert!(text.contains("istio_c{user_id=\"2\"} 3"), "{text}");
    assert_eq!(
        series_lines(&text, "istio_c{") + series_lines(&text, "istio_g{"),
        5
    );
    assert!(
        text.contains(&format!(
            "mixer_metric_series_overflow_total{{cap=\"handler\",handler=\"{name}\"}} 98"
        )),
        "{text}"
    );
    // Once on the page, even when handlers render one after the other into it.
    let mut page = text.clone();
    mixer_adapter_api::Exposition::render(&h, &mut page);
    assert_eq!(
        page.matches("# TYPE mixer_metric_series_overflow_total ")
            .count(),
        1
    );
}

#[tokio::test]
async fn the_process_cap_is_shared_by_handlers_and_given_back_when_one_is_dropped() {
    static PROCESS: crate::series_cap::ProcessSeries = crate::series_cap::ProcessSeries::new(10);
    let a = build_in_process(by_user(None), "a.process-cap", &PROCESS);
    let b = build_in_process(by_user(None), "b.process-cap", &PROCESS);
    for id in 0..8 {
        report(&a, &[user("c.ns", id)]).await.expect("recorded");
    }
    for id in 0..8 {
        report(&b, &[user("c.ns", id)]).await.expect("recorded");
    }
    assert_eq!((a.tracked_series(), b.tracked_series()), (8, 2));
    assert_eq!(PROCESS.overflowed("b.process-cap", "process"), 6);
    // A reload drops the old handler: its series are the new one's to take.
    drop(a);
    for id in 2..8 {
        report(&b, &[user("c.ns", id)]).await.expect("recorded");
    }
    assert_eq!(b.tracked_series(), 8);
}

#[tokio::test(start_paused = true)]
async fn expired_series_give_their_room_back() {
    static PROCESS: crate::series_cap::ProcessSeries = crate::series_cap::ProcessSeries::new(1000);
    let mut params = by_user(Some(3));
    params["metricsExpirationPolicy"] =
        json!({"metricsExpiryDuration": "2s", "expiryCheckIntervalDuration": "1s"});
    let h = build_in_process(params, "expiring.expiry-cap", &PROCESS);
    for id in 0..5 {
        report(&h, &[user("c.ns", id)]).await.expect("recorded");
    }
    assert_eq!(h.tracked_series(), 3);
    tokio::time::advance(Duration::from_secs(3)).await;
    for id in 10..13 {
        report(&h, &[user("c.ns", id)]).await.expect("recorded");
    }
    // The sweep of the first report, before its points, dropped the three idle series.
    let text = render(&h);
    for id in 10..13 {
        assert!(
            text.contains(&format!("istio_c{{user_id=\"{id}\"}} 1")),
            "{text}"
        );
    }
    assert_eq!(h.counted_series(), 3);
}

#[test]
fn max_series_must_be_at_least_one_and_defaults_to_the_documented_cap() {
    let params: PrometheusParams =
        mixer_adapter_api::host::decode_params(&by_user(Some(0))).expect("decodes");
    let errors = params.compile().expect_err("refused");
    assert_eq!(errors[0].path, "maxSeries");
    assert!(errors[0].message.contains("at least 1"), "{errors:?}");
    let params: PrometheusParams =
        mixer_adapter_api::host::decode_params(&by_user(None)).expect("decodes");
    assert_eq!(
        params.compile().expect("valid").max_series,
        crate::DEFAULT_MAX_SERIES_PER_HANDLER
    );
}

/// A pre-counted histogram point with `n` finite buckets (bounds 1..=n, no observations).
fn wide_point(instance: &str, metric_name: &str, n: usize) -> Instance {
    let mut pairs: Vec<(String, String)> = (1..=n).map(|b| (b.to_string(), "0".into())).collect();
    pairs.push(("+Inf".into(), "0".into()));
    let value = Value::StringMap(Arc::new(StringMap::from_pairs(pairs)));
    metric(instance, value, &[("metric", Value::from(metric_name))])
}

#[tokio::test]
async fn histogram_series_count_by_the_buckets_they_hold() {
    static PROCESS: crate::series_cap::ProcessSeries = crate::series_cap::ProcessSeries::new(1000);
    let name = "wide.bucket-cap";
    let mut params = precounted();
    params["maxSeries"] = json!(5);
    let h = build_in_process(params, name, &PROCESS);
    // 250 buckets: 3 units (1, and 1 per 100 buckets); a second such series does not fit.
    report(&h, &[wide_point("hist.istio-system", "a", 250)])
        .await
        .expect("recorded");
    assert_eq!(h.counted_series(), 3);
    report(&h, &[wide_point("hist.istio-system", "b", 250)])
        .await
        .expect("not an error");
    assert_eq!((h.tracked_series(), h.counted_series()), (1, 3));
    assert_eq!(PROCESS.overflowed(name, "handler"), 1);
    // A cumulative point with fewer buckets gives the room back, and b fits.
    report(&h, &[wide_point("hist.istio-system", "a", 10)])
        .await
        .expect("recorded");
    assert_eq!(h.counted_series(), 1);
    report(&h, &[wide_point("hist.istio-system", "b", 250)])
        .await
        .expect("recorded");
    assert_eq!((h.tracked_series(), h.counted_series()), (2, 4));
    // Growing past the cap, an existing series' point is dropped and its state kept.
    report(&h, &[wide_point("hist.istio-system", "a", 300)])
        .await
        .expect("not an error");
    assert_eq!(h.counted_series(), 4);
    assert_eq!(PROCESS.overflowed(name, "handler"), 2);
    let text = render(&h);
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("otel_histogram_bucket{metric=\"a\""))
            .count(),
        11,
        "a keeps its 10 buckets and +Inf"
    );
    // Delta points add up their buckets: the series takes room as it grows.
    report(&h, &[wide_point("deltahist.istio-system", "d", 50)])
        .await
        .expect("recorded");
    assert_eq!(h.counted_series(), 5);
    report(&h, &[wide_point("deltahist.istio-system", "d", 150)])
        .await
        .expect("not an error");
    assert_eq!(h.counted_series(), 5, "150 buckets need one more unit");
    assert_eq!(PROCESS.overflowed(name, "handler"), 3);
}
