//! The Wasm SDK's README, followed as an author outside this repository would: its plugin
//! crate (`Cargo.toml` and `src/lib.rs`, as written there) in a temporary directory, built
//! with the one command it documents (`adapters/wasm-sdk/build-plugin.sh`), and its config
//! accepted by `mixer validate`, which loads the component and runs the plugin's `validate`.
//!
//! It builds in the example guests' build directory (`<target>/wasm-guests-build` beside
//! `$MIXER_WASM_GUESTS`, as adapters/examples/wasm/build.sh lays them out) with the examples'
//! lock file and `--offline`: the dependencies are those the examples compiled, so only the
//! plugin itself compiles, and nothing is fetched. Without the guests, it fails under CI=1.

use std::path::{Path, PathBuf};
use std::process::Command;

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .to_path_buf()
}

/// The first fenced block of `lang` (the info string exactly) in `markdown`.
fn block(markdown: &str, lang: &str) -> String {
    let fence = format!("```{lang}\n");
    let start = markdown
        .find(&fence)
        .unwrap_or_else(|| panic!("no ```{lang} block in the README"))
        + fence.len();
    let len = markdown[start..].find("```").expect("the block's end");
    markdown[start..start + len].to_string()
}

fn validate(config: &Path) -> (bool, String) {
    let out = Command::new(binary())
        .args(["validate", config.to_str().expect("utf-8")])
        .output()
        .expect("mixer validate");
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text.into_owned())
}

#[test]
fn the_readme_plugin_builds_outside_the_examples_with_one_command_and_loads() {
    // Where the example guests were built: their dependencies are reused.
    let Some(guest) = mixer_tests::wasm_guest("deny-header") else {
        return;
    };
    let build_dir = guest
        .parent()
        .and_then(Path::parent)
        .expect("the guests' target dir")
        .join("wasm-guests-build");
    let root = repository();
    let readme =
        std::fs::read_to_string(root.join("adapters/wasm-sdk/README.md")).expect("the README");

    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = dir.path().join("deny-user");
    std::fs::create_dir_all(plugin.join("src")).expect("mkdir");
    let manifest = block(&readme, "toml").replace("/path/to/mixer", root.to_str().expect("utf-8"));
    std::fs::write(plugin.join("Cargo.toml"), manifest).expect("write Cargo.toml");
    std::fs::write(plugin.join("src/lib.rs"), block(&readme, "rust")).expect("write lib.rs");
    std::fs::copy(
        root.join("adapters/examples/wasm/Cargo.lock"),
        plugin.join("Cargo.lock"),
    )
    .expect("copy the examples' lock file");

    let config = dir.path().join("config");
    let module = config.join("plugins/deny-user.wasm");
    let out = Command::new(root.join("adapters/wasm-sdk/build-plugin.sh"))
        .arg(&plugin)
        .arg(&module)
        .args(["--", "--offline"])
        .env("CARGO_TARGET_DIR", &build_dir)
        .output()
        .expect("build-plugin.sh");
    assert!(
        out.status.success(),
        "build-plugin.sh: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(module.exists(), "{} was not written", module.display());

    let yaml = block(&readme, "yaml");
    std::fs::write(config.join("rules.yaml"), &yaml).expect("write config");
    let (ok, text) = validate(&config);
    assert!(ok, "mixer validate: {text}");

    // The plugin's own validate ran at load: what it rejects is a config error at its path.
    std::fs::write(
        config.join("rules.yaml"),
        yaml.replace("config: {user: mallory}", "config: {user: \"\"}"),
    )
    .expect("write config");
    let (ok, text) = validate(&config);
    assert!(!ok, "{text}");
    for expected in ["spec.params.config.user", "must not be empty"] {
        assert!(text.contains(expected), "{expected:?} not in: {text}");
    }
}
