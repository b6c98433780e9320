//! Allowed, denied and undecidable checks: validity, referenced attributes, header operations.

use super::*;
use mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT;
use std::time::Duration;
use tonic::Code;

#[tokio::test]
async fn allowed_check_answers_validity_references_and_header_operations() {
    let mut h = start().await;
    let request = check_request(
        &[
            ("request.method", Value::from("GET")), // name and value from the global dictionary
            (
                "request.headers",
                headers(&[("x-user", "amy"), ("accept", "*/*")]),
            ),
            (
                "source.ip",
                Value::IpAddress("10.0.0.7".parse().expect("ip")),
            ),
            ("request.size", Value::Int64(12)),
            ("x-custom.attribute", Value::from("kept")), // undeclared, message words
        ],
        GLOBAL_WORD_COUNT,
    );
    // The request really mixes global and message words.
    let attrs = request.attributes.as_ref().expect("attributes");
    assert!(attrs.strings.contains_key(&19) && attrs.strings[&19] == 90);
    assert!(attrs.words.iter().any(|w| w == "amy"));

    let response = h.client.check(request).await.expect("check").into_inner();
    let p = response.precondition.expect("precondition");
    let status = p.status.expect("status");
    assert_eq!(status.code, 0);
    assert_eq!(status.message, "");
    // The one handler asked (noop) sets the validity, as Istio's dispatcher combines
    // answers; Istio's noop adapter answers 1e9 s and 1e9 uses (mixer/adapter/noop/noop.go).
    assert_eq!(
        p.valid_duration,
        Some(prost_types::Duration {
            seconds: 1_000_000_000,
            nanos: 0
        })
    );
    assert_eq!(p.valid_use_count, 1_000_000_000);
    assert_eq!(
        decoded_refs(p.referenced_attributes.as_ref().expect("refs")),
        vec![
            exact("request.headers", Some("x-user")),
            exact("request.method", None),
        ]
    );
    // Global indices where the client knows the word; "x-user" is a message word.
    let refs = p.referenced_attributes.expect("refs");
    assert_eq!(refs.words, ["x-user"]);
    let mut names: Vec<(i32, i32)> = refs
        .attribute_matches
        .iter()
        .map(|m| (m.name, m.map_key))
        .collect();
    names.sort();
    assert_eq!(names, [(15, -1), (19, 0)]);

    use pb::header_operation::Operation::*;
    let directive = p.route_directive.expect("route directive");
    assert_eq!(
        header_ops(&directive.request_header_operations),
        [
            ("x-seen-by".to_string(), "mixer".to_string(), Replace),
            ("x-user".to_string(), "amy".to_string(), Append),
        ]
    );
    assert_eq!(
        header_ops(&directive.response_header_operations),
        [("server".to_string(), String::new(), Remove)]
    );
    assert_eq!(directive.direct_response_code, 0);
    assert!(response.quotas.is_empty());
}

#[tokio::test]
async fn denied_check_carries_the_denial() {
    let mut h = start().await;
    let response = h
        .client
        .check(check_request(
            &[
                ("request.method", Value::from("POST")),
                ("request.headers", headers(&[("x-user", "bob")])),
            ],
            GLOBAL_WORD_COUNT,
        ))
        .await
        .expect("a denial is an answer, not an error")
        .into_inner();
    let p = response.precondition.expect("precondition");
    let status = p.status.expect("status");
    assert_eq!(status.code, Code::PermissionDenied as i32);
    // Istio 1.4's dispatcher names the denying handler before its message
    // (mixer/pkg/runtime/dispatcher/session.go: HandlerName + ":" + st.Message).
    assert_eq!(status.message, "deny.handler.istio-system:no bob");
    assert_eq!(
        p.valid_duration,
        Some(prost_types::Duration {
            seconds: 3,
            nanos: 0
        })
    );
    assert_eq!(p.valid_use_count, 5);
    assert_eq!(
        decoded_refs(p.referenced_attributes.as_ref().expect("refs")),
        vec![
            exact("request.headers", Some("x-user")),
            exact("request.method", None),
        ]
    );
    assert!(
        p.route_directive.is_none(),
        "no rule with header operations matched"
    );
}

#[tokio::test]
async fn absent_attributes_and_keys_are_referenced_as_absence() {
    let mut h = start().await;
    // No headers at all: the whole map is absent.
    let p = h
        .client
        .check(check_request(
            &[("request.method", Value::from("PUT"))],
            GLOBAL_WORD_COUNT,
        ))
        .await
        .expect("check")
        .into_inner()
        .precondition
        .expect("precondition");
    let refs = p.referenced_attributes.expect("refs");
    assert_eq!(
        decoded_refs(&refs),
        vec![
            absent("request.headers", None),
            exact("request.method", None)
        ]
    );
    // "No key" is map_key 0, as Istio sends it.
    assert!(refs.attribute_matches.iter().all(|m| m.map_key == 0));

    // Headers present without the key: the key is absent.
    let p = h
        .client
        .check(check_request(
            &[
                ("request.method", Value::from("PUT")),
                ("request.headers", headers(&[("accept", "*/*")])),
            ],
            GLOBAL_WORD_COUNT,
        ))
        .await
        .expect("check")
        .into_inner()
        .precondition
        .expect("precondition");
    assert_eq!(
        decoded_refs(&p.referenced_attributes.expect("refs")),
        vec![
            absent("request.headers", Some("x-user")),
            exact("request.method", None),
        ]
    );
}

#[tokio::test]
async fn an_older_client_gets_only_the_global_words_it_knows() {
    let mut h = start().await;
    // A client that knows the first 16 global words: request.headers (15) yes,
    // request.method (19) and GET (90) no.
    let request = check_request(
        &[
            ("request.method", Value::from("GET")),
            ("request.headers", headers(&[("x-user", "amy")])),
        ],
        16,
    );
    let attrs = request.attributes.as_ref().expect("attributes");
    assert!(attrs.words.iter().any(|w| w == "request.method"));
    assert!(attrs.words.iter().any(|w| w == "GET"));
    let p = h
        .client
        .check(request)
        .await
        .expect("check")
        .into_inner()
        .precondition
        .expect("precondition");
    assert_eq!(p.status.expect("status").code, 0);
    let refs = p.referenced_attributes.expect("refs");
    assert!(
        refs.attribute_matches
            .iter()
            .all(|m| m.name < 16 && m.map_key < 16)
    );
    assert_eq!(
        decoded_refs(&refs),
        vec![
            exact("request.headers", Some("x-user")),
            exact("request.method", None),
        ]
    );
    let mut words = refs.words.clone();
    words.sort();
    assert_eq!(words, ["request.method", "x-user"]);
}

#[tokio::test]
async fn a_newer_dictionary_than_ours_is_refused_as_istio_did() {
    let mut h = start().await;
    let mut request = check_request(&[("request.method", Value::from("GET"))], GLOBAL_WORD_COUNT);
    request.global_word_count = GLOBAL_WORD_COUNT as u32 + 1;
    let err = h.client.check(request).await.expect_err("refused");
    assert_eq!(err.code(), Code::Internal);
    assert!(
        err.message().contains(
            "inconsistent global dictionary versions used: mixer knows 222 words, caller knows 223"
        ),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn a_handler_that_cannot_decide_is_unavailable_not_a_denial() {
    let mut h = start().await;
    let err = h
        .client
        .check(check_request(
            &[("request.headers", headers(&[("x-user", "crash")]))],
            GLOBAL_WORD_COUNT,
        ))
        .await
        .expect_err("could not decide");
    assert_eq!(err.code(), Code::Unavailable);
    assert!(err.message().contains("backend down"), "{}", err.message());
}

#[tokio::test]
async fn without_config_the_answer_is_unavailable() {
    let records = Arc::new(Mutex::new(Vec::new()));
    let mut h = serve(runtime(records)).await; // never reloaded
    let err = h
        .client
        .check(check_request(&[], GLOBAL_WORD_COUNT))
        .await
        .expect_err("not ready");
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(err.message(), "no valid config is active");
    let err = h
        .client
        .report(pb::ReportRequest::default())
        .await
        .expect_err("not ready");
    assert_eq!(err.code(), Code::Unavailable);
}

#[tokio::test]
async fn checks_answer_quickly_enough_for_a_sidecar() {
    // A smoke test of the whole path under a little concurrency (no timing assertions beyond
    // a generous bound, which only catches hangs).
    let h = start().await;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let mut client = h.client.clone();
        tasks.push(tokio::spawn(async move {
            let user = if i % 2 == 0 { "bob" } else { "amy" };
            client
                .check(check_request(
                    &[
                        ("request.method", Value::from("GET")),
                        ("request.headers", headers(&[("x-user", user)])),
                    ],
                    GLOBAL_WORD_COUNT,
                ))
                .await
                .expect("check")
                .into_inner()
                .precondition
                .expect("p")
                .status
                .expect("s")
                .code
        }));
    }
    let mut denied = 0;
    for t in tasks {
        let code = tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("in time")
            .expect("task");
        if code == Code::PermissionDenied as i32 {
            denied += 1;
        }
    }
    assert_eq!(denied, 10);
}
