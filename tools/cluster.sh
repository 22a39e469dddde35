#!/usr/bin/env bash
# npm run cluster -- [--home DIR] [--api-port PORT]: install what is missing, build, and run a
# local cluster (etcd, control plane, agent) in the foreground. See tools/local-cluster.ts.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
npm run --silent build
exec node dist/tools/local-cluster.js "$@"
