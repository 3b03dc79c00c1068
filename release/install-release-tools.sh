#!/usr/bin/env bash
# Installs what a release builds and checks with besides `make setup`'s tools: Debian's
# cross compiler for arm64 (gcc-aarch64-linux-gnu, which brings the arm64 C library the
# image ships, libc6-arm64-cross), qemu's user emulation (qemu-user-static: the arm64
# manager's version and release-check), and Rust's aarch64-unknown-linux-gnu target. Each is
# skipped when it is there.
set -euo pipefail

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null; then
        sudo "$@"
    else
        echo "install-release-tools: not root and no sudo; run as root: $*" >&2
        return 1
    fi
}

packages=()
command -v aarch64-linux-gnu-gcc >/dev/null || packages+=(gcc-aarch64-linux-gnu)
command -v qemu-aarch64-static >/dev/null || packages+=(qemu-user-static)
if [ ${#packages[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get install -y -q "${packages[@]}" || {
        as_root apt-get update -q
        as_root apt-get install -y -q "${packages[@]}"
    }
fi
grep -qx aarch64-unknown-linux-gnu <<<"$(rustup target list --installed)" \
    || rustup target add aarch64-unknown-linux-gnu
