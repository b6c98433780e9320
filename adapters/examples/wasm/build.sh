#!/usr/bin/env bash
# Builds the example plugins into <target>/wasm-guests/ (deny-header.wasm, count-by.wasm,
# key-labels.wasm (an attribute generator),
# and python-deny.wasm when componentize-py is found: $COMPONENTIZE_PY, else on PATH;
# install it with `pip install -r python-deny/requirements.txt`). <target> is
# $CARGO_TARGET_DIR when set, else the repository's target/; the Rust guests build in
# <target>/wasm-guests-build.
#
# The Rust examples build as any plugin crate does, with adapters/wasm-sdk/build-plugin.sh
# (which says why a plain `cargo build` does not make a plugin).
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../../.. && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
guests=$target/wasm-guests
for plugin in deny-header count-by key-labels; do
  CARGO_TARGET_DIR=$target/wasm-guests-build \
    "$root/adapters/wasm-sdk/build-plugin.sh" "$plugin" "$guests/$plugin.wasm" -- --locked
done

# The Python example: componentize-py bundles CPython and the app into one component (about
# 18 MB). It is built against the previous world, mixer:adapter@0.1.0 (proto/wit-0.1.0), on
# purpose: the test that a plugin of that world still loads and decides. --stub-wasi replaces the WASI imports CPython's runtime has with stubs that trap,
# so the component imports only the mixer's host interface, as the host requires.
componentize=${COMPONENTIZE_PY:-componentize-py}
if command -v "$componentize" >/dev/null 2>&1; then
  "$componentize" -d "$root/proto/wit-0.1.0" -w plugin componentize --stub-wasi \
    -p python-deny app -o "$guests/python-deny.wasm"
elif [ -n "${CI:-}" ]; then
  echo "componentize-py is missing under CI=1: pip install -r python-deny/requirements.txt"; exit 1
else
  echo "componentize-py not found: python-deny.wasm not built (pip install -r python-deny/requirements.txt)"
fi
ls -l "$guests"
