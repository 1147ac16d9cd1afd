#!/bin/sh
# Regenerate core/lowerkit/serialization/lowerkit_pb2.py from lowerkit.proto.
#
#   scripts/gen_proto.sh            # writes the committed file in place
#   scripts/gen_proto.sh OUT_DIR    # writes OUT_DIR/lowerkit/serialization/lowerkit_pb2.py
#
# Needs grpcio-tools (it bundles protoc); PYTHON picks the interpreter (default: python).
# The proto is compiled relative to core/ so its descriptor is registered under the
# unique name "lowerkit/serialization/lowerkit.proto".
set -eu
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/core}"
mkdir -p "$out"
cd "$root"
"${PYTHON:-python}" -m grpc_tools.protoc -I core --python_out="$out" \
    core/lowerkit/serialization/lowerkit.proto
