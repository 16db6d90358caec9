#!/usr/bin/env bash
# The Python client's suite against a live slotd: installs the package (as a user would,
# `pip install ./clients/python`, with its test extra) into target/venv, then runs pytest,
# which starts the real slotd binary, the Kling simulator, and runs the examples.
#
#   bash clients/python/run-tests.sh [pytest args...]
#
# Needs the built binary (SLOTD_BIN, default target/debug/slotd) and the handler components
# the host's build places (plugins/kling-video.wasm, target/wasm-plugins/.../fixture.wasm):
# `cargo test --workspace --no-run` (or .ci/test's `cargo test`) makes them.
set -euo pipefail
cd "$(dirname "$0")/../.."

venv=target/venv
if [ ! -x "$venv/bin/python" ]; then
  echo "== making $venv"
  mkdir -p target
  python3 -m venv --clear "$venv"
fi
echo "== installing ./clients/python[test] into $venv"
# Not editable: the suite tests the package as `pip install ./clients/python` installs it.
# setuptools builds in the tree: a stale build/ could ship files since removed.
rm -rf clients/python/build
"$venv/bin/pip" install --quiet --disable-pip-version-check "./clients/python[test]"
rm -rf clients/python/build clients/python/src/slotd.egg-info

echo "== pytest (clients/python/tests)"
exec "$venv/bin/python" -m pytest clients/python/tests -p no:cacheprovider "$@"
