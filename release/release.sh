#!/usr/bin/env bash
# A release of wasm-ccm as operators install it: the manager for linux/amd64 and linux/arm64,
# its daemonless image for both under one OCI image index, the Helm chart with that index
# pinned by digest, both pushed to a registry and signed in cosign's format, and an SPDX
# SBOM (the Rust crates in the binary, the Debian packages in the image) attached to the
# image index as an OCI referrer. docs/src/contributing/releasing.md is the maintainer's page.
#
#   release/release.sh prepare 0.2.0                 # make release-prepare VERSION=0.2.0
#   release/release.sh publish 0.2.0 ghcr.io/acme --sign-key release.pem
#                                                    # make release VERSION=0.2.0 REGISTRY=...
#   release/release.sh check                         # make release-check
#
# prepare: sets the version everywhere it is written (Cargo.toml's workspace version and
# Cargo.lock, Chart.yaml's version, appVersion and image, the Containerfile's default, the
# install page's chart and image versions), moves the
# changelog's [Unreleased] section under [VERSION] - DATE, commits and tags vVERSION. It needs
# a clean tree and something under [Unreleased].
#
# publish: from a clean tree whose version, chart and changelog say VERSION, builds what the
# options do not give and pushes REGISTRY/wasm-ccm:VERSION (the index) and
# REGISTRY/charts/wasm-ccm:VERSION (the chart). Reproducible: the same commit gives the same
# binaries, images, index, chart archive and SBOM (mtimes and `created` are the commit's
# time); signatures differ (ECDSA), and so do helm's chart manifests (helm stamps the push
# time).
#
# check: the arm64 manager under qemu's user emulation: --version, `provider inspect` of
# simcloud and `provider call` of it against the cloud simulator.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

usage() {
    cat <<'EOF'
Usage: release/release.sh prepare VERSION
       release/release.sh publish VERSION REGISTRY [options]
       release/release.sh check [--binary PATH]

publish options:
  --sign-key FILE          sign the image index and the chart with this private key
                           (PKCS#8 PEM, ECDSA P-256; `wasm-ccm provider sign` takes the same)
  --unsigned               publish without signatures (a rehearsal); one of the two is required
  --platforms LIST         comma-separated, of linux/amd64 and linux/arm64 (default: both)
  --binary PLATFORM=PATH   package this binary for PLATFORM instead of building it; repeatable
  --insecure               the registry is plain HTTP (a local test registry)
  --registry-config FILE   registry credentials, a docker config JSON (as `skopeo login
                           --authfile FILE` writes it), given to skopeo, helm and wasm-ccm
                           alike; required but with --insecure
  --out DIR                where the artifacts are written, replaced if an earlier run's
                           (default: target/dist/VERSION)
  --allow-dirty            publish from a tree with uncommitted changes (not reproducible)
EOF
}

fail() {
    echo "release: $*" >&2
    exit 1
}

need() {
    command -v "$1" >/dev/null || fail "$1 is missing: $2"
}

# The workspace version, as Cargo.toml's [workspace.package] says it.
workspace_version() {
    sed -n '/^\[workspace.package\]/,/^\[/{s/^version = "\(.*\)"$/\1/p}' Cargo.toml
}

semver() {
    [[ "$1" =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] \
        || fail "VERSION $1 is not a semantic version X.Y.Z[-PRE]"
}

clean_tree() {
    [ -z "$(git status --porcelain)" ] \
        || fail "the tree has uncommitted changes ($1); commit or stash them first"
}

# --- prepare ------------------------------------------------------------------------------

prepare() {
    [ $# -eq 1 ] || { usage >&2; exit 2; }
    local version=$1 today current
    semver "$version"
    clean_tree "prepare commits the release"
    git rev-parse -q --verify "refs/tags/v$version" >/dev/null \
        && fail "the tag v$version exists already"
    grep -q "^## \[$version\]" CHANGELOG.md && fail "CHANGELOG.md has a [$version] section already"
    # What [Unreleased] holds: the lines up to the next section, blank lines aside.
    [ -n "$(sed -n '/^## \[Unreleased\]/,/^## \[/{/^## /d;/^\s*$/d;p}' CHANGELOG.md)" ] \
        || fail "CHANGELOG.md says nothing under [Unreleased]: write what changed first"
    current=$(workspace_version)
    today=$(date -u +%Y-%m-%d)
    if [ "$current" != "$version" ]; then
        sed -i "/^\[workspace.package\]/,/^\[/s/^version = \"$current\"$/version = \"$version\"/" Cargo.toml
        # Only the workspace's own crates change in the lock; nothing is fetched.
        cargo update --workspace --quiet
        sed -i -E "s/^version: .*/version: $version/; s/^appVersion: .*/appVersion: \"$version\"/; s#(image: wasm-ccm):[^ ]*#\\1:$version#" \
            charts/wasm-ccm/Chart.yaml
        sed -i -E "s/^ARG VERSION=.*/ARG VERSION=$version/; s/(-t wasm-ccm):[^ ]* /\\1:$version /" image/Containerfile
        sed -i -E "/--reuse-values/!s#(ghcr\\.io/acme/(charts/)?wasm-ccm(:| --version ))[0-9][^ ]*#\\1$version#g" \
            docs/src/operators/install.md
    fi
    sed -i "s/^## \[Unreleased\]$/## [Unreleased]\n\n## [$version] - $today/" CHANGELOG.md
    git add -A
    git commit -q -m "Release $version"
    git tag -a "v$version" -m "wasm-ccm $version"
    echo "release: $version prepared: commit $(git rev-parse --short HEAD), tag v$version;" \
        "publish it with make release VERSION=$version REGISTRY=..." >&2
}

# --- publish ------------------------------------------------------------------------------

# The Rust target and the machine name of a platform.
triple_of() {
    case "$1" in
        linux/amd64) echo x86_64-unknown-linux-gnu ;;
        linux/arm64) echo aarch64-unknown-linux-gnu ;;
        *) fail "platform $1: linux/amd64 or linux/arm64" ;;
    esac
}

native_platform() {
    echo "linux/$(dpkg --print-architecture)"
}

# Build the manager for `platform` (release profile, locked); arm64 on amd64 with Debian's
# cross compiler, which also builds the crates' C (ring, wasmtime's helpers).
build_binary() {
    local platform=$1 triple
    triple=$(triple_of "$platform")
    grep -qx "$triple" <<<"$(rustup target list --installed)" || rustup target add "$triple" >&2
    [ "$(native_platform)" = linux/amd64 ] \
        || fail "building the manager for $platform needs an amd64 Debian host; give --binary $platform=PATH"
    local env=()
    if [ "$platform" != "$(native_platform)" ]; then
        local gcc=${triple%%-*}-linux-gnu-gcc upper
        need "$gcc" "make release installs Debian's gcc-${triple%%-*}-linux-gnu"
        upper=$(tr 'a-z-' 'A-Z_' <<<"$triple")
        env=("CC_${triple//-/_}=$gcc" "CARGO_TARGET_${upper}_LINKER=$gcc")
    fi
    echo "release: building the manager for $platform ($triple)" >&2
    env "${env[@]}" cargo build --release --locked -p wasm-ccm --target "$triple" >&2
    echo "$root/target/$triple/release/wasm-ccm"
}

# What `binary` (for `platform`) says its version is.
binary_version() {
    local platform=$1 binary=$2
    if [ "$platform" = "$(native_platform)" ]; then
        "$binary" --version | awk '{ print $2 }'
    else
        local arch gnu
        arch=$(triple_of "$platform")
        arch=${arch%%-*}
        gnu=$arch-linux-gnu
        need "qemu-$arch-static" "it runs the $platform binary (Debian's qemu-user-static)"
        "qemu-$arch-static" -L "/usr/$gnu" "$binary" --version | awk '{ print $2 }'
    fi
}

publish() {
    [ $# -ge 2 ] || { usage >&2; exit 2; }
    local version=$1 registry=$2
    shift 2
    local sign_key= unsigned=false platforms=linux/amd64,linux/arm64 insecure=false
    local registry_config= out= allow_dirty=false
    declare -A binaries=()
    while [ $# -gt 0 ]; do
        case "$1" in
            --sign-key) sign_key=$(realpath -m "$2"); shift 2 ;;
            --unsigned) unsigned=true; shift ;;
            --platforms) platforms=$2; shift 2 ;;
            --binary)
                [[ "$2" == */*=* ]] || fail "--binary $2: PLATFORM=PATH, e.g. linux/amd64=target/release/wasm-ccm"
                binaries[${2%%=*}]=$(realpath -m "${2#*=}")
                shift 2 ;;
            --insecure) insecure=true; shift ;;
            --registry-config) registry_config=$(realpath -m "$2"); shift 2 ;;
            --out) out=$2; shift 2 ;;
            --allow-dirty) allow_dirty=true; shift ;;
            -h | --help) usage; exit 0 ;;
            *) fail "publish: unknown argument $1 (release/release.sh --help)" ;;
        esac
    done
    semver "$version"
    [[ "$registry" =~ ^[A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9._/-]+)?$ ]] \
        || fail "REGISTRY $registry: HOST[:PORT][/PATH], e.g. ghcr.io/acme or 127.0.0.1:5000/wasm-ccm"
    local host=${registry%%/*}
    if [ "$insecure" = true ]; then
        [[ "$host" == *:* ]] || fail "--insecure needs the registry's port: $host:PORT"
    elif [ -z "$registry_config" ]; then
        fail "give --registry-config FILE (a docker config JSON with credentials for $host, e.g. from skopeo login --authfile FILE $host): skopeo, helm and wasm-ccm all push with it"
    fi
    [ -z "$registry_config" ] || [ -f "$registry_config" ] \
        || fail "--registry-config $registry_config: no such file"
    if [ "$unsigned" = false ]; then
        [ -n "$sign_key" ] || fail "give --sign-key FILE (or --unsigned for a rehearsal)"
        [ -f "$sign_key" ] || fail "--sign-key $sign_key: no such file"
    fi
    [ "$allow_dirty" = true ] || clean_tree "a release is built from a commit"
    [ "$(workspace_version)" = "$version" ] \
        || fail "the workspace version is $(workspace_version), not $version: run make release-prepare VERSION=$version first"
    grep -q "^## \[$version\] - " CHANGELOG.md \
        || fail "CHANGELOG.md has no [$version] section: run make release-prepare VERSION=$version first"
    grep -qx "version: $version" charts/wasm-ccm/Chart.yaml \
        || fail "charts/wasm-ccm/Chart.yaml's version is not $version: run make release-prepare VERSION=$version first"
    grep -qx "v$version" <<<"$(git tag --points-at HEAD)" \
        || fail "HEAD is not tagged v$version: publish the commit make release-prepare VERSION=$version made"
    for platform in "${!binaries[@]}"; do
        [[ ",$platforms," == *",$platform,"* ]] || fail "--binary $platform: not one of --platforms $platforms"
    done
    need skopeo "it pushes the image (make setup installs it)"
    need python3 "it writes the image index and the SBOM"
    local helm=$root/target/test-tools/helm/helm
    [ -x "$helm" ] || helm=$(command -v helm) || fail "helm is missing (make setup installs it)"

    out=${out:-$root/target/dist/$version}
    # Replaced only if it is an earlier run's: a mistyped --out must not delete a tree.
    if [ -e "$out" ] && [ ! -f "$out/.wasm-ccm-release" ] && [ -n "$(ls -A "$out")" ]; then
        fail "--out $out exists and is not an earlier release's output: give a new or empty directory"
    fi
    rm -rf "$out"
    mkdir -p "$out"
    touch "$out/.wasm-ccm-release"
    out=$(realpath "$out")
    export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
    local revision created
    revision=$(git rev-parse HEAD)
    created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)

    # The binaries, each checked to be this version, and one image per platform.
    local manager= layouts=() packages=() crates=()
    IFS=, read -r -a platform_list <<<"$platforms"
    for platform in "${platform_list[@]}"; do
        local triple binary arch
        triple=$(triple_of "$platform")
        arch=${platform#linux/}
        binary=${binaries[$platform]:-}
        [ -n "$binary" ] || binary=$(build_binary "$platform")
        [ -x "$binary" ] || fail "no executable binary for $platform at $binary"
        local reported
        reported=$(binary_version "$platform" "$binary")
        [ "$reported" = "$version" ] \
            || fail "the $platform binary $binary is version ${reported:-unknown}, not $version"
        [ "$platform" != "$(native_platform)" ] || manager=$binary
        install -D -m 0755 "$binary" "$out/bin/$arch/wasm-ccm"
        image/build.sh --binary "$binary" --platform "$platform" --layout "$out/image-$arch" \
            --tag "$version" --revision "$revision" --packages "$out/packages-$arch.txt"
        layouts+=("$platform=$out/image-$arch")
        packages+=(--packages "$platform=$out/packages-$arch.txt")
        cargo tree --locked -p wasm-ccm -e normal --target "$triple" --prefix none \
            --format '{p}|{l}|{r}' >"$out/crates-$arch.txt"
        crates+=(--crates "$platform=$out/crates-$arch.txt")
    done
    [ -n "$manager" ] || manager=$(build_binary "$(native_platform)")

    # One index naming every platform's image, with the release's annotations.
    local index_digest
    index_digest=$(python3 release/oci_index.py --layout "$out/image" --tag "$version" \
        --annotation "org.opencontainers.image.version=$version" \
        --annotation "org.opencontainers.image.revision=$revision" \
        --annotation "org.opencontainers.image.created=$created" \
        "${layouts[@]}")

    local image=$registry/wasm-ccm
    local tls=() helm_flags=() ccm_flags=()
    if [ "$insecure" = true ]; then
        tls=(--dest-tls-verify=false)
        helm_flags+=(--plain-http)
        ccm_flags+=(--insecure-registry "$host")
    fi
    if [ -n "$registry_config" ]; then
        tls+=(--dest-authfile "$registry_config")
        helm_flags+=(--registry-config "$registry_config")
        ccm_flags+=(--registry-config "$registry_config")
    fi
    echo "release: pushing $image:$version ($index_digest)" >&2
    skopeo copy --all --preserve-digests --digestfile "$out/index.digest" "${tls[@]}" \
        "oci:$out/image:$version" "docker://$image:$version" >&2
    [ "$(cat "$out/index.digest")" = "$index_digest" ] \
        || fail "the registry holds $image:$version as $(cat "$out/index.digest"), not $index_digest"

    # The chart, its default image pinned to the index by digest.
    local chart=$out/chart/wasm-ccm
    mkdir -p "$out/chart"
    cp -R charts/wasm-ccm "$chart"
    # Links to the source at the tag, as image/build.sh labels the image (git remote origin).
    local source
    source=$(git remote get-url origin 2>/dev/null | sed -E 's#^git@([^:]+):#https://\1/#; s#\.git$##' || true)
    [[ "$source" == https://* ]] || source=
    python3 release/pin_chart.py "$chart" "$image" "$index_digest" "$version" ${source:+"$source"}
    find "$chart" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
    local linted
    linted=$("$helm" lint "$chart" 2>&1) || fail "helm lint of the pinned chart: $linted"
    "$helm" package "$chart" --destination "$out" >/dev/null
    local archive=$out/wasm-ccm-$version.tgz
    [ -f "$archive" ] || fail "helm package wrote no $archive"
    echo "release: pushing oci://$registry/charts/wasm-ccm:$version" >&2
    local pushed chart_digest
    pushed=$("$helm" push "$archive" "oci://$registry/charts" "${helm_flags[@]}" 2>&1) \
        || fail "helm push: $pushed"
    chart_digest=$(sed -nE 's/^Digest: (sha256:[0-9a-f]{64})$/\1/p' <<<"$pushed")
    [ -n "$chart_digest" ] || fail "helm push printed no digest: $pushed"

    # Signatures, then the SBOM as the index's referrer.
    if [ "$unsigned" = false ]; then
        "$manager" artifact sign "oci://$image@$index_digest" --key "$sign_key" "${ccm_flags[@]}" >/dev/null
        "$manager" artifact sign "oci://$registry/charts/wasm-ccm@$chart_digest" --key "$sign_key" \
            "${ccm_flags[@]}" >/dev/null
    fi
    local sbom=$out/wasm-ccm-$version.spdx.json
    python3 release/sbom.py --version "$version" --created "$created" --subject "$image@$index_digest" \
        "${crates[@]}" "${packages[@]}" >"$sbom"
    local sbom_digest
    sbom_digest=$("$manager" artifact attach "oci://$image@$index_digest" --file "$sbom" \
        --artifact-type application/spdx+json "${ccm_flags[@]}")
    # The SBOM's referrer is signed too: `artifact attached --key` reads only signed ones.
    if [ "$unsigned" = false ]; then
        "$manager" artifact sign "oci://$image@$sbom_digest" --key "$sign_key" "${ccm_flags[@]}" >/dev/null
    fi

    cat >"$out/release.txt" <<EOF
version: $version
revision: $revision
image: $image:$version@$index_digest
chart: oci://$registry/charts/wasm-ccm:$version@$chart_digest
sbom: $image@$sbom_digest (application/spdx+json, referrer of the image index)
signed: $([ "$unsigned" = true ] && echo no || echo "yes, $(basename "$sign_key")")
platforms: $platforms
EOF
    cat "$out/release.txt"
}

# --- check --------------------------------------------------------------------------------

# The arm64 manager (built if not given) under qemu: its version, the same from inside its
# image (the image's loader and libraries only), simcloud inspected (the component compiled
# by Cranelift for arm64) and one call of it through the egress gate to the cloud simulator,
# running natively on loopback.
check() {
    local binary=
    while [ $# -gt 0 ]; do
        case "$1" in
            --binary) binary=$(realpath -m "$2"); shift 2 ;;
            *) fail "check: unknown argument $1 (release/release.sh --help)" ;;
        esac
    done
    need qemu-aarch64-static "it runs the arm64 manager (make release-check installs qemu-user-static)"
    [ -n "$binary" ] || binary=$(build_binary linux/arm64)
    local version run=(qemu-aarch64-static -L /usr/aarch64-linux-gnu "$binary")
    version=$("${run[@]}" --version)
    [ "$version" = "wasm-ccm $(workspace_version)" ] \
        || fail "the arm64 manager says \"$version\", not wasm-ccm $(workspace_version)"
    echo "release check: $version runs under qemu-aarch64" >&2

    cargo build --locked --quiet -p cloud-sim
    cargo build --locked --quiet --release --target wasm32-wasip2 -p simcloud
    local simcloud=$root/target/wasm32-wasip2/release/simcloud.wasm
    work=$(mktemp -d)
    trap '[ -z "${sim_pid:-}" ] || kill "$sim_pid" 2>/dev/null; rm -rf "$work"' EXIT

    # The arm64 image, its manager run with nothing but the image's own loader and libraries.
    image/build.sh --binary "$binary" --platform linux/arm64 --layout "$work/image" --tag check 2>/dev/null
    local layer
    layer=$(python3 -c 'import json, sys
index = json.load(open(sys.argv[1] + "/index.json"))
manifest = index["manifests"][0]["digest"].split(":")[1]
manifest = json.load(open(sys.argv[1] + "/blobs/sha256/" + manifest))
print(manifest["layers"][0]["digest"].split(":")[1])' "$work/image")
    mkdir "$work/rootfs"
    tar -xzf "$work/image/blobs/sha256/$layer" -C "$work/rootfs"
    version=$(qemu-aarch64-static -L "$work/rootfs" "$work/rootfs/usr/local/bin/wasm-ccm" --version) \
        || fail "the arm64 image's manager does not run with the image's libraries"
    echo "release check: the arm64 image runs $version with its own loader and libraries" >&2

    target/debug/cloud-sim --listen 127.0.0.1:0 --token s3cret --instance node-1 \
        >"$work/sim" 2>"$work/sim.log" &
    sim_pid=$!
    local url=
    for _ in $(seq 100); do
        url=$(sed -n 's/^cloud-sim listening on //p' "$work/sim")
        [ -z "$url" ] || break
        sleep 0.1
    done
    [ -n "$url" ] || fail "the cloud simulator did not start"

    "${run[@]}" provider inspect "$simcloud" >"$work/inspect" \
        || fail "provider inspect failed under qemu: $(cat "$work/inspect")"
    grep -q "satisfies the host contract: yes" "$work/inspect" \
        || fail "provider inspect under qemu: $(cat "$work/inspect")"
    echo "release check: provider inspect compiled simcloud for arm64" >&2

    echo "{\"api_url\": \"$url\"}" >"$work/cloud.json"
    SIM_TOKEN=s3cret "${run[@]}" provider call "$simcloud" instance-metadata \
        --args '{"node": {"name": "node-1"}}' --config "$work/cloud.json" \
        --allow "$url" --credential "$url=bearer:env:SIM_TOKEN" >"$work/call" \
        || fail "provider call failed under qemu: $(cat "$work/call")"
    grep -q '"providerID": "simcloud://' "$work/call" \
        || fail "provider call under qemu answered: $(cat "$work/call")"
    echo "release check: provider call reached the cloud simulator: $(tr -d ' \n' <"$work/call" | head -c 160)" >&2
    echo "release check: passed" >&2
}

case "${1:-}" in
    prepare) shift; prepare "$@" ;;
    publish) shift; publish "$@" ;;
    check) shift; check "$@" ;;
    -h | --help) usage ;;
    *) usage >&2; exit 2 ;;
esac
