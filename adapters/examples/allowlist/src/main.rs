//! `allowlist [ADDR]`: serves the allow-list adapter (default address 127.0.0.1:9070, or
//! `ADAPTER_ADDR`).

fn main() -> std::process::ExitCode {
    mixer_example_allowlist::main()
}
