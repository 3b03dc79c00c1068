#!/usr/bin/env bash
# Installs what a release builds and checks with besides `make setup`'s tools: Debian's
# cross compiler for arm64 (gcc-aarch64-linux-gnu, which brings the arm64 C library the
# image ships, libc6-arm64-cross), qemu's user emulation (qemu-user-static: the arm64
# manager's version and release-check), and Rust's aarch64-unknown-linux-gnu target. Each is
# skipped when it is there.
set -euo pipefail

cd "$(dirname "$0")/.."
# apt_install: tests/apt-install.sh.
. tests/apt-install.sh

packages=()
command -v aarch64-linux-gnu-gcc >/dev/null || packages+=(gcc-aarch64-linux-gnu)
command -v qemu-aarch64-static >/dev/null || packages+=(qemu-user-static)
if [ ${#packages[@]} -gt 0 ]; then
    apt_install "${packages[@]}"
fi
grep -qx aarch64-unknown-linux-gnu <<<"$(rustup target list --installed)" \
    || rustup target add aarch64-unknown-linux-gnu
