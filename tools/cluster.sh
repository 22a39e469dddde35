#!/usr/bin/env bash
# npm run cluster -- [--home DIR] [--api-port PORT] [--agent auto|host|guest]: install what is
# missing, build, and run a local cluster (etcd, control plane, agent) in the foreground; where
# the kernel has no nvmet the agent runs in a QEMU guest (the e2e lab installs and prepares what
# that needs on first use). See tools/local-cluster.ts.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
npm run --silent build
exec node dist/tools/local-cluster.js "$@"
