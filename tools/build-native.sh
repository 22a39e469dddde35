#!/usr/bin/env bash
# Builds the Node-API addon in native/ against the headers of the node that runs the build
# (<prefix>/include/node), so node-gyp never tries to download headers (no network in CI).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(node -p 'require("path").resolve(process.execPath, "../..")')
args=(rebuild --directory native --loglevel=warn)
if [ -f "$prefix/include/node/node_api.h" ]; then
  args+=(--nodedir="$prefix")
fi
exec node node_modules/node-gyp/bin/node-gyp.js "${args[@]}"
