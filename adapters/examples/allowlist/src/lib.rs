//! An out-of-process `listentry` adapter: a value is allowed when it is a line of the file
//! named by the handler's `params.file`. The file is read again whenever its modification
//! time or size changes, so editing it takes effect on the next check (after the mixer's
//! cached answers expire: one second).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use mixer_adapter_sdk::{
    Adapter, CheckResult, Config, Error, ListEntry, ListEntryInstance, Server,
};

/// The adapter: the allowed values of each file it was asked about, with the file's stamp.
#[derive(Default)]
pub struct Allowlist {
    files: Mutex<HashMap<PathBuf, (Stamp, HashSet<String>)>>,
}

type Stamp = (Option<SystemTime>, u64);

fn file_param(config: &Config) -> Result<&Path, String> {
    config["file"]
        .as_str()
        .map(Path::new)
        .ok_or_else(|| "params.file: expected the path of the allow-list file".into())
}

impl Allowlist {
    /// The allowed values in `path`, read again if the file changed since last time.
    fn contains(&self, path: &Path, value: &str) -> Result<bool, Error> {
        let meta = std::fs::metadata(path)?;
        let stamp = (meta.modified().ok(), meta.len());
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        if files.get(path).is_none_or(|(seen, _)| *seen != stamp) {
            let text = std::fs::read_to_string(path)?;
            let values = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(String::from)
                .collect();
            files.insert(path.to_path_buf(), (stamp, values));
        }
        Ok(files[path].1.contains(value))
    }
}

impl Adapter for Allowlist {
    fn validate(&self, config: &Config) -> Result<(), String> {
        let path = file_param(config)?;
        std::fs::metadata(path)
            .map(drop)
            .map_err(|e| format!("params.file: {}: {e}", path.display()))
    }
}

impl ListEntry for Allowlist {
    async fn check(
        &self,
        instance: &ListEntryInstance,
        config: &Config,
    ) -> Result<CheckResult, Error> {
        let path = file_param(config).map_err(Error::invalid)?;
        let answer = if self.contains(path, &instance.value)? {
            CheckResult::ok()
        } else {
            CheckResult::deny(format!("{:?} is not on the allow list", instance.value))
        };
        Ok(answer.valid_for(Duration::from_secs(1)))
    }
}

/// Serves on the address given as the first argument, `ADAPTER_ADDR`, or 127.0.0.1:9070.
pub fn main() -> std::process::ExitCode {
    let addr = mixer_adapter_sdk::listen_addr("127.0.0.1:9070");
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    match runtime.block_on(Server::new(Allowlist::default()).list_entry().serve(addr)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("allowlist: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
