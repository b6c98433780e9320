//! `keyring [ADDR]`: serves the keyring adapter (default address 127.0.0.1:9070, or
//! `ADAPTER_ADDR`; TLS and a required token from the environment, see
//! `mixer_adapter_sdk::serve`).

fn main() -> std::process::ExitCode {
    mixer_adapter_sdk::serve(mixer_example_keyring::Keyring)
}
