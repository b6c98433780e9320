//! The mixer's own log through the real binary: `--log-format json` writes one JSON object
//! per line (what `kubectl logs` readers and Loki parse), and a log that is not a terminal
//! holds no ANSI escape codes in either format.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use mixer_tests::Mixer;

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

/// The log of a mixer started with `extra`, made ready, and stopped with SIGTERM.
fn log_of(extra: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("stderr.log");
    let mixer = Mixer::start_with_env_and_log(binary(), extra, &[], &log);
    mixer.wait_ready(Duration::from_secs(20));
    assert!(mixer.terminate().success(), "the mixer stops cleanly");
    std::fs::read_to_string(&log).expect("read the log")
}

#[test]
fn json_logs_are_one_object_per_line_with_time_level_target_and_message() {
    let log = log_of(&["--log-format", "json"]);
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 2, "start and stop are logged: {log}");
    for line in &lines {
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        for key in ["timestamp", "level", "target", "message"] {
            assert!(event.get(key).is_some(), "no {key:?} in {line}");
        }
    }
    assert!(!log.contains('\u{1b}'), "escape codes in {log:?}");
}

#[test]
fn a_text_log_that_is_not_a_terminal_has_no_escape_codes() {
    let log = log_of(&[]);
    assert!(!log.is_empty(), "the mixer logs its start");
    assert!(!log.contains('\u{1b}'), "escape codes in {log:?}");
    assert!(log.contains("INFO"), "{log}");
}

#[test]
fn a_log_level_that_does_not_parse_is_refused_naming_the_flag() {
    let out = Command::new(binary())
        .args(["serve", "--log-level", "info,=[bad"])
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(["--admin-addr", "127.0.0.1:0"])
        .output()
        .expect("run the mixer");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--log-level"), "{stderr}");
}
