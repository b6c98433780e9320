//! The `mixer` binary.

fn main() -> std::process::ExitCode {
    mixer_server::main()
}
