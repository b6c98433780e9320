//! Reports in both encodings, and a bad record part-way through a report.

use super::*;
use mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT;
use mixer_model::LogEntryInstance;
use pb::report_request::RepeatedAttributesSemantics;
use tonic::Code;

/// The recorded (method, user, size) of each report instance.
fn recorded(records: &Mutex<Vec<Instance>>) -> Vec<(String, String, i64)> {
    records
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|i| {
            let vars = LogEntryInstance::of(i).expect("a logentry").variables;
            let get = |k: &str| {
                vars.get(k)
                    .cloned()
                    .unwrap_or_else(|| panic!("variable {k}"))
            };
            (
                get("method").to_string(),
                get("user").to_string(),
                get("size").as_i64().expect("size is an int"),
            )
        })
        .collect()
}

/// Report instances are delivered from the handler's queue, shortly after the Report is
/// answered: wait (a bounded time) until `n` have arrived.
async fn wait_recorded(records: &Mutex<Vec<Instance>>, n: usize) -> Vec<(String, String, i64)> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while records.lock().expect("not poisoned").len() < n && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    recorded(records)
}

/// Three records: a full one, then one with only a new size, then one with another method.
/// The later records use the request's default words (they have none of their own).
fn report_request(semantics: RepeatedAttributesSemantics) -> pb::ReportRequest {
    let first = encode(
        [
            ("request.method", &Value::from("GET")),
            ("request.headers", &headers(&[("x-user", "amy")])),
            ("request.size", &Value::Int64(10)),
        ],
        GLOBAL_WORD_COUNT,
    );
    assert_eq!(first.words, ["x-user", "amy"]);
    let mut second = pb::CompressedAttributes::default();
    second.int64s.insert(23, 20); // request.size
    let mut third = pb::CompressedAttributes::default();
    third.strings.insert(19, -1); // request.method = default word 0
    pb::ReportRequest {
        attributes: vec![first, second, third],
        repeated_attributes_semantics: semantics as i32,
        default_words: vec!["PATCH".into()],
        global_word_count: GLOBAL_WORD_COUNT as u32,
    }
}

#[tokio::test]
async fn delta_encoded_reports_build_each_record_on_the_previous_one() {
    let mut h = start().await;
    h.client
        .report(report_request(RepeatedAttributesSemantics::DeltaEncoding))
        .await
        .expect("report");
    assert_eq!(
        wait_recorded(&h.records, 3).await,
        [
            ("GET".to_string(), "amy".to_string(), 10),
            ("GET".to_string(), "amy".to_string(), 20),
            ("PATCH".to_string(), "amy".to_string(), 20),
        ]
    );
}

#[tokio::test]
async fn independent_reports_stand_alone() {
    let mut h = start().await;
    h.client
        .report(report_request(
            RepeatedAttributesSemantics::IndependentEncoding,
        ))
        .await
        .expect("report");
    assert_eq!(
        wait_recorded(&h.records, 3).await,
        [
            ("GET".to_string(), "amy".to_string(), 10),
            ("none".to_string(), "nobody".to_string(), 20),
            ("PATCH".to_string(), "nobody".to_string(), 0),
        ]
    );
}

#[tokio::test]
async fn a_bad_report_record_stops_the_report_after_the_good_ones() {
    let mut h = start().await;
    let mut request = report_request(RepeatedAttributesSemantics::IndependentEncoding);
    request.attributes[1].strings.insert(19, -9);
    let err = h.client.report(request).await.expect_err("bad record");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().starts_with("record 1: word index -9"),
        "{}",
        err.message()
    );
    assert_eq!(wait_recorded(&h.records, 1).await.len(), 1);

    let mut request = report_request(RepeatedAttributesSemantics::DeltaEncoding);
    request.repeated_attributes_semantics = 7;
    let err = h
        .client
        .report(request)
        .await
        .expect_err("unknown semantics");
    assert_eq!(err.code(), Code::InvalidArgument);

    let mut request = report_request(RepeatedAttributesSemantics::DeltaEncoding);
    request.global_word_count = 500;
    let err = h
        .client
        .report(request)
        .await
        .expect_err("newer dictionary");
    assert_eq!(err.code(), Code::Internal);

    h.client
        .report(pb::ReportRequest::default())
        .await
        .expect("an empty report is fine");
}
