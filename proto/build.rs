//! Generates the Mixer v1 API (server and client) from the .proto files in this crate, with
//! the protoc bundled by `protoc-bin-vendored`, so no system protoc is needed.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let wkt = protoc_bin_vendored::include_path()?;
    let mut config = tonic_prost_build::Config::new();
    // The path goes to prost-build directly: setting PROTOC would need `std::env::set_var`,
    // which is unsafe in edition 2024 (and the workspace forbids unsafe code).
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    let protos = [
        root.join("istio/mixer/v1/attributes.proto"),
        root.join("istio/mixer/v1/mixer.proto"),
        root.join("google/rpc/status.proto"),
    ];
    for p in &protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_with_config(config, &protos, &[root, wkt])?;
    Ok(())
}
