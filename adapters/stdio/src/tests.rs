//! Handler behaviour: record content, filtering, formats, files and rotation.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mixer_adapter_api::host::AnyAdapter;
use mixer_adapter_api::{BuildContext, ReportHandler};
use mixer_model::{FieldValue, Instance, StringMap, Template, Timestamp, Value};
use serde_json::json;

use crate::{Clock, Stdio, StdioHandler, StdioParams};

fn ctx() -> BuildContext {
    BuildContext {
        handler_name: "stdio.istio-system".into(),
    }
}

fn build(params: serde_json::Value) -> Arc<StdioHandler> {
    let params: StdioParams = mixer_adapter_api::host::decode_params(&params).expect("decodes");
    let config = params.compile().expect("valid params");
    Stdio.build_handler(&config, &ctx()).expect("built")
}

struct FakeClock(Arc<AtomicU64>);

impl FakeClock {
    fn new(start: SystemTime) -> FakeClock {
        let ms = start
            .duration_since(UNIX_EPOCH)
            .expect("after epoch")
            .as_millis();
        FakeClock(Arc::new(AtomicU64::new(ms as u64)))
    }
    fn clock(&self) -> Clock {
        let ms = self.0.clone();
        Arc::new(move || UNIX_EPOCH + Duration::from_millis(ms.load(Ordering::SeqCst)))
    }
    fn advance(&self, d: Duration) {
        self.0.fetch_add(d.as_millis() as u64, Ordering::SeqCst);
    }
}

fn build_with_clock(params: serde_json::Value, clock: Clock) -> StdioHandler {
    let config = mixer_adapter_api::host::decode_params::<StdioParams>(&params)
        .expect("decodes")
        .compile()
        .expect("valid");
    StdioHandler::with_clock(config, "stdio.istio-system".into(), clock).expect("built")
}

fn ts(text: &str) -> Value {
    Value::Timestamp(Timestamp::parse_rfc3339(text).expect("timestamp"))
}

fn log(name: &str, severity: &str, vars: Vec<(&str, Value)>) -> Instance {
    Instance {
        name: name.into(),
        template: Template::LogEntry,
        fields: vec![
            (
                "variables",
                FieldValue::Map(vars.into_iter().map(|(k, v)| (k.into(), v)).collect()),
            ),
            (
                "timestamp",
                FieldValue::Value(ts("2019-10-01T12:00:00.123456789Z")),
            ),
            ("severity", FieldValue::Value(Value::from(severity))),
        ],
    }
}

fn numbered(i: usize) -> Instance {
    log(
        "accesslog.istio-system",
        "info",
        vec![
            ("seq", Value::Int64(i as i64)),
            ("padding", Value::from("x".repeat(20))),
        ],
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn lines_of(paths: &[PathBuf]) -> Vec<serde_json::Value> {
    paths
        .iter()
        .flat_map(|p| read(p).lines().map(str::to_string).collect::<Vec<_>>())
        .map(|l| serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// The active file and its rotated files.
fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn a_batch_becomes_one_json_object_per_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("out.log");
    let h = build(json!({"logStream": "FILE", "outputPath": path}));
    let metric = Instance {
        name: "requestcount.istio-system".into(),
        template: Template::Metric,
        fields: vec![
            ("value", FieldValue::Value(Value::Int64(1))),
            (
                "dimensions",
                FieldValue::Map(vec![
                    ("source".into(), Value::from("web")),
                    ("code".into(), Value::Int64(200)),
                ]),
            ),
        ],
    };
    h.report(&[
        log(
            "accesslog.istio-system",
            "Warning",
            vec![
                ("url", Value::from("/a \"b\"")),
                (
                    "latency",
                    Value::Duration(mixer_model::Duration(19_000_000)),
                ),
                (
                    "sourceIp",
                    Value::IpAddress("10.1.2.3".parse().expect("ip")),
                ),
                ("ok", Value::Bool(true)),
                ("ratio", Value::Double(0.25)),
                ("start", ts("2019-10-01T11:59:59Z")),
                (
                    "headers",
                    Value::from(StringMap::from_pairs([("x-b", "2"), ("x-a", "1")])),
                ),
            ],
        ),
        log(
            "accesslog.istio-system",
            "ERROR",
            vec![("n", Value::Int64(2))],
        ),
        metric,
        Instance {
            name: "span.istio-system".into(),
            template: Template::TraceSpan,
            fields: vec![],
        },
    ])
    .await
    .expect("written");
    let text = read(&path);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(
        lines[0],
        "{\"level\":\"info\",\"time\":\"2019-10-01T12:00:00.123456Z\",\
         \"instance\":\"accesslog.istio-system\",\"headers\":{\"x-a\":\"1\",\"x-b\":\"2\"},\
         \"latency\":\"19ms\",\"ok\":true,\"ratio\":0.25,\"sourceIp\":\"10.1.2.3\",\
         \"start\":\"2019-10-01T11:59:59.000000Z\",\"url\":\"/a \\\"b\\\"\"}"
    );
    assert_eq!(
        lines[1],
        "{\"level\":\"error\",\"time\":\"2019-10-01T12:00:00.123456Z\",\
         \"instance\":\"accesslog.istio-system\",\"n\":2}"
    );
    let m: serde_json::Value = serde_json::from_str(lines[2]).expect("json");
    assert_eq!(m["level"], "info");
    assert_eq!(m["instance"], "requestcount.istio-system");
    assert_eq!(m["value"], 1);
    assert_eq!(m["code"], 200);
    assert_eq!(m["source"], "web");
    assert!(
        lines[2].starts_with("{\"level\":\"info\",\"time\":\"")
            && lines[2].contains("\"value\":1,\"code\":200,\"source\":\"web\"}"),
        "{}",
        lines[2]
    );
    let time = m["time"].as_str().expect("time");
    assert!(Timestamp::parse_rfc3339(time).is_some(), "{time}");
}

#[tokio::test]
async fn severity_levels_and_output_level_filter_records() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("out.log");
    let h = build(json!({
        "logStream": "FILE", "outputPath": path,
        "outputLevel": "WARNING", "metricLevel": "INFO",
        "severityLevels": {"notice": "WARNING", "info": "ERROR"}
    }));
    let metric = Instance {
        name: "m.ns".into(),
        template: Template::Metric,
        fields: vec![("value", FieldValue::Value(Value::Int64(1)))],
    };
    h.report(&[
        log("a.ns", "INFO", vec![("i", Value::Int64(1))]),
        log("a.ns", "debug", vec![("i", Value::Int64(2))]),
        log("a.ns", "warn", vec![("i", Value::Int64(3))]),
        log("a.ns", "notice", vec![("i", Value::Int64(4))]),
        log("a.ns", "fatal", vec![("i", Value::Int64(5))]),
        log("a.ns", "info", vec![("i", Value::Int64(6))]),
        metric,
    ])
    .await
    .expect("written");
    let records = lines_of(&[path]);
    let kept: Vec<(i64, &str)> = records
        .iter()
        .map(|r| {
            (
                r["i"].as_i64().expect("i"),
                r["level"].as_str().expect("level"),
            )
        })
        .collect();
    assert_eq!(kept, [(3, "warn"), (4, "warn"), (5, "error"), (6, "error")]);
    assert_eq!(h.severity_level("unheard-of"), crate::Level::Info);
}

#[tokio::test]
async fn console_format() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("out.log");
    let h = build(json!({"logStream": "FILE", "outputPath": path, "outputAsJson": false}));
    h.report(&[log(
        "accesslog.istio-system",
        "error",
        vec![
            ("method", Value::from("GET")),
            ("url", Value::from("/a b")),
            (
                "latency",
                Value::Duration(mixer_model::Duration(1_500_000_000)),
            ),
        ],
    )])
    .await
    .expect("written");
    assert_eq!(
        read(&path),
        "2019-10-01T12:00:00.123456Z\terror\taccesslog.istio-system\t\
         latency=1.5s method=GET url=\"/a b\"\n"
    );
}

#[tokio::test]
async fn file_mode_appends_across_handlers() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("nested/dir/out.log");
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&path, "existing line\n").expect("seed");
    let params = json!({"logStream": "FILE", "outputPath": path});
    build(params.clone())
        .report(&[numbered(1)])
        .await
        .expect("written");
    build(params).report(&[numbered(2)]).await.expect("written");
    let text = read(&path);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0], "existing line");
    assert!(
        lines[1].contains("\"seq\":1") && lines[2].contains("\"seq\":2"),
        "{text}"
    );
}

#[tokio::test]
async fn rotation_by_size_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("access.log");
    let line_len = {
        let h = build(json!({"logStream": "FILE", "outputPath": dir.path().join("probe")}));
        h.format_batch(&[numbered(100)]).len()
    };
    std::fs::remove_file(dir.path().join("probe")).expect("rm probe");
    let max = line_len * 3 + line_len / 2; // three lines per file
    let clock = FakeClock::new(SystemTime::now());
    let h = build_with_clock(
        json!({"logStream": "ROTATED_FILE", "outputPath": path,
               "maxBytesBeforeRotation": max, "maxRotatedFiles": 0}),
        clock.clock(),
    );
    // 7 batches of 3, 1, 5, 0, 2, 4, 5 lines: 20 lines; sequence numbers 100..120 keep the
    // line length fixed.
    let mut seq = 100;
    for size in [3, 1, 5, 0, 2, 4, 5] {
        let batch: Vec<Instance> = (0..size)
            .map(|_| {
                seq += 1;
                numbered(seq)
            })
            .collect();
        h.report(&batch).await.expect("written");
        clock.advance(Duration::from_millis(1));
    }
    let files = all_files(dir.path());
    assert_eq!(files.len(), 7, "20 lines at 3 per file: {files:?}");
    for f in &files {
        let len = std::fs::metadata(f).expect("meta").len() as usize;
        assert!(len <= max, "{} is {len} bytes", f.display());
    }
    let seqs: Vec<i64> = lines_of(&files)
        .iter()
        .map(|r| r["seq"].as_i64().expect("seq"))
        .collect();
    assert_eq!(seqs.len(), 20);
    let unique: HashSet<i64> = seqs.iter().copied().collect();
    assert_eq!(unique, (101..=120).collect::<HashSet<i64>>());
    // Rotated files sort oldest first by name; the active file holds the newest lines.
    let mut ordered: Vec<PathBuf> = files.iter().filter(|f| **f != path).cloned().collect();
    ordered.sort_by_key(|f| {
        let name = f.file_name().expect("name").to_string_lossy().into_owned();
        crate::sink::parse_backup_name(&name, "access", ".log").expect("a rotated file")
    });
    ordered.push(path.clone());
    let in_order: Vec<i64> = lines_of(&ordered)
        .iter()
        .map(|r| r["seq"].as_i64().expect("seq"))
        .collect();
    assert_eq!(in_order, (101..=120).collect::<Vec<i64>>());
    assert_eq!(read(&path).lines().count(), 2);
}

#[tokio::test]
async fn rotations_in_the_same_millisecond_get_distinct_names() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("a.log");
    let clock = FakeClock::new(SystemTime::now());
    let h = build_with_clock(
        json!({"logStream": "ROTATED_FILE", "outputPath": path, "maxBytesBeforeRotation": 1}),
        clock.clock(),
    );
    // Every line is longer than the limit: each goes alone into a file.
    let batch: Vec<Instance> = (0..5).map(numbered).collect();
    h.report(&batch).await.expect("written");
    let files = all_files(dir.path());
    assert_eq!(files.len(), 5, "{files:?}");
    assert_eq!(lines_of(&files).len(), 5);
}

#[tokio::test]
async fn at_most_max_rotated_files_are_kept() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("access.log");
    let clock = FakeClock::new(SystemTime::now());
    let h = build_with_clock(
        json!({"logStream": "ROTATED_FILE", "outputPath": path,
               "maxMegabytesBeforeRotation": 0.0001, "maxRotatedFiles": 3}),
        clock.clock(),
    );
    // 0.0001 MB = 104 bytes, less than a line: one line per file.
    for i in 0..10 {
        h.report(&[numbered(100 + i)]).await.expect("written");
        clock.advance(Duration::from_millis(10));
    }
    let files = all_files(dir.path());
    assert_eq!(files.len(), 4, "active + 3 rotated: {files:?}");
    let mut seqs: Vec<i64> = lines_of(&files)
        .iter()
        .map(|r| r["seq"].as_i64().expect("seq"))
        .collect();
    seqs.sort();
    assert_eq!(seqs, [106, 107, 108, 109], "the newest lines are kept");
}

#[tokio::test]
async fn rotation_by_age_and_old_rotated_files_are_deleted() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("access.log");
    let clock = FakeClock::new(SystemTime::now());
    let h = build_with_clock(
        json!({"logStream": "ROTATED_FILE", "outputPath": path, "maxDaysBeforeRotation": 1}),
        clock.clock(),
    );
    h.report(&[numbered(1)]).await.expect("written");
    clock.advance(Duration::from_secs(3600));
    h.report(&[numbered(2)]).await.expect("written");
    assert_eq!(all_files(dir.path()).len(), 1, "not a day old yet");

    clock.advance(Duration::from_secs(23 * 3600));
    h.report(&[numbered(3)]).await.expect("written");
    let files = all_files(dir.path());
    assert_eq!(files.len(), 2, "rotated after a day: {files:?}");
    assert_eq!(read(&path).lines().count(), 1);

    // Two days later the next rotation deletes the rotated file, which is by then too old.
    clock.advance(Duration::from_secs(2 * 86_400));
    h.report(&[numbered(4)]).await.expect("written");
    let files = all_files(dir.path());
    assert_eq!(files.len(), 2, "{files:?}");
    let seqs: Vec<i64> = lines_of(&files)
        .iter()
        .map(|r| r["seq"].as_i64().expect("seq"))
        .collect();
    assert_eq!(seqs.len(), 2);
    assert!(seqs.contains(&3) && seqs.contains(&4), "{seqs:?}");
}

#[tokio::test]
async fn an_existing_rotated_file_is_appended_to() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("access.log");
    let params =
        json!({"logStream": "ROTATED_FILE", "outputPath": path, "maxBytesBeforeRotation": 10_000});
    build(params.clone())
        .report(&[numbered(1)])
        .await
        .expect("written");
    build(params).report(&[numbered(2)]).await.expect("written");
    assert_eq!(read(&path).lines().count(), 2);
    assert_eq!(all_files(dir.path()).len(), 1);
}

#[tokio::test]
async fn standard_streams_take_records() {
    let h = build(json!({"logStream": "STDERR", "outputLevel": "ERROR"}));
    // Filtered out entirely: nothing is written, and the call succeeds.
    h.report(&[numbered(1)]).await.expect("nothing to write");
    let h = build(json!({}));
    h.report(&[numbered(1)]).await.expect("written to stdout");
}

#[test]
fn info_and_validation_through_the_adapter() {
    let info = Stdio.info();
    assert_eq!(info.name, "stdio");
    assert_eq!(info.templates, [Template::LogEntry, Template::Metric]);
    let errs = Stdio
        .compile(&json!({"logStream": "ROTATED_FILE", "maxRotatedFiles": -1}))
        .expect_err("invalid");
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["outputPath", "maxRotatedFiles"]);
    assert_eq!(
        Stdio
            .compile(&json!({"logStream": "FILE", "output_path": "/tmp/x", "bogus": 1}))
            .expect_err("unknown")[0]
            .path,
        "bogus"
    );
    let err = Stdio
        .compile_and_build(&json!({"logStream": "FILE"}), &ctx())
        .err()
        .expect("invalid params are not built");
    assert!(err.message.contains("outputPath"), "{}", err.message);
    let dir = tempfile::tempdir().expect("tmp");
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "").expect("file");
    let err = Stdio
        .compile_and_build(
            &json!({"logStream": "FILE", "outputPath": blocker.join("under-a-file.log")}),
            &ctx(),
        )
        .err()
        .expect("cannot open");
    assert_eq!(err.kind, mixer_adapter_api::ErrorKind::Unavailable);
}
