#!/usr/bin/env bash
# Installs what Strata's build, tests and local cluster need, when missing: Debian packages
# (as root; uses sudo otherwise) and the npm dependencies. Idempotent and quiet when all is there.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=()
command -v etcd >/dev/null 2>&1 || packages+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || packages+=(etcd-client)
command -v setpriv >/dev/null 2>&1 || packages+=(util-linux)
command -v python3 >/dev/null 2>&1 || packages+=(python3)
command -v make >/dev/null 2>&1 || packages+=(make)
command -v g++ >/dev/null 2>&1 || packages+=(g++)
if [ ${#packages[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${packages[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi

node -e 'const [a,b]=process.versions.node.split(".").map(Number); if (a<20||(a===20&&b<19)) { console.error("setup: Node.js 20.19+ is required, found "+process.version); process.exit(1) }'

# npm ci when node_modules is missing or older than the lock file.
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
fi
