#!/bin/sh
# Generates the Python stubs of the adapter protocol and of Mixer v1 from the workspace's proto/
# folder into stubs/ (checked in: see README.md), or into OUT.
#   sh make_stubs.sh [OUT]
# Uses $PYTHON (default python3), which needs grpcio-tools (pip install -r requirements.txt).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
proto=$(cd "$here/../../proto" && pwd)
out=${1:-$here/stubs}
rm -rf "$out"
mkdir -p "$out"
cd "$proto"
"${PYTHON:-python3}" -m grpc_tools.protoc -I . --python_out="$out" --grpc_python_out="$out" \
    google/rpc/status.proto \
    istio/policy/v1beta1/*.proto \
    istio/mixer/adapter/model/v1beta1/*.proto \
    istio/mixer/v1/*.proto \
    mixer/template/*/template_handler_service.proto
echo "stubs in $out"
