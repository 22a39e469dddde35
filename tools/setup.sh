#!/usr/bin/env bash
# Installs what Strata's build, tests and local cluster need, when missing: the Debian packages
# of tools/debian-packages.txt (as root; sudo otherwise) and the npm dependencies.
# Idempotent and quiet when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=()
while read -r package command; do
  case "$package" in ''|'#'*|'['*) continue ;; esac
  case "$command" in
    /*) [ -e "$command" ] || packages+=("$package") ;;
    *) command -v "$command" >/dev/null 2>&1 || [ -x "/usr/sbin/$command" ] || [ -x "/sbin/$command" ] || packages+=("$package") ;;
  esac
done < tools/debian-packages.txt
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

# The e2e lab's kernels: Debian 13's 6.12 (the default) and Debian 12's 6.1 (CI runs the data-path
# suite on it too), fetched and their guest initramfs built once, then cached (docs/e2e.md).
# STRATA_E2E=0 skips this, as it skips the e2e suites.
if [ "${STRATA_E2E:-1}" != 0 ]; then
  npx tsc -p tools/tsconfig.lab.json
  node dist/test/e2e/lab/setup.js --kernels trixie,bookworm | sed -n 's/^\(kernel\|initramfs\|userland\)/setup: lab &/p'
fi
