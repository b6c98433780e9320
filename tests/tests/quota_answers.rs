//! Mixer v1 quota answers over the limit, as Istio 1.4's adapters give them, through the real
//! mixer and a real Redis. The config and the expected values are Istio's own:
//! istio/istio release-1.4 `mixer/adapter/redisquota/redisquota_integration_test.go`
//! (`adapterConfig`, cases "Request 30 when 50 is available", "Exceed allocation request with
//! bestEffort", "Exceed allocation request without bestEffort", "Dimension override with best
//! effort"), and for memquota `mixer/adapter/memquota/memquota.go` (`alloc`: a refusal is
//! `status.OK`, amount 0, no expiration).

use std::path::Path;
use std::time::Duration;

use mixer_frontends::mixer_v1::{GLOBAL_WORD_COUNT, encode};
use mixer_model::Value;
use mixer_proto::istio::mixer::v1 as pb;
use mixer_proto::istio::mixer::v1::mixer_client::MixerClient;
use mixer_tests::Mixer;
use mixer_tests::redis::Redis;
use tonic::transport::Channel;

/// Istio's `adapterConfig`, with `kind` the adapter under test and the Redis address filled
/// in (memquota takes the same quotas, without the Redis params).
fn config(kind: &str, algorithm: &str, redis_port: Option<u16>) -> String {
    let redis = redis_port.map_or(String::new(), |port| {
        format!("  redisServerUrl: 127.0.0.1:{port}\n  connectionPoolSize: 10\n  callTimeout: 2s\n")
    });
    format!(
        r#"
apiVersion: "config.istio.io/v1alpha2"
kind: {kind}
metadata:
  name: handler
  namespace: istio-system
spec:
  quotas:
  - name: requestCount.quota.istio-system
    maxAmount: 50
    validDuration: 30s
    bucketDuration: 1s
    rateLimitAlgorithm: {algorithm}
    overrides:
    - dimensions:
        destination: ratings
        source: reviews
      maxAmount: 12
    - dimensions:
        destination: reviews
      maxAmount: 5
{redis}
---
apiVersion: "config.istio.io/v1alpha2"
kind: quota
metadata:
  name: requestCount
  namespace: istio-system
spec:
  dimensions:
    source: source.labels["app"] | source.name | "unknown"
    sourceVersion: source.labels["version"] | "unknown"
    destination: destination.labels["app"] | destination.service.name | "unknown"
    destinationVersion: destination.labels["version"] | "unknown"
---
apiVersion: "config.istio.io/v1alpha2"
kind: rule
metadata:
  name: quota
  namespace: istio-system
spec:
  actions:
  - handler: handler.{kind}
    instances:
    - requestCount.quota
"#
    )
}

/// The `requestCount` quota result of a Check with `attrs` asking for `amount`.
async fn ask(
    c: &mut MixerClient<Channel>,
    attrs: &[(&str, &str)],
    amount: i64,
    best_effort: bool,
) -> pb::check_response::QuotaResult {
    let values: Vec<(&str, Value)> = attrs.iter().map(|(k, v)| (*k, Value::from(*v))).collect();
    let request = pb::CheckRequest {
        attributes: Some(encode(
            values.iter().map(|(k, v)| (*k, v)),
            GLOBAL_WORD_COUNT,
        )),
        global_word_count: GLOBAL_WORD_COUNT as u32,
        deduplication_id: String::new(),
        quotas: [(
            "requestCount".to_string(),
            pb::check_request::QuotaParams {
                amount,
                best_effort,
            },
        )]
        .into(),
    };
    let response = c.check(request).await.expect("check").into_inner();
    response.quotas["requestCount"].clone()
}

fn seconds(q: &pb::check_response::QuotaResult) -> i64 {
    q.valid_duration.map_or(0, |d| d.seconds)
}

fn code(q: &pb::check_response::QuotaResult) -> i32 {
    q.status.as_ref().map_or(0, |s| s.code)
}

fn message(q: &pb::check_response::QuotaResult) -> String {
    q.status
        .as_ref()
        .map_or(String::new(), |s| s.message.clone())
}

fn start(dir: &Path, text: &str) -> Mixer {
    let path = dir.join("quota.yaml");
    std::fs::write(&path, text).expect("write config");
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let mixer = Mixer::start(binary, &["--config", path.to_str().expect("utf-8")]);
    mixer.wait_ready(Duration::from_secs(10));
    mixer
}

async fn connect(mixer: &Mixer) -> MixerClient<Channel> {
    MixerClient::connect(format!("http://{}", mixer.grpc))
        .await
        .expect("connect")
}

/// A case: the Check's attributes, the amount asked, best effort.
type Case = (&'static [(&'static str, &'static str)], i64, bool);

/// Istio's four cases for one adapter; each starts from empty counters (Istio ran each on a
/// fresh Redis), here a fresh mixer each, and for redisquota a flushed Redis.
async fn istio_cases(
    kind: &'static str,
    algorithm: &'static str,
    redis: Option<&Redis>,
) -> Vec<pb::check_response::QuotaResult> {
    let mut answers = Vec::new();
    let cases: [Case; 4] = [
        (&[], 30, true),
        (&[], 60, true),
        (&[], 60, false),
        (
            &[
                ("source.name", "reviews"),
                ("destination.service.name", "ratings"),
            ],
            15,
            true,
        ),
    ];
    for (attrs, amount, best_effort) in cases {
        let port = redis.map(|r| {
            r.flush();
            r.port
        });
        let dir = tempfile::tempdir().expect("tempdir");
        let text = config(kind, algorithm, port);
        let mixer = tokio::task::spawn_blocking({
            let dir = dir.path().to_path_buf();
            move || start(&dir, &text)
        })
        .await
        .expect("join");
        let mut c = connect(&mixer).await;
        answers.push(ask(&mut c, attrs, amount, best_effort).await);
        assert!(mixer.terminate().success());
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisquota_answers_as_istio_does() {
    let redis = Redis::start();
    for algorithm in ["FIXED_WINDOW", "ROLLING_WINDOW"] {
        let got = istio_cases("redisquota", algorithm, Some(&redis)).await;
        // "Request 30 when 50 is available": Amount 30, ValidDuration 30s.
        assert_eq!(
            (got[0].granted_amount, seconds(&got[0])),
            (30, 30),
            "{got:?}"
        );
        // "Exceed allocation request with bestEffort": Amount 50, ValidDuration 30s.
        assert_eq!(
            (got[1].granted_amount, seconds(&got[1])),
            (50, 30),
            "{got:?}"
        );
        // "Exceed allocation request without bestEffort": code 8, ValidDuration 0, Amount 0,
        // and the message of Istio's adapter behind the handler's name.
        assert_eq!(
            (code(&got[2]), got[2].granted_amount, seconds(&got[2])),
            (8, 0, 0),
            "{got:?}"
        );
        assert!(
            got[2].valid_duration.is_none_or(|d| d.nanos == 0),
            "{got:?}"
        );
        let said = message(&got[2]);
        assert!(
            said.starts_with("handler.") && said.ends_with(":redisquota: Resource exhausted"),
            "{said}"
        );
        // "Dimension override with best effort": Amount 12, ValidDuration 30s.
        assert_eq!(
            (got[3].granted_amount, seconds(&got[3])),
            (12, 30),
            "{got:?}"
        );
    }
}

/// Istio's exact message, with Istio's handler name (`name.kind.namespace`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisquota_refusal_names_the_handler_as_istio_does() {
    let redis = Redis::start();
    let got = istio_cases("redisquota", "FIXED_WINDOW", Some(&redis)).await;
    assert_eq!(
        message(&got[2]),
        "handler.redisquota.istio-system:redisquota: Resource exhausted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memquota_answers_as_istio_does() {
    for algorithm in ["FIXED_WINDOW", "ROLLING_WINDOW"] {
        let got = istio_cases("memquota", algorithm, None).await;
        assert_eq!(
            (got[0].granted_amount, seconds(&got[0])),
            (30, 30),
            "{got:?}"
        );
        assert_eq!(
            (got[1].granted_amount, seconds(&got[1])),
            (50, 30),
            "{got:?}"
        );
        // A refusal is status OK with nothing granted, valid for 0 (`memquota.go`, `alloc`).
        assert_eq!(
            (
                code(&got[2]),
                message(&got[2]),
                got[2].granted_amount,
                seconds(&got[2])
            ),
            (0, String::new(), 0, 0),
            "{got:?}"
        );
        assert_eq!(
            (got[3].granted_amount, seconds(&got[3])),
            (12, 30),
            "{got:?}"
        );
    }
}
