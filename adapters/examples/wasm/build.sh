#!/usr/bin/env bash
# Builds the example plugins into target/wasm-guests/ (deny-header.wasm, count-by.wasm, and
# python-deny.wasm when componentize-py is found: $COMPONENTIZE_PY, else on PATH; install it
# with `pip install -r python-deny/requirements.txt`).
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

# The Python example: componentize-py bundles CPython and the app into one component (about
# 18 MB). --stub-wasi replaces the WASI imports CPython's runtime has with stubs that trap,
# so the component imports only the mixer's host interface, as the host requires.
componentize=${COMPONENTIZE_PY:-componentize-py}
if command -v "$componentize" >/dev/null 2>&1; then
  "$componentize" -d "$root/proto/wit" -w plugin componentize --stub-wasi \
    -p python-deny app -o "$root/target/wasm-guests/python-deny.wasm"
elif [ -n "${CI:-}" ]; then
  echo "componentize-py is missing under CI=1: pip install -r python-deny/requirements.txt"; exit 1
else
  echo "componentize-py not found: python-deny.wasm not built (pip install -r python-deny/requirements.txt)"
fi
ls -l "$root/target/wasm-guests"
