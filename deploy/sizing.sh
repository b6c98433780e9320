#!/usr/bin/env bash
# Sizing figures for deploy/README.md, measured on this machine:
#   - CPU per 1000 checks/s: the mixer's CPU time (utime + stime from /proc/PID/stat) over a
#     fixed-rate run of mixer-bench, per second of the run;
#   - memory: RSS at rest (after start) and at load (VmRSS at the end of the run, VmHWM peak);
#   - reload-to-effective: a config change laid out as the kubelet writes a ConfigMap volume
#     (a new timestamped folder, `..data` swapped by rename(2)) until forward-auth answers by
#     the new rule.
#
# Usage: deploy/sizing.sh [RATE...]   (default rates: 1000 2000)
# Needs: cargo build --release -p mixer-server --bin mixer -p mixer-bench --bin mixer-bench
set -euo pipefail
cd "$(dirname "$0")/.."
mixer=${MIXER_BIN:-target/release/mixer}
bench=${MIXER_BENCH_BIN:-target/release/mixer-bench}
duration=${SIZING_DURATION:-20s}
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(1000 2000)
for b in "$mixer" "$bench"; do
  [ -x "$b" ] || { echo "$b missing: cargo build --release -p mixer-server --bin mixer -p mixer-bench --bin mixer-bench" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT

# The base overlay's config (policies/default), in a ConfigMap-shaped folder.
vol=$work/config
mkdir -p "$vol/..2000_01_01_00_00_00.000000001"
cp policies/default/config/default.yaml "$vol/..2000_01_01_00_00_00.000000001/config.yaml"
ln -s ..2000_01_01_00_00_00.000000001 "$vol/..data"
ln -s ..data/config.yaml "$vol/config.yaml"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
grpc=127.0.0.1:$(port); http=127.0.0.1:$(port); admin=127.0.0.1:$(port)
"$mixer" serve --config "$vol" --grpc-addr "$grpc" --http-addr "$http" --admin-addr "$admin" \
  ${MIXER_ARGS:-} 2>"$work/mixer.log" &
pid=$!
until curl -sf "http://$admin/readyz" >/dev/null; do sleep 0.05; done
sleep 2

ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
status_kb() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$pid/status"; }
hz=$(getconf CLK_TCK)
echo "machine: $(nproc) cores, $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "mixer: $("$mixer" --version), pid $pid"
echo "rss at rest: $(status_kb VmRSS) kB"

for rate in "${rates[@]}"; do
  for target in ext-authz forward-auth; do
    addr=$grpc; [ $target = forward-auth ] && addr=$http
    before=$(ticks)
    start=$(date +%s.%N)
    out=$("$bench" --pin --threads 1 run --target $target --addr "$addr" --rate "$rate" \
      --duration "$duration" --warmup 0s --concurrency 16)
    end=$(date +%s.%N)
    after=$(ticks)
    python3 - "$target" "$rate" "$before" "$after" "$start" "$end" "$hz" "$(status_kb VmRSS)" "$(status_kb VmHWM)" "$out" <<'PY'
import sys
target, rate, before, after, start, end, hz, rss, hwm, out = sys.argv[1:]
cpu = (int(after) - int(before)) / int(hz)
wall = float(end) - float(start)
print(f"{target} at {rate}/s for {wall:.1f} s: mixer CPU {cpu:.2f} s = "
      f"{cpu / wall:.3f} cores, {cpu / wall / (int(rate) / 1000):.3f} cores per 1000 checks/s; "
      f"rss {rss} kB (peak {hwm} kB)")
print("  mixer-bench: " + out.strip().replace("\n", "\n  mixer-bench: "))
PY
  done
done

# Reload-to-effective: a rule denying x-sizing: N, as the kubelet swaps a ConfigMap volume.
times=()
for n in 1 2 3 4 5; do
  new="..2000_01_01_00_00_0$n.000000001"
  mkdir "$vol/$new"
  { cat policies/default/config/default.yaml; cat <<YAML
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: sizing, namespace: istio-system}
spec:
  match: (request.headers["x-sizing"] | "") == "$n"
  actions: [{handler: deny-by-header, instances: [denyrequest]}]
YAML
  } > "$vol/$new/config.yaml"
  old=$(readlink "$vol/..data")
  t0=$(date +%s%N)
  ln -s "$new" "$vol/..data_tmp" && mv -T "$vol/..data_tmp" "$vol/..data"
  rm -rf "${vol:?}/$old"
  until [ "$(curl -s -o /dev/null -w '%{http_code}' -H "x-sizing: $n" "http://$http/check")" = 403 ]; do
    sleep 0.01
    if [ $(( ($(date +%s%N) - t0) / 1000000 )) -gt 10000 ]; then
      echo "reload $n: not effective within 10 s" >&2; exit 1
    fi
  done
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  times+=("$ms")
  sleep 0.5
done
echo "reload to effective (ConfigMap ..data swap, 5 times): ${times[*]} ms"
echo "rss after: $(status_kb VmRSS) kB (peak $(status_kb VmHWM) kB)"
