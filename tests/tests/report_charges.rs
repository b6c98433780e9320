//! Quota charged from reports (#35), end to end with the real mixer: a Mixer v1 Report retried
//! with the same deduplication id is charged once and the next Mixer v1 and forward-auth
//! checks see the charge; a check on a charged quota while Redis is down follows the handler's
//! fail policy (never an allow when it says CLOSED) and counts again once Redis is back; a
//! sampled or dry-run rule holding a charged quota instance is refused, by `mixer validate`
//! and by `mixer serve`.

use std::path::Path;
use std::time::{Duration, Instant};

use mixer_frontends::mixer_v1::{GLOBAL_WORD_COUNT, encode};
use mixer_model::{StringMap, Value};
use mixer_proto::istio::mixer::v1 as pb;
use mixer_proto::istio::mixer::v1::mixer_client::MixerClient;
use mixer_tests::poll::{until, until_async};
use mixer_tests::redis::{Redis, redis_installed};
use mixer_tests::{Mixer, http_request};
use tonic::transport::Channel;

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

/// A handler `name` counting 300 tokens a minute per `x-user` (`quota_params` add to its
/// quota, `handler_spec` to its spec), charged from reports by the `x-usage-tokens` response
/// header and deduplicated by the request id; checks are refused while fewer than
/// `min_remaining` tokens are left. Its rule matches requests whose `x-policy` header is
/// `name`.
fn token_limit(name: &str, adapter: &str, handler_spec: &str, min_remaining: u32) -> String {
    format!(
        r#"
kind: handler
metadata: {{name: {name}, namespace: istio-system}}
spec:
  compiledAdapter: {adapter}{handler_spec}
---
kind: instance
metadata: {{name: {name}, namespace: istio-system}}
spec:
  compiledTemplate: quota
  params:
    dimensions:
      user: request.headers["x-user"]
    charge: response.headers["x-usage-tokens"] | "0"
    minRemaining: "{min_remaining}"
    deduplicationId: request.id | ""
---
kind: rule
metadata: {{name: {name}, namespace: istio-system}}
spec:
  match: (request.headers["x-policy"] | "") == "{name}"
  actions: [{{handler: {name}, instances: [{name}]}}]
"#
    )
}

/// memquota's params for [`token_limit`]: a record's id is remembered longer than a proxy
/// retries a report.
fn memquota_params(name: &str) -> String {
    format!(
        "\n  params:\n    quotas: [{{name: {name}.instance.istio-system, maxAmount: 300, \
         validDuration: 1m, rateLimitAlgorithm: FIXED_WINDOW}}]\n    \
         minDeduplicationDuration: 2m"
    )
}

/// redisquota's params for [`token_limit`] on `port`; the call budget is far above its 5 ms
/// default, so that a busy machine does not fail a call while Redis is up.
fn redisquota_params(name: &str, port: u16, fail_policy: &str) -> String {
    format!(
        "{fail_policy}\n  params:\n    redisServerUrl: \"127.0.0.1:{port}\"\n    callTimeout: 1s\n    \
         quotas: [{{name: {name}.instance.istio-system, maxAmount: 300, validDuration: 1m, \
         rateLimitAlgorithm: FIXED_WINDOW}}]"
    )
}

fn start(dir: &Path, config: &str) -> Mixer {
    let path = dir.join("tokens.yaml");
    std::fs::write(&path, config).expect("write config");
    let mixer = Mixer::start(binary(), &["--config", path.to_str().expect("utf-8")]);
    mixer.wait_ready(Duration::from_secs(20));
    mixer
}

async fn connect(mixer: &Mixer) -> MixerClient<Channel> {
    MixerClient::connect(format!("http://{}", mixer.grpc))
        .await
        .expect("connect")
}

/// The attributes of a request of `user` under `policy`: with `tokens`, those of its
/// completed response (a report), without them those of the request (a check).
fn attributes(
    policy: &str,
    user: &str,
    id: &str,
    tokens: Option<&str>,
) -> pb::CompressedAttributes {
    let request_headers = Value::from(StringMap::from_pairs([
        ("x-policy", policy),
        ("x-user", user),
    ]));
    let id = Value::from(id);
    let mut values = vec![("request.headers", &request_headers), ("request.id", &id)];
    let response_headers =
        tokens.map(|t| Value::from(StringMap::from_pairs([("x-usage-tokens", t)])));
    if let Some(headers) = &response_headers {
        values.push(("response.headers", headers));
    }
    encode(values, GLOBAL_WORD_COUNT)
}

/// One Mixer v1 Report of a completed request of `user` that used `tokens`.
async fn report(c: &mut MixerClient<Channel>, policy: &str, user: &str, id: &str, tokens: &str) {
    c.report(pb::ReportRequest {
        attributes: vec![attributes(policy, user, id, Some(tokens))],
        repeated_attributes_semantics:
            pb::report_request::RepeatedAttributesSemantics::IndependentEncoding as i32,
        default_words: vec![],
        global_word_count: GLOBAL_WORD_COUNT as u32,
    })
    .await
    .expect("report");
}

/// A Mixer v1 Check of `user` (under the policy `quota`) asking the quota `quota` for one
/// unit.
fn quota_check(quota: &str, user: &str, id: &str) -> pb::CheckRequest {
    pb::CheckRequest {
        attributes: Some(attributes(quota, user, id, None)),
        global_word_count: GLOBAL_WORD_COUNT as u32,
        deduplication_id: id.into(),
        quotas: [(
            quota.to_string(),
            pb::check_request::QuotaParams {
                amount: 1,
                best_effort: false,
            },
        )]
        .into(),
    }
}

/// The quota result of [`quota_check`].
async fn check_quota(
    c: &mut MixerClient<Channel>,
    quota: &str,
    user: &str,
    id: &str,
) -> pb::check_response::QuotaResult {
    let response = c
        .check(quota_check(quota, user, id))
        .await
        .expect("check")
        .into_inner();
    response.quotas[quota].clone()
}

/// Forward-auth's answer for a request of `user` under `policy`.
fn forward_auth(mixer: &Mixer, policy: &str, user: &str) -> u16 {
    http_request(
        mixer.http,
        "GET",
        "/check",
        &[("x-policy", policy), ("x-user", user)],
    )
    .expect("forward-auth answers")
    .0
}

/// Waits (at most `limit`) until forward-auth answers `status` for `user` under `policy`.
async fn until_forward_auth(mixer: &Mixer, policy: &str, user: &str, status: u16, limit: Duration) {
    until_async(limit, Duration::from_millis(20), || {
        match forward_auth(mixer, policy, user) {
            got if got == status => Ok(()),
            got => Err(format!(
                "forward-auth still answers {got} for {user} under {policy}, not {status}"
            )),
        }
    })
    .await;
}

/// The tokens left to `user` on the quota `name`, from the admin listener's `/quota`.
fn remaining(mixer: &Mixer, name: &str, user: &str) -> i64 {
    let path = format!("/quota?handler={name}&quota={name}&dimension=user%3D{user}");
    let (status, _, body) = http_request(mixer.admin, "GET", &path, &[]).expect("/quota");
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("json");
    json["counters"][0]["remaining"]
        .as_i64()
        .unwrap_or_else(|| panic!("no remaining in {body}"))
}

/// Waits (at most 3 s, the bundle's promise for a charge to be seen) until `/quota` says
/// `want` tokens are left to `user`.
fn until_remaining(mixer: &Mixer, name: &str, user: &str, want: i64) {
    until(
        Duration::from_secs(3),
        Duration::from_millis(20),
        || match remaining(mixer, name, user) {
            got if got == want => Ok(()),
            got => Err(format!(
                "{user} has {got} tokens left on {name}, not {want}"
            )),
        },
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_mixer_v1_report_is_charged_once_and_the_next_checks_see_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Checks refused once fewer than 150 tokens are left: one report of 150 leaves exactly
    // that, a second charge of it would leave none.
    let config = token_limit("tokens", "memquota", &memquota_params("tokens"), 150);
    let mixer = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || start(&dir, &config)
    })
    .await
    .expect("join");
    let mut c = connect(&mixer).await;

    report(&mut c, "tokens", "alice", "req-1", "150").await;
    until_remaining(&mixer, "tokens", "alice", 150);
    // The proxy retries the same report (same request id) twice.
    report(&mut c, "tokens", "alice", "req-1", "150").await;
    report(&mut c, "tokens", "alice", "req-1", "150").await;
    // One handler's reports are charged in order: once bob's later charge is seen, alice's
    // retries were handled before it.
    report(&mut c, "tokens", "bob", "req-2", "10").await;
    until_remaining(&mixer, "tokens", "bob", 290);
    assert_eq!(remaining(&mixer, "tokens", "alice"), 150, "charged once");

    // The next checks see the charge, and charge nothing themselves.
    let granted = check_quota(&mut c, "tokens", "alice", "chk-1").await;
    assert_eq!(granted.granted_amount, 1, "{granted:?}");
    assert_eq!(forward_auth(&mixer, "tokens", "alice"), 200);
    assert_eq!(remaining(&mixer, "tokens", "alice"), 150);

    // One more token used: fewer than 150 left, both front ends refuse.
    report(&mut c, "tokens", "alice", "req-3", "1").await;
    until_remaining(&mixer, "tokens", "alice", 149);
    let refused = check_quota(&mut c, "tokens", "alice", "chk-2").await;
    assert_eq!(refused.granted_amount, 0, "{refused:?}");
    assert_eq!(forward_auth(&mixer, "tokens", "alice"), 429);
    assert!(mixer.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_on_a_charged_quota_follows_the_fail_policy_while_redis_is_down() {
    if !redis_installed() {
        return;
    }
    let mut redis = Redis::start();
    let dir = tempfile::tempdir().expect("tempdir");
    // Two handlers on the same Redis: one says CLOSED, the other keeps the quota default.
    let config = [
        token_limit(
            "closed",
            "redisquota",
            &redisquota_params("closed", redis.port, "\n  failPolicy: CLOSED"),
            1,
        ),
        token_limit(
            "open",
            "redisquota",
            &redisquota_params("open", redis.port, ""),
            1,
        ),
    ]
    .join("---\n");
    let mixer = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || start(&dir, &config)
    })
    .await
    .expect("join");
    assert_eq!(forward_auth(&mixer, "closed", "carol"), 200);
    assert_eq!(forward_auth(&mixer, "open", "carol"), 200);

    redis.kill();
    // Failed calls and the open circuit alike: CLOSED never allows, the default lets the
    // request through.
    for i in 0..10 {
        assert_eq!(forward_auth(&mixer, "closed", "carol"), 503, "check {i}");
        assert_eq!(forward_auth(&mixer, "open", "carol"), 200, "check {i}");
    }
    let mut c = connect(&mixer).await;
    let undecided = c.check(quota_check("closed", "carol", "chk-down")).await;
    let granted = undecided
        .as_ref()
        .ok()
        .and_then(|r| r.get_ref().quotas.get("closed"))
        .map_or(0, |q| q.granted_amount);
    assert_eq!(
        granted, 0,
        "a CLOSED quota granted while Redis was down: {undecided:?}"
    );

    // Redis back (empty): checks are decided by it again, and a charge counts.
    redis.restart();
    until_forward_auth(&mixer, "closed", "carol", 200, Duration::from_secs(5)).await;
    report(&mut c, "closed", "carol", "req-up", "300").await;
    until_forward_auth(&mixer, "closed", "carol", 429, Duration::from_secs(3)).await;
    assert!(mixer.terminate().success());
}

/// A charged quota on a sampled rule and on a dry-run rule, beside a valid deny rule.
const REFUSED: &str = r#"
kind: handler
metadata: {name: tokens, namespace: istio-system}
spec:
  compiledAdapter: memquota
  params:
    quotas: [{name: tokens.instance.istio-system, maxAmount: 300, validDuration: 1m}]
---
kind: instance
metadata: {name: tokens, namespace: istio-system}
spec:
  compiledTemplate: quota
  params:
    dimensions:
      user: request.headers["x-user"]
    charge: response.headers["x-usage-tokens"] | "0"
---
kind: rule
metadata: {name: sampled, namespace: istio-system}
spec:
  actions: [{handler: tokens, instances: [tokens]}]
  sampling: {random: {percentSampled: 10}}
---
kind: rule
metadata:
  name: trial
  namespace: istio-system
  annotations: {istio.io/dry-run: "true"}
spec:
  actions: [{handler: tokens, instances: [tokens]}]
"#;

#[test]
fn a_sampled_or_dry_run_rule_holding_a_charged_quota_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tokens.yaml");
    std::fs::write(&path, REFUSED).expect("write");
    let out = std::process::Command::new(binary())
        .arg("validate")
        .arg(&path)
        .output()
        .expect("run mixer validate");
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    for expected in [
        "tokens.yaml: rule sampled: spec.sampling: quota instance tokens.instance.istio-system is \
         charged from reports (its `charge`): sampling would charge only the sampled reports' \
         usage and under-count it",
        "tokens.yaml: rule trial: metadata.annotations[\"istio.io/dry-run\"]: quota instance \
         tokens.instance.istio-system is charged from reports (its `charge`): a dry-run rule \
         would spend real quota",
    ] {
        assert!(said.contains(expected), "missing {expected:?} in:\n{said}");
    }

    // `mixer serve` refuses the config rather than serve it under-counted: up, not ready,
    // saying why.
    let mixer = Mixer::start(
        binary(),
        &["--config", path.to_str().expect("utf-8"), "--no-watch"],
    );
    let start = Instant::now();
    let (status, body) = loop {
        if let Ok((status, _, body)) = http_request(mixer.admin, "GET", "/readyz", &[])
            && body.contains("spec.sampling")
        {
            break (status, body);
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "/readyz never named the refused rule"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("quota instance tokens.instance.istio-system is charged from reports"),
        "{body}"
    );
}
