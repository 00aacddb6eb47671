#!/usr/bin/env bash
# One device-machine call of this repository: links the KernelBench tasks where the tests and the sweep look
# (../shared, which does not travel: the checkout carries them as shared/), then runs bench/gpu_session.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -e ../shared/kernelbench ] || ln -sfn "$PWD/shared" ../shared
exec bash bench/gpu_session.sh
