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
        // Attribute generators: Istio 1.4's kubernetesenv template, and our jwt and apikey.
        root.join("mixer/template/kubernetes/template_handler_service.proto"),
        root.join("mixer/template/jwt/template_handler_service.proto"),
        root.join("mixer/template/apikey/template_handler_service.proto"),
    ];
    for p in &protos {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // For gRPC server reflection: an adapter says which template services it serves.
        .file_descriptor_set_path(out.join("mixer_descriptor.bin"))
        .compile_with_config(config, &protos, &[root.clone(), wkt.clone()])?;
    if std::env::var_os("CARGO_FEATURE_TESTDATA").is_some() {
        testdata(&root, &wkt)?;
    }
    Ok(())
}

/// A test adapter's config message, its Rust type and its descriptor set (what an `adapter`
/// resource carries), for tests of typed handler params. Only with the `testdata` feature, so
/// the mixer itself never builds it.
fn testdata(
    root: &std::path::Path,
    wkt: &std::path::Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let proto = root.join("testdata/typed_params.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(false)
        .file_descriptor_set_path(out.join("typed_params.bin"))
        .compile_with_config(config, &[proto], &[root.to_path_buf(), wkt.to_path_buf()])?;
    Ok(())
}
