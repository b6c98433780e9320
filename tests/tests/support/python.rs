//! The Python of the virtual environment with grpcio, grpcio-tools and grpcio-reflection (the
//! Python adapter helper's requirements) that `.ci/run` sets up
//! (`MIXER_PYTHON`, default `/tmp/mixer-venv/bin/python`), for the tests that run Python.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The Python to use; `None` (after saying why) when it is not set up and this is not CI,
/// where a missing environment is a failure rather than a skip.
pub fn python_or_skip() -> Option<PathBuf> {
    let python = PathBuf::from(
        std::env::var("MIXER_PYTHON").unwrap_or_else(|_| "/tmp/mixer-venv/bin/python".into()),
    );
    let ok = Command::new(&python)
        .args(["-c", "import grpc, grpc_tools, grpc_reflection"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(python);
    }
    let why = format!(
        "{} with grpcio, grpcio-tools and grpcio-reflection not found: python3 -m venv \
         /tmp/mixer-venv && /tmp/mixer-venv/bin/pip install -r adapters/sdk-python/requirements.txt \
         (or set MIXER_PYTHON)",
        python.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{why}");
    eprintln!("skipped: {why}");
    None
}
