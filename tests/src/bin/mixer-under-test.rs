//! The mixer binary, for the integration tests of this package.

fn main() -> std::process::ExitCode {
    mixer_server::main()
}
