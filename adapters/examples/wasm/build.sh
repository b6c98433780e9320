#!/usr/bin/env bash
# Builds the example plugins into target/wasm-guests/ (deny-header.wasm, count-by.wasm).
#
# For wasm32-unknown-unknown, linked by the toolchain's own wasm-component-ld (the linker
# of wasm32-wasip2): the result is a component whose only imports are the mixer's host
# interface. Built for wasm32-wasip2, Rust's standard library would import WASI's CLI
# interfaces, which the mixer refuses to give plugins.
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../../.. && pwd)
rustup target add wasm32-unknown-unknown wasm32-wasip2 >/dev/null
host=$(rustc -vV | sed -n 's/^host: //p')
linker=$(rustc --print sysroot)/lib/rustlib/$host/bin/wasm-component-ld
[ -x "$linker" ] || { echo "wasm-component-ld not found at $linker"; exit 1; }
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=$linker \
  cargo build --release --locked --target wasm32-unknown-unknown --target-dir "$root/target/wasm-guests-build"
mkdir -p "$root/target/wasm-guests"
for plugin in deny-header count-by; do
  cp "$root/target/wasm-guests-build/wasm32-unknown-unknown/release/mixer_plugin_${plugin//-/_}.wasm" \
    "$root/target/wasm-guests/$plugin.wasm"
done
ls -l "$root/target/wasm-guests"
