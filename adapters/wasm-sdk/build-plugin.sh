#!/usr/bin/env bash
# Builds a mixer Wasm plugin crate (a cdylib that depends on mixer-wasm-sdk) into the
# component the mixer loads:
#
#   adapters/wasm-sdk/build-plugin.sh <crate-dir> [out.wasm] [-- <more cargo build args>]
#
# without out.wasm, it prints where the component is (under the crate's target dir, or
# $CARGO_TARGET_DIR when set).
#
# Why not a plain `cargo build`: the mixer takes a component of the mixer:adapter@0.2.0 world
# that imports nothing but mixer:adapter/host. A plain `--target wasm32-unknown-unknown`
# build links a core module (not a component); a `--target wasm32-wasip2` build is a
# component, but Rust's std there imports WASI's CLI interfaces, which the mixer refuses to
# give plugins. So this builds for wasm32-unknown-unknown and links with the toolchain's own
# wasm-component-ld (the wasm32-wasip2 linker, shipped with rustc), which wraps the module
# into a component whose only imports are the host interface.
set -euo pipefail

die() {
  echo "build-plugin.sh: $*" >&2
  exit 1
}

[ $# -ge 1 ] && [ "$1" != "-h" ] && [ "$1" != "--help" ] ||
  die "usage: build-plugin.sh <crate-dir> [out.wasm] [-- <more cargo build args>]"
crate=$(cd "$1" 2>/dev/null && pwd -P) || die "no such directory: $1"
shift
[ -f "$crate/Cargo.toml" ] || die "$crate has no Cargo.toml"
out=
if [ $# -ge 1 ] && [ "$1" != "--" ]; then
  out=$1
  shift
fi
[ $# -ge 1 ] && [ "$1" = "--" ] && shift

target=wasm32-unknown-unknown
if [ ! -d "$(rustc --print target-libdir --target "$target")" ]; then
  command -v rustup >/dev/null || die "Rust's standard library for $target is missing"
  rustup target add "$target" >/dev/null
fi
host=$(rustc -vV | sed -n 's/^host: //p')
linker=$(rustc --print sysroot)/lib/rustlib/$host/bin/wasm-component-ld
[ -x "$linker" ] || die "wasm-component-ld not found at $linker (it ships with rustc 1.82 and later: rustup update)"

# The artifact is found in cargo's JSON messages: the crate's own, a .wasm file. Other
# messages (the compiler's diagnostics) are rendered to stderr as usual.
messages=$(CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=$linker \
  cargo build --release --target "$target" --manifest-path "$crate/Cargo.toml" \
  --message-format=json-render-diagnostics "$@")
wasm=$(printf '%s\n' "$messages" |
  grep '"reason":"compiler-artifact"' |
  grep -F "\"manifest_path\":\"$crate/Cargo.toml\"" |
  grep -o '"[^"]*\.wasm"' | tr -d '"' | tail -n 1 || true)
[ -n "$wasm" ] || die "$crate built no .wasm: a plugin crate needs [lib] crate-type = [\"cdylib\"]"

# A component's header is \0asm, then version 0x0d and layer 1; a core module's is version 1.
header=$(od -An -tx1 -N8 "$wasm" | tr -d ' \n')
[ "$header" = "0061736d0d000100" ] ||
  die "$wasm is not a component (header $header): is a linker set for $target elsewhere (.cargo/config.toml, RUSTFLAGS)?"

if [ -n "$out" ]; then
  mkdir -p "$(dirname "$out")"
  cp "$wasm" "$out"
  echo "$out"
else
  echo "$wasm"
fi
