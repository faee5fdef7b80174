#!/usr/bin/env bash
# Installs what agx needs on a Debian machine: fuse3 (fusermount3, /etc/fuse.conf), git,
# python3 (benchmarks and demo), and checks the Rust toolchain. Safe to run repeatedly.
set -euo pipefail

need=()
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
command -v git >/dev/null 2>&1 || need+=(git)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v tar >/dev/null 2>&1 || need+=(tar)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
command -v attr >/dev/null 2>&1 || need+=(attr)

if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup: missing packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
        exit 1
    fi
    echo "setup: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ ! -e /dev/fuse ]; then
    modprobe fuse 2>/dev/null || true
fi
if [ ! -e /dev/fuse ]; then
    echo "setup: /dev/fuse is missing and 'modprobe fuse' did not create it" >&2
    exit 1
fi

# Debian's udev rule makes /dev/fuse world-usable (0666): fusermount3 opens it as the
# calling user. Some containers create it 0600; restore the usual mode when we can.
if [ "$(id -u)" -eq 0 ] && [ "$(stat -c %a /dev/fuse)" != 666 ]; then
    echo "setup: making /dev/fuse usable by non-root users (mode 0666, as udev does)"
    chmod 0666 /dev/fuse
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found: install a Rust toolchain (1.85 or newer), e.g. with rustup" >&2
    exit 1
fi
