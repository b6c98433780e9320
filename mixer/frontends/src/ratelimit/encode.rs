//! The `RateLimitResponse` written straight to its gRPC frame from the descriptors' quota
//! outcomes, as [`response_of`](super::response_of) and the decision id header would have it
//! encoded, without building the generated message: a counted descriptor's answer is a
//! `current_limit` name and three `X-RateLimit-*` headers, each a `String` of the generated
//! message, allocated only to be encoded and dropped.
//!
//! Fields are written in tag order and defaults left out, as prost writes them, so the bytes
//! are exactly prost's (the tests compare them).

use bytes::Bytes;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use mixer_runtime::{DECISION_ID_HEADER, DecisionId, QuotaOutcome};

use super::respond::{
    LIMIT_HEADER, REMAINING_HEADER, RESET_HEADER, Said, header_values, over_limit, pb_duration,
};
use crate::protowire::{int, int64, message, string};

/// The gRPC frame of the answer to a request whose descriptors came to `outcomes` (in request
/// order, `None` for one that asked for nothing), with the decision id header last.
pub(crate) fn framed_response(outcomes: &[Option<QuotaOutcome>], id: DecisionId) -> Bytes {
    // Nearly every request has one descriptor: no vector for its answer.
    let one: [Said<'_>; 1];
    let many: Vec<Said<'_>>;
    let said: &[Said<'_>] = match outcomes {
        [o] => {
            one = [Said::of(o)];
            &one
        }
        _ => {
            many = outcomes.iter().map(Said::of).collect();
            &many
        }
    };
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&[0; 5]);
    // RateLimitResponse.overall_code (1).
    let overall = if over_limit(said, outcomes) {
        Code::OverLimit
    } else {
        Code::Ok
    };
    int(&mut out, 1, overall as i32);
    // statuses (2).
    for s in said {
        message(&mut out, 2, |m| descriptor_status(m, s));
    }
    // response_headers_to_add (3): the limit's headers, then the decision id.
    let mut digits = itoa::Buffer::new();
    let headers = header_values(said.iter().map(|s| {
        (
            s.code == Code::OverLimit,
            s.limit.map(|(_, per_unit, _)| per_unit),
            s.remaining,
            s.reset.map(pb_duration),
        )
    }));
    if let Some((limit, remaining, reset)) = headers {
        header(&mut out, LIMIT_HEADER, digits.format(limit));
        header(&mut out, REMAINING_HEADER, digits.format(remaining));
        if let Some(seconds) = reset {
            header(&mut out, RESET_HEADER, digits.format(seconds));
        }
    }
    let hex = id.to_hex();
    // Only ASCII hex digits are written.
    header(
        &mut out,
        DECISION_ID_HEADER,
        std::str::from_utf8(&hex).unwrap_or_default(),
    );
    let len = u32::try_from(out.len() - 5).unwrap_or(u32::MAX);
    out[1..5].copy_from_slice(&len.to_be_bytes());
    Bytes::from(out)
}

/// DescriptorStatus: code (1), current_limit (2), limit_remaining (3),
/// duration_until_reset (4).
fn descriptor_status(m: &mut Vec<u8>, s: &Said<'_>) {
    int(m, 1, s.code as i32);
    if let Some((name, per_unit, unit)) = s.limit {
        // RateLimit: requests_per_unit (1), unit (2), name (3).
        message(m, 2, |l| {
            int64(l, 1, i64::from(per_unit));
            int(l, 2, unit as i32);
            string(l, 3, name);
        });
    }
    int64(m, 3, i64::from(s.remaining));
    if let Some(reset) = s.reset {
        // google.protobuf.Duration: seconds (1), nanos (2).
        let d = pb_duration(reset);
        message(m, 4, |p| {
            int64(p, 1, d.seconds);
            int(p, 2, d.nanos);
        });
    }
}

/// HeaderValue: key (1), value (2).
fn header(out: &mut Vec<u8>, key: &str, value: &str) {
    message(out, 3, |h| {
        string(h, 1, key);
        string(h, 2, value);
    });
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use envoy_types::pb::envoy::config::core::v3::HeaderValue;
    use mixer_model::{QuotaLimit, QuotaResult, ReferencedAttributes, Status};

    use super::*;
    use crate::ratelimit::response_of;

    fn outcome(refused: bool, limit: Option<QuotaLimit>, quota_mode: bool) -> QuotaOutcome {
        QuotaOutcome {
            result: QuotaResult {
                status: Status::OK,
                valid_duration: Duration::from_millis(1500),
                granted_amount: i64::from(!refused),
                limit,
            },
            referenced: ReferencedAttributes::new(),
            instances: vec![Arc::from("q.instance.istio-system")].into(),
            refused,
            unlimited: false,
            quota_mode,
            dry_run: Vec::new(),
            failed_open: Vec::new(),
        }
    }

    fn limit(max: i64, window: Duration, remaining: i64, reset_ms: u64) -> QuotaLimit {
        QuotaLimit {
            name: Arc::from("tenant.instance.istio-system"),
            max_amount: max,
            window,
            remaining,
            reset_after: Duration::from_millis(reset_ms),
            retry_after: Duration::from_millis(reset_ms / 2),
        }
    }

    /// What prost writes for the generated answer with the decision id header added.
    fn prost_frame(outcomes: &[Option<QuotaOutcome>], id: DecisionId) -> Vec<u8> {
        let mut response = response_of(outcomes);
        response.response_headers_to_add.push(HeaderValue {
            key: DECISION_ID_HEADER.to_string(),
            value: id.to_string(),
            raw_value: Vec::new(),
        });
        mixer_grpc::framed(&response).to_vec()
    }

    #[test]
    fn the_frame_is_the_one_prost_writes_for_the_generated_answer() {
        let second = Duration::from_secs(1);
        let unlimited = QuotaOutcome {
            unlimited: true,
            instances: Default::default(),
            ..outcome(false, None, false)
        };
        let cases: Vec<Vec<Option<QuotaOutcome>>> = vec![
            // Not counted: no rule, then no limit said.
            vec![None],
            vec![Some(outcome(false, None, false))],
            // Counted, granted and refused, with a window the protocol can say and one it
            // cannot.
            vec![Some(outcome(
                false,
                Some(limit(1_000_000, second, 999_999, 420)),
                false,
            ))],
            vec![Some(outcome(
                true,
                Some(limit(10, second, 0, 1_000)),
                false,
            ))],
            vec![Some(outcome(
                false,
                Some(limit(10, Duration::from_secs(7), 3, 0)),
                false,
            ))],
            vec![Some(outcome(
                false,
                Some(limit(
                    u32::MAX as i64 + 5,
                    Duration::from_secs(3600),
                    200,
                    59_999,
                )),
                false,
            ))],
            // Several descriptors: the most constraining one's headers; quota mode.
            vec![
                Some(outcome(false, Some(limit(100, second, 50, 300)), false)),
                None,
                Some(unlimited.clone()),
                Some(outcome(
                    false,
                    Some(limit(20, Duration::from_secs(60), 5, 30_000)),
                    false,
                )),
            ],
            vec![
                Some(outcome(true, Some(limit(10, second, 0, 800)), true)),
                Some(outcome(false, Some(limit(10, second, 4, 800)), false)),
            ],
            vec![Some(outcome(true, Some(limit(10, second, 0, 800)), true))],
            vec![Some(unlimited)],
        ];
        for (i, outcomes) in cases.iter().enumerate() {
            let id = DecisionId::next();
            assert_eq!(
                framed_response(outcomes, id).to_vec(),
                prost_frame(outcomes, id),
                "case {i}"
            );
        }
    }
}
