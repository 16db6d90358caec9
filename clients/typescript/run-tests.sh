#!/usr/bin/env bash
# The TypeScript client's whole suite, as `.ci/test` runs it (after `cargo test`, which builds
# the slotd binary and the handler components the suite starts):
#   1. the dev dependencies (TypeScript and Node's types, pinned by package-lock.json), quietly;
#   2. the type check of the shipped declarations, as a Node project and as a browser project
#      sees them (tsc --noEmit over test/types/*.ts);
#   3. node --test: the client against live slotd processes (SLOTD_BIN, default
#      <repo>/target/debug/slotd) with the fixture handler and the Kling simulator.
# Exit status non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")"

major=$(node -p 'Number(process.versions.node.split(".")[0])')
if [ "$major" -lt 20 ]; then
  echo "run-tests.sh: the client needs Node 20 or later, found $(node --version)" >&2
  exit 1
fi

# npm ci only when node_modules is missing or older than the lock file.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "== npm ci (dev dependencies: typescript, @types/node)"
  npm ci --no-audit --no-fund --loglevel=error
fi

echo "== tsc --noEmit (the declarations as Node and browser projects see them)"
node_modules/.bin/tsc -p tsconfig.json
node_modules/.bin/tsc -p tsconfig.browser.json

echo "== node --test"
# Each test file starts the slotd processes it needs on free ports, so files run side by side.
exec node --test --test-concurrency="${SLOTD_TEST_CONCURRENCY:-3}" --test-timeout=180000 test/*.test.js
