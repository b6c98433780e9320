//! Generates the Mixer v1 API and the out-of-process adapter protocol (server and client) from
//! the .proto files in this crate, with the protoc bundled by `protoc-bin-vendored`, so no
//! system protoc is needed.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let wkt = protoc_bin_vendored::include_path()?;
    let mut config = tonic_prost_build::Config::new();
    // The path goes to prost-build directly: setting PROTOC would need `std::env::set_var`,
    // which is unsafe in edition 2024 (and the workspace forbids unsafe code).
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // Every Check and Report decodes these maps (about twenty entries each): B-trees of small
    // integer keys decode cheaper than SipHash tables that grow while they fill, and iterate
    // in a stable order.
    config.btree_map([
        ".istio.mixer.v1.CompressedAttributes",
        ".istio.mixer.v1.StringMap",
    ]);
    let protos = [
        root.join("istio/mixer/v1/attributes.proto"),
        root.join("istio/mixer/v1/mixer.proto"),
        root.join("google/rpc/status.proto"),
        // The out-of-process adapter protocol (Istio 1.4).
        root.join("istio/policy/v1beta1/value_type.proto"),
        root.join("istio/policy/v1beta1/type.proto"),
        root.join("istio/mixer/adapter/model/v1beta1/extensions.proto"),
        root.join("istio/mixer/adapter/model/v1beta1/infrastructure_backend.proto"),
        root.join("istio/mixer/adapter/model/v1beta1/check.proto"),
        root.join("istio/mixer/adapter/model/v1beta1/quota.proto"),
        root.join("istio/mixer/adapter/model/v1beta1/report.proto"),
        root.join("istio/mixer/adapter/model/v1beta1/type.proto"),
        root.join("mixer/template/authorization/template_handler_service.proto"),
        root.join("mixer/template/checknothing/template_handler_service.proto"),
        root.join("mixer/template/listentry/template_handler_service.proto"),
        root.join("mixer/template/quota/template_handler_service.proto"),
        root.join("mixer/template/metric/template_handler_service.proto"),
        root.join("mixer/template/logentry/template_handler_service.proto"),
        root.join("mixer/template/tracespan/template_handler_service.proto"),
        root.join("mixer/template/reportnothing/template_handler_service.proto"),
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
