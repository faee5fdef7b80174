#!/usr/bin/env bash
# The test command: installs what is missing, then runs the gates and the whole suite
# (formatting, clippy with warnings as errors, unit and integration tests that mount real
# FUSE filesystems). CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --locked -- --test-threads="${AGX_TEST_THREADS:-4}"
