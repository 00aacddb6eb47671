#!/usr/bin/env bash
# Packs Ray for the GPU machine, which has no network and takes at most 64 MiB per call: Ray's wheel
# (79 MB) is unpacked, its Java jars (not used) left out, and the rest packed with xz into
# .whl/ray.tar.xz (about 33 MB); the wheels of Ray's dependencies that the machine's image lacks go
# beside it. bench/gpu_session.sh (RAY_S > 0) unpacks them into /tmp/site.
#   bash bench/pack_ray.sh [VERSION]      # then: carry .whl (ignored by git: .git/info/exclude)
set -euo pipefail
VERSION=${1:-2.60.0}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p .whl
fetch() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$@"
}
fetch "$WORK" "ray==$VERSION"
(cd "$WORK" && mkdir tree && cd tree && unzip -q ../ray-*.whl && rm -rf ray/jars && tar cf - . | xz -6 -T2) \
  > .whl/ray.tar.xz
fetch .whl jsonschema referencing rpds-py jsonschema-specifications
ls -l .whl
