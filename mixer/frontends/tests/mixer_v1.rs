//! The Mixer v1 front end over a real loopback socket, driven by the generated tonic client:
//! allowed and denied checks, referenced attributes, header operations, bad input, size
//! limits, both report encodings and quota allocation in Check.

mod common;

use common::{QuotaDown, RawCodec, Recorder};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, AdapterRegistry, BuildContext, CheckHandler, ErrorKind,
    Handler, ParamError, Params, QuotaArgs, QuotaHandler, Stability,
};
use mixer_config::{ConfigOptions, SourceFile};
use mixer_frontends::mixer_v1::{self, GLOBAL_WORD_COUNT, decode_into, dictionary, encode};
use mixer_model::{
    AttributeBag, CheckResult, Instance, QuotaResult, StringMap, Template, Value, Vocabulary,
};
use mixer_proto::istio::mixer::v1 as pb;
use mixer_runtime::{ConfigOrigin, Runtime, RuntimeMetrics, RuntimeOptions};
use pb::mixer_client::MixerClient;
use pb::referenced_attributes::Condition;
use pb::report_request::RepeatedAttributesSemantics;
use tonic::Code;
use tonic::transport::Channel;

const CONFIG: &str = r#"
kind: handler
metadata: {name: deny, namespace: istio-system}
spec:
  compiledAdapter: denier
  params: {status: {code: 7, message: "no bob"}, validDuration: 3s, validUseCount: 5}
---
kind: handler
metadata: {name: allow, namespace: istio-system}
spec: {compiledAdapter: noop}
---
kind: handler
metadata: {name: broken, namespace: istio-system}
spec: {compiledAdapter: broken}
---
kind: handler
metadata: {name: recorder, namespace: istio-system}
spec: {compiledAdapter: recorder}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: instance
metadata: {name: record, namespace: istio-system}
spec:
  compiledTemplate: logentry
  params:
    variables:
      method: request.method | "none"
      user: request.headers["x-user"] | "nobody"
      size: request.size | 0
---
kind: rule
metadata: {name: deny-bob, namespace: istio-system}
spec:
  match: request.headers["x-user"] == "bob"
  actions: [{handler: deny, instances: [nothing]}]
---
kind: rule
metadata: {name: crash, namespace: istio-system}
spec:
  match: request.headers["x-user"] == "crash"
  actions: [{handler: broken, instances: [nothing]}]
---
kind: rule
metadata: {name: tag-get, namespace: istio-system}
spec:
  match: request.method == "GET"
  actions: [{handler: allow, instances: [nothing]}]
  requestHeaderOperations:
  - name: x-seen-by
    values: ['"mixer"']
  - name: x-user
    values: ['request.headers["x-user"] | "nobody"']
    operation: APPEND
  responseHeaderOperations:
  - name: server
    operation: REMOVE
---
kind: rule
metadata: {name: record-all, namespace: istio-system}
spec:
  actions: [{handler: recorder, instances: [record]}]
"#;

// ---- test adapters -------------------------------------------------------------------------

/// Never decides.
struct Broken;

static BROKEN: AdapterInfo = AdapterInfo {
    name: "broken",
    description: "always fails",
    templates: &[Template::CheckNothing],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for Broken {
    fn info(&self) -> &AdapterInfo {
        &BROKEN
    }
    fn validate(&self, _: &Params) -> Result<(), Vec<ParamError>> {
        Ok(())
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(BrokenHandler))
    }
}

struct BrokenHandler;

impl Handler for BrokenHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }
}

#[async_trait]
impl CheckHandler for BrokenHandler {
    async fn check(&self, _: &Instance) -> Result<CheckResult, AdapterError> {
        Err(AdapterError::transient(
            ErrorKind::Unavailable,
            "backend down",
        ))
    }
}

// ---- harness -------------------------------------------------------------------------------

struct Harness {
    client: MixerClient<Channel>,
    addr: SocketAddr,
    records: Arc<Mutex<Vec<Instance>>>,
}

fn runtime(records: Arc<Mutex<Vec<Instance>>>) -> Runtime {
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_denier::Denier));
    registry.register(Arc::new(mixer_adapter_noop::Noop));
    registry.register(Arc::new(Broken));
    registry.register(Arc::new(Recorder::new(records)));
    Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile {
            name: "test.yaml".into(),
            text: CONFIG.into(),
        }]),
        registry,
        ConfigOptions::default(),
        RuntimeOptions::default(),
        RuntimeMetrics::unregistered(),
    )
}

async fn serve(runtime: Runtime) -> Harness {
    let runtime = Arc::new(runtime);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(mixer_v1::service(runtime))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    Harness {
        client: MixerClient::new(channel),
        addr,
        records: Arc::new(Mutex::new(Vec::new())),
    }
}

async fn start() -> Harness {
    let records = Arc::new(Mutex::new(Vec::new()));
    let rt = runtime(records.clone());
    rt.reload().expect("test config loads");
    let mut h = serve(rt).await;
    h.records = records;
    h
}

fn headers(pairs: &[(&str, &str)]) -> Value {
    StringMap::from_pairs(pairs.iter().copied()).into()
}

fn check_request(attrs: &[(&str, Value)], global_word_count: usize) -> pb::CheckRequest {
    pb::CheckRequest {
        attributes: Some(encode(
            attrs.iter().map(|(n, v)| (*n, v)),
            global_word_count,
        )),
        global_word_count: global_word_count as u32,
        deduplication_id: "dedup-1".into(),
        quotas: Default::default(),
    }
}

/// (name, condition, map key) of each referenced attribute, decoded, sorted.
fn decoded_refs(r: &pb::ReferencedAttributes) -> Vec<(String, Condition, Option<String>)> {
    let mut out: Vec<_> = r
        .attribute_matches
        .iter()
        .map(|m| {
            let name = dictionary::lookup(m.name, &r.words).expect("name decodes");
            let key = (m.map_key != 0)
                .then(|| dictionary::lookup(m.map_key, &r.words).expect("key decodes"));
            (
                name.to_string(),
                Condition::try_from(m.condition).expect("known condition"),
                key.map(str::to_string),
            )
        })
        .collect();
    out.sort();
    out
}

fn exact(name: &str, key: Option<&str>) -> (String, Condition, Option<String>) {
    (name.to_string(), Condition::Exact, key.map(str::to_string))
}

fn absent(name: &str, key: Option<&str>) -> (String, Condition, Option<String>) {
    (
        name.to_string(),
        Condition::Absence,
        key.map(str::to_string),
    )
}

fn header_ops(
    ops: &[pb::HeaderOperation],
) -> Vec<(String, String, pb::header_operation::Operation)> {
    ops.iter()
        .map(|o| {
            (
                o.name.clone(),
                o.value.clone(),
                pb::header_operation::Operation::try_from(o.operation).expect("known op"),
            )
        })
        .collect()
}

// ---- checks --------------------------------------------------------------------------------

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
    assert_eq!(
        p.valid_duration,
        Some(prost_types::Duration {
            seconds: 60,
            nanos: 0
        })
    );
    assert_eq!(p.valid_use_count, 10_000);
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
    assert_eq!(status.message, "no bob");
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
            "inconsistent global dictionary versions used: mixer knows 221 words, caller knows 222"
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
    assert_eq!(err.message(), "no valid config");
    let err = h
        .client
        .report(pb::ReportRequest::default())
        .await
        .expect_err("not ready");
    assert_eq!(err.code(), Code::Unavailable);
}

// ---- bad input -----------------------------------------------------------------------------

async fn expect_invalid(h: &mut Harness, attributes: pb::CompressedAttributes, needle: &str) {
    let err = h
        .client
        .check(pb::CheckRequest {
            attributes: Some(attributes),
            global_word_count: GLOBAL_WORD_COUNT as u32,
            ..Default::default()
        })
        .await
        .expect_err("invalid");
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    assert!(
        err.message().contains(needle),
        "{:?} lacks {needle:?}",
        err.message()
    );
}

#[tokio::test]
async fn bad_indices_and_values_are_invalid_argument() {
    let mut h = start().await;
    let mut a = pb::CompressedAttributes::default();
    a.strings.insert(5000, 19);
    expect_invalid(&mut h, a, "word index 5000").await;

    let mut a = pb::CompressedAttributes {
        words: vec!["x".into()],
        ..Default::default()
    };
    a.strings.insert(19, -2);
    expect_invalid(&mut h, a, "word index -2 (value of request.method)").await;

    let mut a = pb::CompressedAttributes::default();
    a.string_maps.insert(
        15,
        pb::StringMap {
            entries: [(-7, 90)].into_iter().collect(),
        },
    );
    expect_invalid(&mut h, a, "word index -7 (key in request.headers)").await;

    let mut a = pb::CompressedAttributes::default();
    a.strings.insert(23, 90); // request.size = "GET"
    expect_invalid(&mut h, a, "request.size").await;

    let mut a = pb::CompressedAttributes::default();
    a.bytes.insert(0, vec![1, 2, 3]); // source.ip with 3 octets
    expect_invalid(&mut h, a, "source.ip").await;

    let mut a = pb::CompressedAttributes {
        words: vec!["request.method".into()],
        ..Default::default()
    };
    a.strings.insert(19, 90);
    a.int64s.insert(-1, 3); // request.method again, through the message dictionary
    expect_invalid(&mut h, a, "\"request.method\" is given twice").await;

    let mut a = pb::CompressedAttributes::default();
    a.timestamps.insert(
        24,
        prost_types::Timestamp {
            seconds: i64::MAX,
            nanos: 0,
        },
    );
    expect_invalid(&mut h, a, "request.time").await;

    // The server is still fine.
    let ok = h
        .client
        .check(check_request(
            &[("request.method", Value::from("GET"))],
            GLOBAL_WORD_COUNT,
        ))
        .await
        .expect("still serving");
    assert_eq!(
        ok.into_inner()
            .precondition
            .expect("p")
            .status
            .expect("s")
            .code,
        0
    );
}

#[tokio::test]
async fn malformed_protobuf_is_refused_and_the_server_keeps_serving() {
    let mut h = start().await;
    let channel = Channel::from_shared(format!("http://{}", h.addr))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    for garbage in [
        vec![0xff; 64],                     // invalid tag and varint
        vec![0x0a, 0x80, 0x80, 0x80, 0x10], // field 1 with a length far past the end
        b"not a protobuf message at all".to_vec(),
    ] {
        grpc.ready().await.expect("ready");
        let err = grpc
            .unary::<Vec<u8>, Vec<u8>, _>(
                tonic::Request::new(garbage),
                tonic::codegen::http::uri::PathAndQuery::from_static("/istio.mixer.v1.Mixer/Check"),
                RawCodec,
            )
            .await
            .expect_err("garbage is refused");
        assert_ne!(err.code(), Code::Ok);
    }
    let ok = h
        .client
        .check(check_request(
            &[("request.method", Value::from("GET"))],
            GLOBAL_WORD_COUNT,
        ))
        .await
        .expect("still serving");
    assert_eq!(
        ok.into_inner()
            .precondition
            .expect("p")
            .status
            .expect("s")
            .code,
        0
    );
}

#[tokio::test]
async fn a_string_map_with_ten_thousand_entries_is_handled() {
    let mut h = start().await;
    let mut pairs: Vec<(String, String)> = (0..10_000)
        .map(|i| (format!("x-header-{i}"), format!("value-{i}")))
        .collect();
    pairs.push(("x-user".into(), "bob".into()));
    let map = StringMap::from_pairs(pairs);
    let p = h
        .client
        .check(check_request(
            &[("request.headers", Value::from(map))],
            GLOBAL_WORD_COUNT,
        ))
        .await
        .expect("check")
        .into_inner()
        .precondition
        .expect("precondition");
    let status = p.status.expect("status");
    assert_eq!(
        status.code,
        Code::PermissionDenied as i32,
        "bob is found among them"
    );
    // Only the key the rules read is referenced, not the other 10,000.
    assert_eq!(
        decoded_refs(&p.referenced_attributes.expect("refs")),
        vec![
            exact("request.headers", Some("x-user")),
            absent("request.method", None),
        ]
    );
}

#[tokio::test]
async fn a_ten_megabyte_attribute_is_over_the_limit_and_the_server_keeps_serving() {
    let mut h = start().await;
    let mut a = pb::CompressedAttributes {
        words: vec!["big.blob".into()],
        ..Default::default()
    };
    a.bytes.insert(-1, vec![7u8; 10 * 1024 * 1024]);
    let err = h
        .client
        .check(pb::CheckRequest {
            attributes: Some(a),
            global_word_count: GLOBAL_WORD_COUNT as u32,
            ..Default::default()
        })
        .await
        .expect_err("over tonic's 4 MiB limit");
    // tonic says OUT_OF_RANGE where grpc-go (Istio's server) said RESOURCE_EXHAUSTED; the
    // proxy treats both as a failed call.
    assert_eq!(err.code(), Code::OutOfRange, "{}", err.message());
    assert!(err.message().contains("too large"), "{}", err.message());
    let ok = h
        .client
        .check(check_request(
            &[("request.method", Value::from("GET"))],
            GLOBAL_WORD_COUNT,
        ))
        .await
        .expect("still serving");
    assert_eq!(
        ok.into_inner()
            .precondition
            .expect("p")
            .status
            .expect("s")
            .code,
        0
    );
}

// ---- reports -------------------------------------------------------------------------------

/// The recorded (method, user, size) of each report instance.
fn recorded(records: &Mutex<Vec<Instance>>) -> Vec<(String, String, i64)> {
    records
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|i| {
            let vars = i.map("variables").expect("variables");
            let get = |k: &str| {
                vars.iter()
                    .find(|(n, _)| n.as_ref() == k)
                    .map(|(_, v)| v.clone())
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

// ---- decoding without the network ----------------------------------------------------------

#[test]
fn values_of_every_type_round_trip_through_the_encoding() {
    let vocabulary = Arc::new(Vocabulary::istio());
    let values: Vec<(&str, Value)> = vec![
        ("request.method", Value::from("GET")),
        (
            "request.path",
            Value::from("/a path that is not a global word"),
        ),
        ("request.size", Value::Int64(-5)),
        ("x.double", Value::Double(2.5)),
        ("x.bool", Value::Bool(true)),
        (
            "request.time",
            Value::Timestamp(mixer_model::Timestamp(1_483_228_800_000_000_123)),
        ),
        (
            "response.duration",
            Value::Duration(mixer_model::Duration(-1_500_000_000)),
        ),
        ("x.bytes", Value::Bytes(vec![0, 1, 2].into())),
        (
            "source.ip",
            Value::IpAddress("10.1.2.3".parse().expect("ip")),
        ),
        (
            "destination.ip",
            Value::IpAddress("2001:db8::1".parse().expect("ip")),
        ),
        (
            "request.headers",
            headers(&[("x-user", "amy"), (":method", "GET")]),
        ),
    ];
    for count in [0, 16, GLOBAL_WORD_COUNT] {
        let wire = encode(values.iter().map(|(n, v)| (*n, v)), count);
        let mut bag = AttributeBag::new(vocabulary.clone());
        decode_into(&wire, &wire.words, &mut bag).expect("decodes");
        for (name, value) in &values {
            assert_eq!(
                bag.get_by_name(name),
                Some(value),
                "{name} with count {count}"
            );
        }
        assert_eq!(bag.len(), values.len());
    }
}

mod properties {
    use super::*;
    use proptest::collection::{btree_map, vec};
    use proptest::prelude::*;

    fn index() -> impl Strategy<Value = i32> {
        prop_oneof![-8i32..230, any::<i32>()]
    }

    fn compressed() -> impl Strategy<Value = pb::CompressedAttributes> {
        (
            vec(".{0,8}", 0..6),
            btree_map(index(), index(), 0..6),
            btree_map(index(), any::<i64>(), 0..4),
            btree_map(index(), any::<f64>(), 0..3),
            btree_map(index(), any::<bool>(), 0..3),
            btree_map(index(), (any::<i64>(), any::<i32>()), 0..3),
            btree_map(index(), (any::<i64>(), any::<i32>()), 0..3),
            btree_map(index(), vec(any::<u8>(), 0..20), 0..3),
            btree_map(index(), btree_map(index(), index(), 0..5), 0..3),
        )
            .prop_map(
                |(words, strings, int64s, doubles, bools, ts, ds, bytes, maps)| {
                    pb::CompressedAttributes {
                        words,
                        strings,
                        int64s,
                        doubles,
                        bools,
                        timestamps: ts
                            .into_iter()
                            .map(|(k, (seconds, nanos))| {
                                (k, prost_types::Timestamp { seconds, nanos })
                            })
                            .collect(),
                        durations: ds
                            .into_iter()
                            .map(|(k, (seconds, nanos))| {
                                (k, prost_types::Duration { seconds, nanos })
                            })
                            .collect(),
                        bytes,
                        string_maps: maps
                            .into_iter()
                            .map(|(k, entries)| (k, pb::StringMap { entries }))
                            .collect(),
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_attributes_never_panics(a in compressed()) {
            let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
            let _ = decode_into(&a, &a.words, &mut bag);
            // Decoding on top of what a previous record left (delta encoding) is fine too.
            let _ = decode_into(&a, &[], &mut bag);
        }

        #[test]
        fn strings_round_trip(pairs in vec(("[a-z.]{1,12}", ".{0,12}"), 0..12), count in 0usize..=GLOBAL_WORD_COUNT) {
            let mut pairs = pairs;
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            pairs.dedup_by(|a, b| a.0 == b.0);
            // Only undeclared names: declared ones would be converted to their type.
            let vocabulary = Arc::new(Vocabulary::istio());
            pairs.retain(|(n, _)| vocabulary.lookup(n).is_none());
            let values: Vec<(String, Value)> = pairs.into_iter().map(|(n, v)| (n, Value::from(v))).collect();
            let wire = encode(values.iter().map(|(n, v)| (n.as_str(), v)), count);
            let mut bag = AttributeBag::new(vocabulary);
            decode_into(&wire, &wire.words, &mut bag).expect("decodes");
            for (n, v) in &values {
                prop_assert_eq!(bag.get_by_name(n), Some(v));
            }
        }
    }
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

// ---- quota ---------------------------------------------------------------------------------

const QUOTA_CONFIG: &str = r#"
kind: handler
metadata: {name: deny, namespace: istio-system}
spec:
  compiledAdapter: denier
  params: {status: {code: 7, message: "no bob"}}
---
kind: handler
metadata: {name: counter, namespace: istio-system}
spec: {compiledAdapter: quotarecorder}
---
kind: handler
metadata: {name: exhausted, namespace: istio-system}
spec:
  compiledAdapter: denier
  params: {status: {code: RESOURCE_EXHAUSTED, message: "no more"}, validDuration: 7s}
---
kind: handler
metadata: {name: storage, namespace: istio-system}
spec: {compiledAdapter: quotabroken, failPolicy: CLOSED}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: instance
metadata: {name: requestcount, namespace: istio-system}
spec:
  compiledTemplate: quota
  params:
    dimensions: {user: 'request.headers["x-user"] | "nobody"'}
---
kind: instance
metadata: {name: blocked, namespace: istio-system}
spec: {compiledTemplate: quota}
---
kind: instance
metadata: {name: fragile, namespace: istio-system}
spec: {compiledTemplate: quota}
---
kind: rule
metadata: {name: deny-bob, namespace: istio-system}
spec:
  match: request.headers["x-user"] == "bob"
  actions: [{handler: deny, instances: [nothing]}]
---
kind: rule
metadata: {name: count, namespace: istio-system}
spec:
  actions: [{handler: counter, instances: [requestcount]}]
---
kind: rule
metadata: {name: block-admin, namespace: istio-system}
spec:
  match: request.path == "/admin"
  actions: [{handler: exhausted, instances: [blocked]}]
---
kind: rule
metadata: {name: fragile, namespace: istio-system}
spec:
  match: request.path == "/fragile"
  actions: [{handler: storage, instances: [fragile]}]
"#;

/// (instance, amount, best effort, deduplication id) of each allocation.
type Allocations = Arc<Mutex<Vec<(String, i64, bool, String)>>>;

/// Grants everything asked, for 10s, and records the calls.
struct QuotaRecorder(Allocations);

static QUOTA_RECORDER: AdapterInfo = AdapterInfo {
    name: "quotarecorder",
    description: "grants and records quota",
    templates: &[Template::Quota],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for QuotaRecorder {
    fn info(&self) -> &AdapterInfo {
        &QUOTA_RECORDER
    }
    fn validate(&self, _: &Params) -> Result<(), Vec<ParamError>> {
        Ok(())
    }
    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(QuotaRecorderHandler(self.0.clone())))
    }
}

struct QuotaRecorderHandler(Allocations);

impl Handler for QuotaRecorderHandler {
    fn as_quota(&self) -> Option<&dyn QuotaHandler> {
        Some(self)
    }
}

#[async_trait]
impl QuotaHandler for QuotaRecorderHandler {
    async fn allocate(
        &self,
        instance: &Instance,
        args: &QuotaArgs,
    ) -> Result<QuotaResult, AdapterError> {
        self.0.lock().expect("not poisoned").push((
            instance.name.to_string(),
            args.amount,
            args.best_effort,
            args.deduplication_id.clone(),
        ));
        Ok(QuotaResult {
            status: mixer_model::Status::OK,
            valid_duration: Duration::from_secs(10),
            granted_amount: args.amount,
            limit: None,
        })
    }
}

async fn start_quota() -> (Harness, Allocations) {
    let allocations: Allocations = Arc::default();
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_denier::Denier));
    registry.register(Arc::new(QuotaRecorder(allocations.clone())));
    registry.register(Arc::new(QuotaDown::new("quotabroken", "quota store down")));
    let rt = Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile::new("quota.yaml", QUOTA_CONFIG)]),
        registry,
        ConfigOptions::default(),
        RuntimeOptions::default(),
        RuntimeMetrics::unregistered(),
    );
    rt.reload().expect("quota config loads");
    (serve(rt).await, allocations)
}

fn with_quotas(mut request: pb::CheckRequest, quotas: &[(&str, i64, bool)]) -> pb::CheckRequest {
    for (name, amount, best_effort) in quotas {
        request.quotas.insert(
            name.to_string(),
            pb::check_request::QuotaParams {
                amount: *amount,
                best_effort: *best_effort,
            },
        );
    }
    request
}

#[tokio::test]
async fn quotas_are_allocated_after_an_allowed_check() {
    let (mut h, allocations) = start_quota().await;
    let request = with_quotas(
        check_request(
            &[
                ("request.path", Value::from("/shop")),
                ("request.headers", headers(&[("x-user", "amy")])),
            ],
            GLOBAL_WORD_COUNT,
        ),
        &[
            ("requestcount", 3, false),
            ("requestcount.quota.istio-system", 1, true),
            ("unconfigured", 5, false),
        ],
    );
    let response = h.client.check(request).await.expect("check").into_inner();
    let p = response.precondition.expect("precondition");
    assert_eq!(p.status.expect("status").code, 0);
    assert_eq!(response.quotas.len(), 3);

    let q = &response.quotas["requestcount"];
    assert_eq!(q.granted_amount, 3);
    assert_eq!(q.status.as_ref().map(|s| s.code), Some(0));
    assert_eq!(
        q.valid_duration,
        Some(prost_types::Duration {
            seconds: 10,
            nanos: 0
        })
    );
    // What the quota rules read, encoded as for the precondition: the matches of the quota
    // rules' candidates and the instance's dimension.
    assert_eq!(
        decoded_refs(q.referenced_attributes.as_ref().expect("refs")),
        [
            exact("request.headers", Some("x-user")),
            exact("request.path", None),
        ]
    );
    assert_eq!(
        response.quotas["requestcount.quota.istio-system"].granted_amount,
        1
    );

    // A quota no rule produces is granted in full for the default validity.
    let q = &response.quotas["unconfigured"];
    assert_eq!(q.granted_amount, 5);
    assert_eq!(q.valid_duration.map(|d| d.seconds), Some(60));

    // Istio's deduplication ids: the request's, followed by the quota's name.
    let calls = allocations.lock().expect("not poisoned").clone();
    assert_eq!(
        calls,
        [
            (
                "requestcount.istio-system".to_string(),
                3,
                false,
                "dedup-1requestcount".to_string()
            ),
            (
                "requestcount.istio-system".to_string(),
                1,
                true,
                "dedup-1requestcount.quota.istio-system".to_string()
            ),
        ]
    );
}

#[tokio::test]
async fn a_denied_precondition_allocates_no_quota() {
    let (mut h, allocations) = start_quota().await;
    let request = with_quotas(
        check_request(
            &[("request.headers", headers(&[("x-user", "bob")]))],
            GLOBAL_WORD_COUNT,
        ),
        &[("requestcount", 1, false)],
    );
    let response = h.client.check(request).await.expect("check").into_inner();
    let p = response.precondition.expect("precondition");
    assert_eq!(p.status.expect("status").code, 7);
    assert!(response.quotas.is_empty());
    assert!(allocations.lock().expect("not poisoned").is_empty());
}

#[tokio::test]
async fn a_refused_quota_answers_resource_exhausted() {
    let (mut h, _) = start_quota().await;
    let request = with_quotas(
        check_request(
            &[("request.path", Value::from("/admin"))],
            GLOBAL_WORD_COUNT,
        ),
        &[("blocked", 2, false), ("requestcount", 1, false)],
    );
    let response = h.client.check(request).await.expect("check").into_inner();
    assert_eq!(
        response.precondition.and_then(|p| p.status).map(|s| s.code),
        Some(0)
    );
    let q = &response.quotas["blocked"];
    assert_eq!(q.granted_amount, 0);
    let status = q.status.as_ref().expect("status");
    assert_eq!(status.code, mixer_model::Code::ResourceExhausted as i32);
    assert_eq!(status.message, "no more");
    assert_eq!(q.valid_duration.map(|d| d.seconds), Some(7));
    // The other quota is unaffected.
    assert_eq!(response.quotas["requestcount"].granted_amount, 1);
}

#[tokio::test]
async fn a_quota_handler_that_cannot_decide_makes_the_check_unavailable() {
    let (mut h, _) = start_quota().await;
    let request = with_quotas(
        check_request(
            &[("request.path", Value::from("/fragile"))],
            GLOBAL_WORD_COUNT,
        ),
        &[("fragile", 1, false)],
    );
    let err = h.client.check(request).await.expect_err("could not decide");
    assert_eq!(err.code(), Code::Unavailable);
    assert!(
        err.message().contains("quota store down"),
        "{}",
        err.message()
    );
}
