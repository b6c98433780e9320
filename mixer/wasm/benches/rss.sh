#!/usr/bin/env bash
# Resident memory of `mixer serve` with 0, 1 and N handlers of one Wasm plugin: what a loaded
# plugin adds. Each handler has its own config (so its own handler and instances); handlers
# of one module share its compiled code (cached by SHA-256).
#
#   mixer/wasm/benches/rss.sh [MODULE.wasm] [N]
#
# MIXER: the binary (default target/debug/mixer); the plugin's default: deny-header.wasm.
# Prints one line per count: handlers, RSS after load, RSS after 200 checks (KiB).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
module=$(realpath "${1:-$root/target/wasm-guests/deny-header.wasm}")
n=${2:-10}
mixer=${MIXER:-$root/target/debug/mixer}
deadline=${CHECK_DEADLINE:-2s}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

config() { # COUNT
  cat <<YAML
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {name: request-headers, namespace: istio-system}
spec:
  compiledTemplate: authorization
  params:
    action:
      properties:
        x-plugin-deny: request.headers["x-plugin-deny"] | ""
YAML
  for i in $(seq 1 "$1"); do
    cat <<YAML
---
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: deny-$i, namespace: istio-system}
spec:
  compiledAdapter: wasm
  params:
    module: $module
    config: {header: x-plugin-deny, message: "denied by plugin $i"}
    limits: {checkDeadline: $deadline, memoryMib: 64}
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: deny-$i, namespace: istio-system}
spec:
  actions: [{handler: deny-$i, instances: [request-headers]}]
YAML
  done
  if [ "$1" = 0 ]; then
    # A rule for the instance, so that the config is not empty.
    cat <<YAML
---
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: allow, namespace: istio-system}
spec: {compiledAdapter: noop}
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: allow, namespace: istio-system}
spec:
  actions: [{handler: allow, instances: [request-headers]}]
YAML
  fi
}

port=$((20000 + RANDOM % 20000))
echo "handlers rss_loaded_kib rss_after_checks_kib ($(basename "$module"), $mixer)"
for count in 0 1 "$n"; do
  config "$count" > "$dir/config.yaml"
  "$mixer" serve --config "$dir/config.yaml" --no-watch --check-cache-size 0 \
    --grpc-addr 127.0.0.1:$port --http-addr 127.0.0.1:$((port + 1)) \
    --admin-addr 127.0.0.1:$((port + 2)) 2>"$dir/log" &
  pid=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$((port + 2))/readyz" >/dev/null 2>&1 && break
    sleep 0.5
  done
  loaded=$(rss $pid)
  for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://127.0.0.1:$((port + 1))/check" -H 'x-plugin-deny: true'
    curl -s -o /dev/null "http://127.0.0.1:$((port + 1))/check"
  done
  echo "$count $loaded $(rss $pid)"
  kill $pid; wait $pid 2>/dev/null || true
  port=$((port + 3))
done
