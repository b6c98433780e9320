//! The allowlist example adapter (adapters/examples/allowlist), for the integration tests of
//! this package (`CARGO_BIN_EXE_*` only names binaries of the package under test).

fn main() -> std::process::ExitCode {
    mixer_adapter_sdk::serve(mixer_example_allowlist::Allowlist)
}
