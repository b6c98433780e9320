//! The handler through its traits: lookup, reload (revocation, a bad file), the denials.

use std::path::Path;
use std::sync::Arc;

use mixer_adapter_api::host::AnyAdapter;
use mixer_adapter_api::{BuildContext, Generated, Handler};
use mixer_model::{Code, FieldValue, HeaderOp, Instance, Template, Value};
use serde_json::json;

use crate::{ApiKey, ApiKeyConfig, ApiKeyHandler, ApiKeyParams, MAX_KEY_BYTES, Reload};

const KEYS: &str = "keys:\n\
    - name: alice\n  key: fake-gold-key\n  labels: {tier: gold}\n\
    - name: bob\n  key: fake-free-key\n  labels: {tier: free}\n";

fn compile(params: serde_json::Value) -> ApiKeyConfig {
    let params: ApiKeyParams = serde_json::from_value(params).expect("decodes");
    params.compile().expect("compiles")
}

fn compile_errors(params: serde_json::Value) -> Vec<String> {
    let params: ApiKeyParams = serde_json::from_value(params).expect("decodes");
    let errors = params.compile().expect_err("refused");
    errors.iter().map(ToString::to_string).collect()
}

fn handler_for(file: &Path, extra: serde_json::Value) -> Arc<ApiKeyHandler> {
    let mut params = json!({"file": file});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    ApiKeyHandler::start(compile(params), "keys.apikey.default".into())
}

fn instance(key: Option<&str>) -> Instance {
    Instance {
        name: "apikey.instance.default".into(),
        template: Template::ApiKey,
        fields: key
            .map(|k| vec![("key", FieldValue::Value(Value::from(k)))])
            .unwrap_or_default(),
    }
}

async fn generate(handler: &ApiKeyHandler, key: Option<&str>) -> Generated {
    let generator = handler.as_attributes().expect("an attribute generator");
    generator.generate(&instance(key)).await.expect("answers")
}

fn principal(generated: &Generated) -> Option<&Value> {
    generated
        .outputs
        .iter()
        .find(|(name, _)| *name == "principal")
        .map(|(_, v)| v)
}

fn tier(generated: &Generated) -> Option<String> {
    generated.outputs.iter().find_map(|(name, v)| match v {
        Value::StringMap(m) if *name == "claims" => m.get("tier").map(str::to_owned),
        _ => None,
    })
}

fn denial_reason(generated: &Generated) -> Option<(Code, &str)> {
    generated
        .denial
        .as_ref()
        .map(|d| (d.status.code, d.status.message.as_str()))
}

#[tokio::test]
async fn a_known_key_names_its_holder_and_labels_and_others_are_denied() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("keys.yaml");
    std::fs::write(&file, KEYS).expect("write");
    let handler = handler_for(&file, json!({}));

    let gold = generate(&handler, Some("fake-gold-key")).await;
    assert_eq!(principal(&gold), Some(&Value::from("alice")));
    assert_eq!(tier(&gold).as_deref(), Some("gold"));
    assert!(gold.denial.is_none());
    let valid = gold.valid_duration.expect("bounded by the next reload");
    assert!(valid <= crate::DEFAULT_RELOAD_INTERVAL, "{valid:?}");

    let unknown = generate(&handler, Some("fake-nobody")).await;
    assert_eq!(
        denial_reason(&unknown),
        Some((Code::Unauthenticated, "unknown API key"))
    );
    assert!(unknown.outputs.is_empty());
    assert!(
        unknown
            .denial
            .as_ref()
            .expect("denied")
            .response_headers
            .is_empty(),
        "no challenge unless configured"
    );
    assert!(!format!("{unknown:?}").contains("fake-nobody"));

    // No key: not a bad credential; the rules decide on the bindings' defaults.
    assert_eq!(generate(&handler, None).await, Generated::default());
    assert_eq!(generate(&handler, Some("")).await, Generated::default());
}

#[tokio::test]
async fn an_oversized_key_is_denied_without_a_lookup() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("keys.yaml");
    std::fs::write(&file, KEYS).expect("write");
    let handler = handler_for(&file, json!({}));
    let huge = "k".repeat(MAX_KEY_BYTES + 1);
    let answer = generate(&handler, Some(&huge)).await;
    assert_eq!(
        denial_reason(&answer),
        Some((Code::Unauthenticated, "API key longer than 4096 bytes"))
    );
    let largest = "k".repeat(MAX_KEY_BYTES);
    let answer = generate(&handler, Some(&largest)).await;
    assert_eq!(
        denial_reason(&answer),
        Some((Code::Unauthenticated, "unknown API key"))
    );
}

#[tokio::test]
async fn require_key_denies_a_request_without_one_and_a_challenge_is_sent() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("keys.yaml");
    std::fs::write(&file, KEYS).expect("write");
    let handler = handler_for(
        &file,
        json!({"requireKey": true, "challenge": "APIKey realm=\"api\""}),
    );
    let answer = generate(&handler, None).await;
    assert_eq!(
        denial_reason(&answer),
        Some((Code::Unauthenticated, "no API key in the request"))
    );
    let header = &answer.denial.as_ref().expect("denied").response_headers[0];
    assert_eq!(
        (header.name.as_str(), header.value.as_str(), header.op),
        (
            "www-authenticate",
            "APIKey realm=\"api\"",
            HeaderOp::Replace
        )
    );
}

#[tokio::test]
async fn a_key_removed_from_the_file_is_refused_after_the_reload() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("keys.yaml");
    std::fs::write(&file, KEYS).expect("write");
    let handler = handler_for(&file, json!({}));
    assert_eq!(handler.reload().await, Reload::Unchanged);
    assert!(
        generate(&handler, Some("fake-free-key"))
            .await
            .denial
            .is_none()
    );

    std::fs::write(
        &file,
        "keys:\n- name: alice\n  key: fake-gold-key\n  labels: {tier: gold}\n",
    )
    .expect("rewrite");
    assert_eq!(handler.reload().await, Reload::Installed { keys: 1 });
    let revoked = generate(&handler, Some("fake-free-key")).await;
    assert_eq!(
        denial_reason(&revoked),
        Some((Code::Unauthenticated, "unknown API key"))
    );
    assert!(
        generate(&handler, Some("fake-gold-key"))
            .await
            .denial
            .is_none()
    );
    assert_eq!(handler.reload_counts(), (1, 0));
}

#[tokio::test]
async fn a_file_that_does_not_parse_keeps_the_keys_in_use() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("keys.yaml");
    std::fs::write(&file, KEYS).expect("write");
    let handler = handler_for(&file, json!({}));

    std::fs::write(&file, "keys:\n- name: alice\n  keySha256: nothex\n").expect("break");
    let Reload::Kept(why) = handler.reload().await else {
        panic!("a bad file is not installed")
    };
    assert!(
        why.ends_with("keys.yaml: keys[0].keySha256: must be 64 hex digits (a SHA-256 digest)"),
        "{why}"
    );
    assert_eq!(handler.key_count(), 2);
    assert!(
        generate(&handler, Some("fake-free-key"))
            .await
            .denial
            .is_none()
    );

    // A half-written (truncated) file and a removed one: the same.
    std::fs::write(&file, "").expect("truncate");
    assert!(matches!(handler.reload().await, Reload::Kept(_)));
    std::fs::remove_file(&file).expect("remove");
    assert!(matches!(handler.reload().await, Reload::Kept(_)));
    assert_eq!(handler.key_count(), 2);
    assert_eq!(handler.reload_counts(), (0, 3));

    // Fixed: read again.
    std::fs::write(&file, "keys: []\n").expect("fix");
    assert_eq!(handler.reload().await, Reload::Installed { keys: 0 });
    assert!(
        generate(&handler, Some("fake-gold-key"))
            .await
            .denial
            .is_some()
    );
}

/// A Secret volume updated by the kubelet: a new timestamped folder, `..data` renamed over.
#[tokio::test]
async fn a_secret_volume_swap_revokes_a_key() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    let v1 = root.join("..2026_12_05_04_00_00.1");
    std::fs::create_dir(&v1).expect("mkdir");
    std::fs::write(v1.join("keys.yaml"), KEYS).expect("write");
    symlink("..2026_12_05_04_00_00.1", root.join("..data")).expect("link");
    symlink("..data/keys.yaml", root.join("keys.yaml")).expect("link");
    let handler = ApiKeyHandler::start(
        compile(json!({"directory": root})),
        "keys.apikey.default".into(),
    );
    assert_eq!(handler.key_count(), 2);

    let v2 = root.join("..2026_12_05_04_01_00.2");
    std::fs::create_dir(&v2).expect("mkdir");
    std::fs::write(
        v2.join("keys.yaml"),
        "keys: [{name: alice, key: fake-gold-key}]",
    )
    .expect("write");
    symlink("..2026_12_05_04_01_00.2", root.join("..data_tmp")).expect("link");
    std::fs::rename(root.join("..data_tmp"), root.join("..data")).expect("swap");
    std::fs::remove_dir_all(&v1).expect("old folder removed");
    assert_eq!(handler.reload().await, Reload::Installed { keys: 1 });
    assert!(
        generate(&handler, Some("fake-free-key"))
            .await
            .denial
            .is_some()
    );
}

#[test]
fn params_errors_name_the_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("keys.yaml");
    std::fs::write(&file, KEYS).expect("write");
    assert_eq!(
        compile_errors(json!({})),
        ["needs `file` (a key file) or `directory` (a folder of key files)"]
    );
    assert_eq!(
        compile_errors(json!({"file": file, "directory": dir.path()})),
        ["directory: give either `file` or `directory`, not both"]
    );
    assert_eq!(
        compile_errors(json!({"file": file, "reloadInterval": "10ms"})),
        ["reloadInterval: must be between 100ms and 1h, it is 10ms"]
    );
    assert_eq!(
        compile_errors(json!({"file": file, "reloadInterval": "soon"})),
        ["reloadInterval: \"soon\" is not a duration such as \"5s\""]
    );
    assert_eq!(
        compile_errors(json!({"file": file, "challenge": "a\nb"})),
        ["challenge: must be a non-empty header value without control characters"]
    );
    std::fs::write(&file, "keys:\n- name: a\n  key: fake\n  tier: gold\n").expect("write");
    let errors = compile_errors(json!({"file": file}));
    let want = format!("file: {}: keys[0].tier: unknown field", file.display());
    assert!(errors[0].starts_with(&want), "{errors:?}");
    let e = mixer_adapter_api::host::decode_params::<ApiKeyParams>(&json!({"files": "x"}))
        .expect_err("unknown param");
    assert_eq!(e.path, "files");
}

#[tokio::test]
async fn it_conforms() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("keys.yaml");
    std::fs::write(&file, KEYS).expect("write");
    mixer_adapter_api::testkit::assert_adapter_conforms(ApiKey, json!({"file": file})).await;
}

#[test]
fn it_builds_through_the_erased_adapter() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("keys.yaml");
    std::fs::write(&file, KEYS).expect("write");
    let adapter: &dyn AnyAdapter = &ApiKey;
    let config = adapter.compile(&json!({"file": file})).expect("valid");
    let ctx = BuildContext {
        handler_name: "keys.apikey.default".into(),
    };
    // Outside a runtime: built, with no reload task.
    let handler = adapter.build_compiled(&config, &ctx).expect("built");
    assert!(handler.as_attributes().is_some() && handler.as_check().is_none());
}

/// The handler's own task reads the files again, with no call from outside.
#[tokio::test]
async fn the_reload_task_reads_the_files_on_its_own() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("keys.yaml");
    std::fs::write(&file, KEYS).expect("write");
    let handler = handler_for(&file, json!({"reloadInterval": "100ms"}));
    std::fs::write(&file, "keys: [{name: alice, key: fake-gold-key}]").expect("rewrite");
    let start = std::time::Instant::now();
    while handler.reload_counts().0 == 0 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "no reload"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        generate(&handler, Some("fake-free-key"))
            .await
            .denial
            .is_some()
    );
    let valid = generate(&handler, Some("fake-gold-key"))
        .await
        .valid_duration
        .expect("bounded");
    assert!(
        valid <= std::time::Duration::from_millis(100),
        "an answer holds until the next read at most: {valid:?}"
    );
    handler.close().await;
}
