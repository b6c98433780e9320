//! The Python of the virtual environment `.ci/run` sets up (`MIXER_PYTHON`, default
//! `/tmp/mixer-venv/bin/python`), for the tests that run Python: the Python adapter helper's
//! requirements (grpcio, grpcio-tools, grpcio-reflection) and the OTLP client's.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The Python with the Python adapter helper's requirements; `None` (after saying why) when
/// it is not set up and this is not CI, where a missing environment is a failure rather than
/// a skip.
pub fn python_or_skip() -> Option<PathBuf> {
    python_importing(
        "grpc, grpc_tools, grpc_reflection",
        "adapters/sdk-python/requirements.txt",
    )
}

/// The Python if it imports every module of `imports` (comma separated); else `None` after
/// saying why and how to install `requirements` (a requirements file of the repository),
/// except under CI, where that fails the test.
pub fn python_importing(imports: &str, requirements: &str) -> Option<PathBuf> {
    let python = PathBuf::from(
        std::env::var("MIXER_PYTHON").unwrap_or_else(|_| "/tmp/mixer-venv/bin/python".into()),
    );
    let ok = Command::new(&python)
        .args(["-c", &format!("import {imports}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(python);
    }
    let why = format!(
        "{} cannot import {imports}: python3 -m venv /tmp/mixer-venv && \
         /tmp/mixer-venv/bin/pip install -r {requirements} (or set MIXER_PYTHON)",
        python.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{why}");
    eprintln!("skipped: {why}");
    None
}
