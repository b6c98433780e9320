use super::*;
use mixer_adapter_api::host::decode_params;
use serde_json::json;

fn compile(v: serde_json::Value) -> Result<StdioConfig, Vec<ParamError>> {
    decode_params::<StdioParams>(&v)
        .map_err(|e| vec![e])?
        .compile()
}

fn paths(v: serde_json::Value) -> Vec<String> {
    compile(v)
        .expect_err("invalid")
        .into_iter()
        .map(|e| e.path)
        .collect()
}

#[test]
fn defaults_follow_istio() {
    let c = compile(json!(null)).expect("valid");
    assert_eq!(c.output, Output::Stdout);
    assert!(c.json);
    assert_eq!(c.metric_level, Level::Info);
    assert_eq!(c.output_level, Level::Info);
    assert_eq!(c.severity_levels.get("WARN"), Some(&Level::Warning));
    assert_eq!(c.severity_levels.get("fatal"), Some(&Level::Error));
    let c =
        compile(json!({"logStream": "ROTATED_FILE", "outputPath": "/tmp/x/a.log"})).expect("valid");
    assert_eq!(
        c.output,
        Output::Rotated(Rotation {
            path: "/tmp/x/a.log".into(),
            max_bytes: 100 * 1024 * 1024,
            max_age: Some(Duration::from_secs(30 * 86_400)),
            max_files: Some(1000),
        })
    );
}

#[test]
fn both_spellings_numbers_and_extensions() {
    let c = compile(json!({
        "log_stream": 3, "output_path": "/tmp/a.log", "output_as_json": false,
        "severity_levels": {"notice": "WARNING", "INFO": 2},
        "metric_level": "ERROR", "output_level": 1,
        "max_megabytes_before_rotation": 0.5, "max_days_before_rotation": 0,
        "max_rotated_files": 0
    }))
    .expect("valid");
    assert!(!c.json);
    assert_eq!(c.severity_levels.get("notice"), Some(&Level::Warning));
    assert_eq!(c.severity_levels.get("INFO"), Some(&Level::Error));
    assert_eq!(c.severity_levels.get("info"), Some(&Level::Info));
    assert_eq!(c.metric_level, Level::Error);
    assert_eq!(c.output_level, Level::Warning);
    let Output::Rotated(r) = c.output else {
        panic!("rotated")
    };
    assert_eq!(r.max_bytes, 512 * 1024);
    assert_eq!(r.max_age, None);
    assert_eq!(r.max_files, None);
    let c = compile(
        json!({"logStream": "ROTATED_FILE", "outputPath": "/tmp/a.log",
        "maxMegabytesBeforeRotation": 1, "maxBytesBeforeRotation": 300}),
    )
    .expect("valid");
    let Output::Rotated(r) = c.output else {
        panic!("rotated")
    };
    assert_eq!(r.max_bytes, 300);
}

#[test]
fn every_error_has_its_path() {
    assert_eq!(paths(json!({"logStream": "FILE"})), ["outputPath"]);
    assert_eq!(
        paths(json!({"logStream": "ROTATED_FILE", "outputPath": " "})),
        ["outputPath"]
    );
    assert_eq!(paths(json!({"outputPath": "/tmp/a.log"})), ["outputPath"]);
    assert_eq!(
        paths(json!({"logStream": "FILE", "outputPath": "/tmp/"})),
        ["outputPath"]
    );
    assert_eq!(
        paths(
            json!({"logStream": "ROTATED_FILE", "outputPath": "/tmp/a.log",
            "maxMegabytesBeforeRotation": -1, "maxDaysBeforeRotation": -2,
            "maxRotatedFiles": -3})
        ),
        [
            "maxMegabytesBeforeRotation",
            "maxDaysBeforeRotation",
            "maxRotatedFiles"
        ]
    );
    assert_eq!(
        paths(
            json!({"logStream": "ROTATED_FILE", "outputPath": "/tmp/a.log",
            "maxBytesBeforeRotation": 0})
        ),
        ["maxBytesBeforeRotation"]
    );
    assert_eq!(paths(json!({"logStream": "PIPE"})), ["logStream"]);
    assert_eq!(paths(json!({"outputLevel": "DEBUG"})), ["outputLevel"]);
    assert_eq!(
        paths(json!({"severityLevels": {"x": "LOUD"}})),
        ["severityLevels.x"]
    );
    assert_eq!(paths(json!({"outputFormat": "json"})), ["outputFormat"]);
    let e = compile(json!({"logStream": "FILE"})).expect_err("no path");
    assert_eq!(
        e[0].message,
        "need a valid output path when using a FILE or ROTATED_FILE log stream"
    );
}
