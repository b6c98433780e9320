use super::*;
use mixer_adapter_api::host::decode_params;
use serde_json::json;

fn compile(v: serde_json::Value) -> Result<PrometheusConfig, Vec<ParamError>> {
    decode_params::<PrometheusParams>(&v)
        .map_err(|e| vec![e])?
        .compile()
}

fn paths(v: serde_json::Value) -> Vec<String> {
    compile(v)
        .expect_err("invalid")
        .into_iter()
        .map(|e| e.path)
        .collect()
}

#[test]
fn istio_shapes_in_both_spellings() {
    let c = compile(json!({
        "metrics": [
            {"name": "requests_total", "instance_name": "requestcount.instance.istio-system",
             "kind": "COUNTER", "label_names": ["source_app", "response-code"]},
            {"name": "request_duration_seconds", "instanceName": "requestduration.istio-system",
             "kind": "DISTRIBUTION", "labelNames": ["source_app"],
             "buckets": {"explicit_buckets": {"bounds": [0.005, 0.01, 0.1, 1, 10]}}},
            {"name": "linear", "instanceName": "a.ns", "kind": 3,
             "buckets": {"linearBuckets": {"numFiniteBuckets": 3, "width": 10, "offset": 1}}},
            {"name": "exp", "instanceName": "b.ns", "kind": "DISTRIBUTION",
             "buckets": {"exponential_buckets": {"num_finite_buckets": 3, "growth_factor": 10, "scale": 0.001}}},
            {"instanceName": "connections.tcp-metrics.ns", "kind": "GAUGE", "namespace": "my-app.x"}
        ],
        "metricsExpirationPolicy": {"metricsExpiryDuration": "10m"}
    }))
    .expect("valid");
    assert_eq!(c.metrics[0].full_name, "istio_requests_total");
    assert_eq!(c.metrics[0].help, "requests_total");
    assert_eq!(c.metrics[0].labels[1].exposed, "responsecode");
    assert_eq!(c.metrics[0].labels[1].configured, "response-code");
    assert_eq!(c.metrics[1].buckets, [0.005, 0.01, 0.1, 1.0, 10.0]);
    assert_eq!(c.metrics[2].buckets, [1.0, 11.0, 21.0, 31.0]);
    assert_eq!(c.metrics[3].buckets.len(), 4);
    assert!((c.metrics[3].buckets[3] - 1.0).abs() < 1e-9);
    assert_eq!(c.metrics[4].full_name, "myapp_x_connections_tcpmetrics_ns");
    assert_eq!(
        c.expiry,
        Some(Expiry {
            ttl: Duration::from_secs(600),
            check_interval: Duration::from_secs(300)
        })
    );
}

#[test]
fn distribution_without_buckets_uses_the_default_buckets() {
    let c = compile(json!({"metrics": [{"instanceName": "d.ns", "kind": "DISTRIBUTION"}]}))
        .expect("valid");
    assert_eq!(c.metrics[0].buckets, prometheus::DEFAULT_BUCKETS);
    assert_eq!(c.metrics[0].full_name, "istio_d_ns");
}

#[test]
fn every_error_has_its_path() {
    let errs = paths(json!({
        "metrics": [
            {"name": "a", "instanceName": "a.ns", "kind": "COUNTER", "labelNames": ["ok", "9bad", "__x", "ok"]},
            {"name": "a", "instanceName": "a.instance.ns", "kind": "GAUGE"},
            {"name": "b", "instanceName": "", "kind": "GAUGE"},
            {"name": "c", "instanceName": "c.ns"},
            {"name": "d", "instanceName": "d.ns", "kind": "DISTRIBUTION", "labelNames": ["le"],
             "buckets": {"explicitBuckets": {"bounds": [1, 1, 0.5]}}},
            {"name": "e", "instanceName": "e.ns", "kind": "DISTRIBUTION",
             "buckets": {"linearBuckets": {"numFiniteBuckets": 0, "width": -1}}},
            {"name": "f", "instanceName": "f.ns", "kind": "DISTRIBUTION",
             "buckets": {"exponentialBuckets": {"numFiniteBuckets": 2, "growthFactor": 1, "scale": 0}}},
            {"name": "g", "instanceName": "g.ns", "kind": "DISTRIBUTION",
             "buckets": {"explicitBuckets": {"bounds": [1]}, "linearBuckets": {"numFiniteBuckets": 1, "width": 1}}},
            {"name": "h h!", "instanceName": "h.ns", "kind": "GAUGE"}
        ],
        "metricsExpirationPolicy": {"expiryCheckIntervalDuration": "1m"}
    }));
    assert_eq!(
        errs,
        [
            "metrics[0].labelNames[1]",
            "metrics[0].labelNames[2]",
            "metrics[0].labelNames[3]",
            "metrics[1].instanceName",
            "metrics[1].name",
            "metrics[2].instanceName",
            "metrics[3].kind",
            "metrics[4].labelNames[0]",
            "metrics[4].buckets.explicitBuckets.bounds[1]",
            "metrics[4].buckets.explicitBuckets.bounds[2]",
            "metrics[5].buckets.linearBuckets.numFiniteBuckets",
            "metrics[5].buckets.linearBuckets.width",
            "metrics[6].buckets.exponentialBuckets.growthFactor",
            "metrics[6].buckets.exponentialBuckets.scale",
            "metrics[7].buckets",
            "metrics[8].name",
            "metricsExpirationPolicy.metricsExpiryDuration",
        ]
    );
}

#[test]
fn expiry_policy_checks() {
    let e = compile(json!({"metricsExpirationPolicy": {"metricsExpiryDuration": "0s"}}))
        .expect_err("zero");
    assert_eq!(e[0].path, "metricsExpirationPolicy.metricsExpiryDuration");
    assert!(e[0].message.contains("must be > 0"), "{}", e[0]);
    let e = compile(json!({"metricsExpirationPolicy": {
        "metricsExpiryDuration": "soon", "expiryCheckIntervalDuration": "-1s"}}))
    .expect_err("bad");
    assert_eq!(e.len(), 2);
    let c = compile(json!({"metrics_expiration_policy": {
        "metrics_expiry_duration": "5s", "expiry_check_interval_duration": "1s"}}))
    .expect("snake case");
    assert_eq!(
        c.expiry,
        Some(Expiry {
            ttl: Duration::from_secs(5),
            check_interval: Duration::from_secs(1)
        })
    );
}

#[test]
fn unknown_fields_and_kinds_are_rejected() {
    assert_eq!(paths(json!({"metric": []})), ["metric"]);
    let e = compile(json!({"metrics": [{"instanceName": "a.ns", "kind": "HISTOGRAM"}]}))
        .expect_err("bad kind");
    assert_eq!(e[0].path, "metrics[0].kind");
    assert!(e[0].message.contains("COUNTER"), "{}", e[0]);
    assert_eq!(
        paths(json!({"metrics": [{"instanceName": "a.ns", "kind": "GAUGE", "labels": []}]})),
        ["metrics[0].labels"]
    );
}

#[test]
fn names() {
    assert_eq!(safe_name("/a/b.c d-e"), "a_b_c_de");
    assert!(is_valid_metric_name("istio_requests_total"));
    assert!(is_valid_metric_name("a:b"));
    assert!(!is_valid_metric_name("1a"));
    assert!(!is_valid_metric_name(""));
    assert!(is_valid_label_name("_a1"));
    assert!(!is_valid_label_name("__a"));
    assert!(!is_valid_label_name("a:b"));
    assert_eq!(instance_key("rc.instance.istio-system"), "rc.istio-system");
    assert_eq!(instance_key("rc.metric.istio-system"), "rc.istio-system");
    assert_eq!(instance_key("rc.istio-system"), "rc.istio-system");
    assert_eq!(instance_key("a.b.c"), "a.b.c");
}

#[test]
fn precounted_histograms() {
    let c = compile(json!({"metrics": [
        {"name": "h", "instance_name": "h.ns", "kind": "DISTRIBUTION", "precounted": "DELTA",
         "sum_dimension": "sum", "label_names": ["metric"]},
        {"name": "i", "instanceName": "i.ns", "kind": "DISTRIBUTION", "precounted": "CUMULATIVE"}
    ]}))
    .expect("valid");
    assert_eq!(c.metrics[0].precounted, Some(Precounted::Delta));
    assert_eq!(c.metrics[0].sum_dimension.as_deref(), Some("sum"));
    // The bounds come from the points, not the default buckets.
    assert!(c.metrics[0].buckets.is_empty());
    assert_eq!(c.metrics[1].precounted, Some(Precounted::Cumulative));
    assert_eq!(c.metrics[1].sum_dimension, None);

    let errs = paths(json!({"metrics": [
        {"name": "a", "instanceName": "a.ns", "kind": "GAUGE", "precounted": "CUMULATIVE"},
        {"name": "b", "instanceName": "b.ns", "kind": "DISTRIBUTION", "sumDimension": "sum"},
        {"name": "c", "instanceName": "c.ns", "kind": "DISTRIBUTION", "precounted": "DELTA",
         "buckets": {"explicitBuckets": {"bounds": [1]}}},
        {"name": "d", "instanceName": "d.ns", "kind": "DISTRIBUTION", "precounted": "DELTA",
         "sumDimension": "sum", "labelNames": ["metric", "sum"]},
        {"name": "e", "instanceName": "e.ns", "kind": "DISTRIBUTION", "precounted": "CUMULATIVE",
         "labelNames": ["le"]}
    ]}));
    assert_eq!(
        errs,
        [
            "metrics[0].precounted",
            "metrics[1].sumDimension",
            "metrics[2].buckets",
            "metrics[3].sumDimension",
            "metrics[4].labelNames[0]",
        ]
    );
    let e = compile(json!({"metrics": [
        {"name": "a", "instanceName": "a.ns", "kind": "DISTRIBUTION", "precounted": "SOMETIMES"}
    ]}))
    .expect_err("unknown temporality");
    assert!(e[0].path.contains("precounted"), "{e:?}");
}
