//! Clients of each Istio dictionary version, their requests compressed with istio/api's own
//! word lists (checked-in copies of `mixer/v1/global_dictionary.yaml`: release-1.2's 221 words,
//! release-1.4's 222), not with our table: both work on Check and Report, and a client that
//! claims more words than we know gets Istio's error.

use std::sync::{Arc, Mutex};

use mixer_proto::istio::mixer::v1 as pb;
use tonic::Code;

use super::{common, runtime_with, serve};

const RELEASE_1_2: &str =
    include_str!("../../../../proto/testdata/global_dictionary-release-1.2.yaml");
const RELEASE_1_4: &str = include_str!("../../../../proto/istio/mixer/v1/global_dictionary.yaml");

const CONFIG: &str = r#"
kind: handler
metadata: {name: deny, namespace: istio-system}
spec:
  compiledAdapter: denier
  params: {status: {code: 7, message: "proxy too old"}}
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
      version: context.proxy_version | "unknown"
---
kind: rule
metadata: {name: deny-old-proxies, namespace: istio-system}
spec:
  match: (context.proxy_version | "") == "1.3.0"
  actions: [{handler: deny, instances: [nothing]}]
---
kind: rule
metadata: {name: record-all, namespace: istio-system}
spec:
  actions: [{handler: recorder, instances: [record]}]
"#;

/// A client that knows `words` (a dictionary file's `- word` lines, verbatim, as Istio's
/// generators read them) and compresses as the proxy does: a known word by its index, any
/// other in the message's own list at `-(i + 1)`.
struct Client {
    words: Vec<String>,
}

impl Client {
    fn of(file: &str) -> Client {
        Client {
            words: file
                .lines()
                .filter_map(|l| l.strip_prefix("- "))
                .map(|w| w.trim_end().to_string())
                .collect(),
        }
    }

    fn index(&self, message: &mut Vec<String>, word: &str) -> i32 {
        if let Some(i) = self.words.iter().position(|w| w == word) {
            return i as i32;
        }
        if let Some(i) = message.iter().position(|w| w == word) {
            return -(i as i32) - 1;
        }
        message.push(word.to_string());
        -(message.len() as i32)
    }

    /// String attributes, compressed.
    fn attributes(&self, strings: &[(&str, &str)]) -> pb::CompressedAttributes {
        let mut out = pb::CompressedAttributes::default();
        let mut words = Vec::new();
        for (name, value) in strings {
            let name = self.index(&mut words, name);
            let value = self.index(&mut words, value);
            out.strings.insert(name, value);
        }
        out.words = words;
        out
    }

    fn check(&self, strings: &[(&str, &str)]) -> pb::CheckRequest {
        pb::CheckRequest {
            attributes: Some(self.attributes(strings)),
            global_word_count: self.words.len() as u32,
            deduplication_id: "dedup".into(),
            quotas: Default::default(),
        }
    }

    fn report(&self, strings: &[(&str, &str)]) -> pb::ReportRequest {
        pb::ReportRequest {
            attributes: vec![self.attributes(strings)],
            global_word_count: self.words.len() as u32,
            ..Default::default()
        }
    }

    /// A word of an answer, read with this client's dictionary.
    fn word<'a>(&'a self, index: i32, message: &'a [String]) -> &'a str {
        if index >= 0 {
            &self.words[index as usize]
        } else {
            &message[(-index - 1) as usize]
        }
    }
}

#[tokio::test]
async fn istio_1_2_and_1_4_clients_check_and_report() {
    let old = Client::of(RELEASE_1_2);
    let new = Client::of(RELEASE_1_4);
    assert_eq!((old.words.len(), new.words.len()), (221, 222));
    // `context.proxy_version` is a global word to a 1.4 client only.
    assert_eq!(new.words[221], "context.proxy_version");
    assert!(!old.words.iter().any(|w| w == "context.proxy_version"));

    let records = Arc::new(Mutex::new(Vec::new()));
    let runtime = runtime_with(CONFIG, records.clone());
    runtime.reload().expect("config loads");
    let mut h = serve(runtime).await;

    // A 1.2 proxy sends no proxy version.
    let answer = h
        .client
        .check(old.check(&[("request.method", "GET")]))
        .await
        .expect("a 1.2 client's check")
        .into_inner();
    let precondition = answer.precondition.expect("precondition");
    assert_eq!(precondition.status.expect("status").code, 0);
    // What the decision read is said with words the client knows: the proxy version, absent,
    // is not global word 221 to a 1.2 client but a word of the answer's own.
    let refs = precondition.referenced_attributes.expect("referenced");
    let read: Vec<&str> = refs
        .attribute_matches
        .iter()
        .map(|m| {
            assert!(m.name < 221, "{} is beyond a 1.2 client's words", m.name);
            old.word(m.name, &refs.words)
        })
        .collect();
    assert!(read.contains(&"context.proxy_version"), "{read:?}");

    // A 1.4 proxy names its version with global word 221.
    let request = new.check(&[
        ("request.method", "GET"),
        ("context.proxy_version", "1.4.6"),
    ]);
    let attributes = request.attributes.as_ref().expect("attributes");
    assert!(attributes.strings.contains_key(&221));
    let answer = h
        .client
        .check(request)
        .await
        .expect("a 1.4 client's check")
        .into_inner();
    let status = answer
        .precondition
        .expect("precondition")
        .status
        .expect("status");
    assert_eq!(status.code, 0, "{}", status.message);
    let answer = h
        .client
        .check(new.check(&[("context.proxy_version", "1.3.0")]))
        .await
        .expect("a 1.4 client's check")
        .into_inner();
    let status = answer
        .precondition
        .expect("precondition")
        .status
        .expect("status");
    assert_eq!(status.code, Code::PermissionDenied as i32);
    assert!(
        status.message.contains("proxy too old"),
        "{}",
        status.message
    );

    h.client
        .report(old.report(&[("request.method", "POST")]))
        .await
        .expect("a 1.2 client's report");
    h.client
        .report(new.report(&[
            ("request.method", "GET"),
            ("context.proxy_version", "1.4.6"),
        ]))
        .await
        .expect("a 1.4 client's report");
    let recorded = common::wait_recorded(&records, 2).await;
    let seen: Vec<(&str, &str)> = recorded
        .iter()
        .map(|vars| {
            (
                common::var(vars, "method").expect("method"),
                common::var(vars, "version").expect("version"),
            )
        })
        .collect();
    assert_eq!(seen, [("POST", "unknown"), ("GET", "1.4.6")]);
}

#[tokio::test]
async fn a_client_with_more_words_than_ours_gets_istios_error() {
    let mut newer = Client::of(RELEASE_1_4);
    newer.words.push("a.word.from.the.future".into());
    let records = Arc::new(Mutex::new(Vec::new()));
    let runtime = runtime_with(CONFIG, records.clone());
    runtime.reload().expect("config loads");
    let mut h = serve(runtime).await;
    // The message of istio/istio release-1.4 mixer/pkg/api/grpcServer.go, with code Internal,
    // on Check and on Report alike.
    let expected =
        "inconsistent global dictionary versions used: mixer knows 222 words, caller knows 223";
    let err = h
        .client
        .check(newer.check(&[("request.method", "GET")]))
        .await
        .expect_err("refused");
    assert_eq!((err.code(), err.message()), (Code::Internal, expected));
    let err = h
        .client
        .report(newer.report(&[("request.method", "GET")]))
        .await
        .expect_err("refused");
    assert_eq!((err.code(), err.message()), (Code::Internal, expected));
    assert!(records.lock().expect("not poisoned").is_empty());
}
