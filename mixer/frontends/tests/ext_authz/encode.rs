//! The Check method writes its answer straight to the gRPC frame
//! (`framed_check_response`); it must decode to exactly the `CheckResponse` that
//! `check_response` builds, whatever the verdict.

use mixer_model::{Code, DryRunOutcome, HeaderOp, HeaderOperation, Status, Verdict, WouldBe};
use mixer_runtime::{CacheTier, Checked};
use proptest::prelude::*;
use prost::Message;

use super::*;

fn text() -> BoxedStrategy<String> {
    prop_oneof![
        Just(String::new()),
        "[a-z-]{1,12}",
        "\\PC{0,8}",
        // Values with bytes Envoy rejects, which the answer leaves out.
        Just("bad\r\nvalue".to_string()),
        // Long enough that a message's length takes two bytes.
        "[a-z]{130,300}",
    ]
    .boxed()
}

fn header_ops() -> BoxedStrategy<Vec<HeaderOperation>> {
    let op = prop_oneof![
        Just(HeaderOp::Replace),
        Just(HeaderOp::Append),
        Just(HeaderOp::Remove)
    ];
    prop::collection::vec(
        (text(), text(), op).prop_map(|(name, value, op)| HeaderOperation { name, value, op }),
        0..4,
    )
    .boxed()
}

fn checked() -> BoxedStrategy<Checked> {
    let rules = prop::collection::vec("[a-z-]{1,20}\\.istio-system", 0..12);
    (
        0i32..17,
        text(),
        header_ops(),
        header_ops(),
        rules,
        any::<bool>(),
        prop::option::of("[a-z-]{1,20}\\.handler\\.istio-system"),
        prop::collection::vec(("[a-z-]{1,12}\\.rule\\.istio-system", 0u8..3), 0..3),
    )
        .prop_map(
            |(code, message, request, response, rules, cache_hit, denied_by, dry_run)| Checked {
                verdict: Arc::new(Verdict {
                    status: Status::new(Code::from_i32(code), message),
                    denied_by: denied_by.map(Arc::from),
                    request_header_ops: request,
                    response_header_ops: response,
                    matched_rules: rules.into_iter().map(Arc::from).collect(),
                    dry_run: dry_run
                        .into_iter()
                        .map(|(rule, w)| DryRunOutcome {
                            rule: Arc::from(rule),
                            would_be: [WouldBe::Allow, WouldBe::Deny, WouldBe::Error][w as usize],
                            status: Status::OK,
                        })
                        .collect(),
                    ..Default::default()
                }),
                cache_hit,
                tier: if cache_hit {
                    CacheTier::InProcess
                } else {
                    CacheTier::None
                },
            },
        )
        .boxed()
}

fn decoded(frame: &[u8]) -> CheckResponse {
    let (head, message) = frame.split_at(5);
    assert_eq!(head[0], 0, "not compressed");
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    assert_eq!(
        len,
        message.len(),
        "the frame announces the message's length"
    );
    CheckResponse::decode(message).expect("a CheckResponse")
}

proptest! {
    #[test]
    fn the_frame_holds_the_response_check_response_builds(checked in checked()) {
        let frame = ext_authz::framed_check_response(&checked);
        prop_assert_eq!(decoded(&frame), ext_authz::check_response(&checked));
    }

    /// With the decision id, as every answer of the Check method is written: the id's
    /// digits in the frame are those `check_response_with_id` puts in its Struct.
    #[test]
    fn the_frame_with_a_decision_id_holds_the_response_built_with_it(checked in checked()) {
        let id = mixer_runtime::DecisionId::next();
        let frame = ext_authz::framed_check_response_with_id(&checked, Some(id));
        let response = decoded(&frame);
        prop_assert_eq!(&response, &ext_authz::check_response_with_id(&checked, Some(id)));
        let metadata = response.dynamic_metadata.expect("decision metadata");
        let written = &metadata.fields[ext_authz::metadata_keys::DECISION_ID];
        prop_assert_eq!(
            written.kind.clone(),
            Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(
                id.to_string()
            ))
        );
    }
}

#[test]
fn an_allowed_and_a_denied_answer_keep_their_parts() {
    let allowed = Checked {
        verdict: Arc::new(Verdict {
            request_header_ops: vec![HeaderOperation {
                name: "x-user".into(),
                value: "amy".into(),
                op: HeaderOp::Replace,
            }],
            matched_rules: vec![Arc::from("tag-user.istio-system")],
            ..Default::default()
        }),
        cache_hit: true,
        tier: CacheTier::InProcess,
    };
    let denied = Checked {
        verdict: Arc::new(Verdict {
            status: Status::new(Code::Unauthenticated, ""),
            ..Default::default()
        }),
        cache_hit: false,
        tier: CacheTier::None,
    };
    for checked in [allowed, denied] {
        let frame = ext_authz::framed_check_response(&checked);
        let response = decoded(&frame);
        assert_eq!(response, ext_authz::check_response(&checked));
        let metadata = response.dynamic_metadata.expect("decision metadata");
        assert_eq!(metadata.fields.len(), 3);
    }
    // A matched dry-run rule's would-be verdict rides along, under its full name.
    let audited = Checked {
        verdict: Arc::new(Verdict {
            dry_run: vec![DryRunOutcome {
                rule: Arc::from("deny-beta.rule.istio-system"),
                would_be: WouldBe::Deny,
                status: Status::new(Code::PermissionDenied, "deny.handler.istio-system:no"),
            }],
            ..Default::default()
        }),
        cache_hit: false,
        tier: CacheTier::None,
    };
    let response = decoded(&ext_authz::framed_check_response(&audited));
    assert_eq!(response, ext_authz::check_response(&audited));
    let metadata = response.dynamic_metadata.expect("decision metadata");
    let runs = match metadata.fields.get("dry_run").and_then(|v| v.kind.as_ref()) {
        Some(envoy_types::pb::google::protobuf::value::Kind::StructValue(s)) => s.clone(),
        other => panic!("dry_run is not a struct: {other:?}"),
    };
    assert_eq!(
        runs.fields
            .get("deny-beta.rule.istio-system")
            .and_then(|v| v.kind.clone()),
        Some(envoy_types::pb::google::protobuf::value::Kind::StringValue(
            "deny".into()
        ))
    );
}

#[test]
fn an_answer_from_the_shared_cache_says_so() {
    use envoy_types::pb::google::protobuf::value::Kind;
    let tier = |tier: CacheTier| {
        let checked = Checked {
            verdict: Arc::new(Verdict::default()),
            cache_hit: tier != CacheTier::None,
            tier,
        };
        let response = decoded(&ext_authz::framed_check_response(&checked));
        assert_eq!(response, ext_authz::check_response(&checked));
        let metadata = response.dynamic_metadata.expect("decision metadata");
        metadata
            .fields
            .get("cache_tier")
            .and_then(|v| v.kind.clone())
    };
    assert_eq!(
        tier(CacheTier::Shared),
        Some(Kind::StringValue("shared".into()))
    );
    // This replica's cache or none: `cache_hit` alone says which.
    assert_eq!(tier(CacheTier::InProcess), None);
    assert_eq!(tier(CacheTier::None), None);
}
