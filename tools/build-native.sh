#!/usr/bin/env bash
# Builds the Node-API addon in native/ against the headers of the node that runs the build
# (<prefix>/include/node), so node-gyp never tries to download headers (no network in CI),
# then the ublk server (native/ublk/, native/README.md) when liburing's headers are there.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(node -p 'require("path").resolve(process.execPath, "../..")')
args=(rebuild --directory native --loglevel=warn)
if [ -f "$prefix/include/node/node_api.h" ]; then
  args+=(--nodedir="$prefix")
fi
# node-gyp's rebuild empties native/build, so the ublk server is built after it.
node node_modules/node-gyp/bin/node-gyp.js "${args[@]}"
# Optional like the addon's use: without the server, the agent reports QoS as not enforceable
# on the node. tools/setup.sh installs liburing-dev (tools/debian-packages.txt).
if [ -f /usr/include/liburing.h ]; then
  make --no-print-directory -s -C native/ublk
else
  echo "build-native: /usr/include/liburing.h missing (Debian: liburing-dev): strata-ublk not built" >&2
fi
