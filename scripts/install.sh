#!/usr/bin/env bash
# Builds agx and installs it: /usr/local/bin/agx, the mount(8) helper as
# /sbin/mount.fuse.agx, and the systemd user unit template under
# /usr/local/lib/systemd/user/. PREFIX overrides /usr/local.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${PREFIX:-/usr/local}
scripts/setup.sh
cargo build --release --locked
install -D -m 0755 target/release/agx "$prefix/bin/agx"
install -D -m 0755 mount-helpers/mount.agx "$prefix/sbin/mount.agx"
ln -sf "$prefix/sbin/mount.agx" /sbin/mount.fuse.agx
install -D -m 0644 mount-helpers/agx@.service "$prefix/lib/systemd/user/agx@.service"
install -D -m 0644 README.md "$prefix/share/doc/agx/README.md"
echo "installed agx to $prefix/bin/agx, mount helper /sbin/mount.fuse.agx, user unit agx@.service"
