#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
# The S3 tests run against moto_server (PyPI `moto[server]`), which they start themselves on
# 127.0.0.1: install it if it is missing, and make those tests fail rather than skip.
if ! moto_server --help >/dev/null 2>&1; then
    python3 -m pip install --quiet 'moto[server]'
fi
export DEDELTA_REQUIRE_S3=1
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
