//! An out-of-process `listentry` adapter: a value is allowed when it is a line of the file
//! named by the handler's `params.file`. The file is read again whenever its modification
//! time or size changes, so editing it takes effect on the next check (after the mixer's
//! cached answers expire: one second).
//!
//! It is an [`Adapter`] of the adapter API like any built-in one; the SDK serves it
//! (`mixer_adapter_sdk::serve(Allowlist)` in `main.rs`), answers its checks with a plain
//! function ([`check_fn`]) and follows the file ([`WatchedFile::list`]).

use std::{path::PathBuf, sync::Arc, time::Duration};

use mixer_adapter_sdk::api::{Adapter, AdapterError, AdapterInfo, BuildContext, Handler};
use mixer_adapter_sdk::api::{ParamError, Stability};
use mixer_adapter_sdk::model::{CheckResult, Code, ListEntryInstance, Status, Template};
use mixer_adapter_sdk::{WatchedFile, check_fn};

static INFO: AdapterInfo = AdapterInfo {
    name: "allowlist",
    description: "allows the values listed, one per line, in the file params.file names",
    templates: &[Template::ListEntry],
    cacheable: true,
    stability: Stability::Alpha,
};

/// The handler's params.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The allow-list file: one value per line; blank lines and `#` comments are skipped.
    /// Relative to the adapter's working directory.
    pub file: PathBuf,
}

/// The adapter.
#[derive(Debug, Default, Clone, Copy)]
pub struct Allowlist;

impl Adapter for Allowlist {
    type Config = Config;
    /// The file, known to exist when the params were compiled.
    type Compiled = PathBuf;

    fn info(&self) -> &AdapterInfo {
        &INFO
    }

    fn compile(&self, config: Config) -> Result<PathBuf, Vec<ParamError>> {
        let file = config.file;
        let found = std::fs::metadata(&file).map_err(|e| format!("{}: {e}", file.display()));
        found
            .map(|_| file)
            .map_err(|e| vec![ParamError::new("file", e)])
    }

    fn build(&self, file: &PathBuf, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        let allowed = WatchedFile::list(file);
        Ok(check_fn(move |instance| {
            let entry = ListEntryInstance::of(instance).and_then(|i| i.value);
            let value = entry.as_ref().and_then(|v| v.as_str()).unwrap_or_default();
            // A file that went away is "could not decide": the handler's fail policy applies.
            let mut answer = CheckResult::ok(Duration::from_secs(1), 1000);
            if !allowed.get()?.contains(value) {
                let denied = format!("{value:?} is not on the allow list");
                answer.status = Status::new(Code::PermissionDenied, denied);
            }
            Ok(answer)
        }))
    }
}

#[cfg(test)]
mod tests {
    use mixer_adapter_sdk::api::ErrorKind;
    use mixer_adapter_sdk::api::host::AnyAdapter;
    use mixer_adapter_sdk::model::{FieldValue, Instance, Value};
    use serde_json::json;

    use super::*;

    fn user(name: &str) -> Instance {
        Instance {
            name: "user.instance.istio-system".into(),
            template: Template::ListEntry,
            fields: vec![("value", FieldValue::Value(Value::from(name)))],
        }
    }

    #[tokio::test]
    async fn allows_the_listed_values_and_follows_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("allowed.txt");
        std::fs::write(&file, "# users\nalice\n\n").expect("write");
        let ctx = BuildContext {
            handler_name: "allowlist.istio-system".into(),
        };
        let handler = Allowlist
            .compile_and_build(&json!({ "file": file }), &ctx)
            .expect("builds");
        let check = handler.as_check().expect("checks");
        let alice = check.check(&user("alice")).await.expect("answer");
        assert!(alice.status.is_ok());
        assert_eq!(alice.valid_duration, Duration::from_secs(1));
        let mallory = check.check(&user("mallory")).await.expect("answer");
        assert_eq!(mallory.status.code, Code::PermissionDenied);
        assert_eq!(
            mallory.status.message,
            "\"mallory\" is not on the allow list"
        );

        std::fs::write(&file, "alice\nmallory\n").expect("rewrite");
        let mallory = check.check(&user("mallory")).await.expect("answer");
        assert!(mallory.status.is_ok(), "the file is read again");

        std::fs::remove_file(&file).expect("remove");
        let gone = check.check(&user("alice")).await.expect_err("no file");
        assert_eq!((gone.kind, gone.retryable), (ErrorKind::Unavailable, true));
    }

    #[test]
    fn params_name_an_existing_file() {
        let missing = AnyAdapter::compile(&Allowlist, &json!({"file": "/nonexistent/allowed.txt"}))
            .expect_err("no such file");
        assert_eq!(missing[0].path, "file");
        assert!(missing[0].message.starts_with("/nonexistent/allowed.txt: "));
        let none = AnyAdapter::compile(&Allowlist, &json!({})).expect_err("no file named");
        assert!(none[0].message.contains("missing field `file`"), "{none:?}");
    }
}
