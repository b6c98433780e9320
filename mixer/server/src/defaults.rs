//! The config embedded in the binary, used when `serve` has no `--config`. It is the
//! `policies/default` bundle, so `mixer test policies/default` tests exactly what runs.

use mixer_config::SourceFile;

/// The embedded default config.
pub fn config() -> Vec<SourceFile> {
    vec![SourceFile {
        name: "<embedded>/default.yaml".to_string(),
        text: include_str!("../../../policies/default/config/default.yaml").to_string(),
    }]
}
