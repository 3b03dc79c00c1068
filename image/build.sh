#!/usr/bin/env bash
# Builds the manager's container image without a container daemon: a distroless-style root
# filesystem made from scratch (the wasm-ccm binary, exactly the shared libraries `ldd` names
# with the dynamic loader, the CA bundle, passwd/group with the non-root user 65532, /tmp,
# nsswitch.conf and the Debian copyright files of what it copies; no shell, no package
# manager) packed as one layer with GNU tar and turned into an OCI image with umoci; skopeo
# pushes it. image/Containerfile is the same build for people with a daemon.
#
# Reproducible: every file has the mtime of SOURCE_DATE_EPOCH (default: the commit time of
# git HEAD), owners are numeric and entries sorted, and the config's `created` is that time,
# so the same binary and commit give the same image digest.
#
#   image/build.sh                                   # release binary -> target/image/oci
#   image/build.sh --push ghcr.io/acme/wasm-ccm:0.1.0
#   image/build.sh --binary PATH --push 127.0.0.1:5000/wasm-ccm:dev --insecure
#   image/build.sh --platform linux/arm64 --binary target/aarch64-unknown-linux-gnu/release/wasm-ccm
#
# An image for another architecture than the machine's (release/release.sh builds arm64 on
# amd64) takes its libraries from Debian's cross sysroot (/usr/aarch64-linux-gnu, from
# libc6-arm64-cross, which gcc-aarch64-linux-gnu installs) and puts them where that
# architecture's Debian has them.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: image/build.sh [options]

  --binary PATH      the wasm-ccm binary to package (default: target/release/wasm-ccm,
                     built with `cargo build --release --locked -p wasm-ccm` if missing)
  --layout DIR       the OCI image layout to write (default: target/image/oci; replaced)
  --tag TAG          the tag in the layout (default: the binary's version)
  --platform P       linux/amd64 or linux/arm64: what the binary is built for (default: this
                     machine's); checked against the binary
  --packages FILE    also write the Debian packages whose files ship, one line each:
                     NAME VERSION ARCHITECTURE (release/release.sh's SBOM reads it)
  --push REF         also push to REF (REGISTRY/REPO:TAG) with skopeo; log in first with
                     `skopeo login REGISTRY` (or set REGISTRY_AUTH_FILE)
  --insecure         push over plain HTTP / without verifying TLS (a local test registry)
  --source URL       org.opencontainers.image.source (default: git remote `origin`)
  --revision SHA     org.opencontainers.image.revision (default: git HEAD)
  -h, --help         this text

Environment: SOURCE_DATE_EPOCH fixes file mtimes and `created` (default: HEAD's commit time).
Needs umoci, skopeo (for --push), GNU tar, ldd, readelf and dpkg-query: `make setup` installs
them.
EOF
}

# Paths given on the command line are the caller's; defaults are in the repository.
root=$(cd "$(dirname "$0")/.." && pwd)

# The non-root user the manager runs as: distroless's `nonroot`.
USER_ID=65532
BINARY_PATH=/usr/local/bin/wasm-ccm
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
METRICS_PORT=10258

binary=
layout=$root/target/image/oci
tag=
platform=linux/$(dpkg --print-architecture)
packages_out=
push=
insecure=false
source_url=
revision=
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) binary=$2; shift 2 ;;
        --layout) layout=$2; shift 2 ;;
        --tag) tag=$2; shift 2 ;;
        --platform) platform=$2; shift 2 ;;
        --packages) packages_out=$2; shift 2 ;;
        --push) push=$2; shift 2 ;;
        --insecure) insecure=true; shift ;;
        --source) source_url=$2; shift 2 ;;
        --revision) revision=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "image/build.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done

fail() {
    echo "image/build.sh: $*" >&2
    exit 1
}

need() {
    command -v "$1" >/dev/null \
        || fail "$1 is missing: $2 (\`make setup\` installs it)"
}
need umoci "it builds the image"
need ldd "it lists the binary's shared libraries"
need readelf "it reads the binary's architecture and, for another architecture, its libraries"
need dpkg-query "it finds the Debian packages whose copyright files ship"
[ -z "$push" ] || need skopeo "it pushes the image"
[ -f "$CA_BUNDLE" ] || fail "no CA bundle at $CA_BUNDLE: install Debian's ca-certificates"

if [ -z "$binary" ]; then
    binary=$root/target/release/wasm-ccm
    if [ ! -x "$binary" ]; then
        echo "image/build.sh: building $binary" >&2
        (cd "$root" && cargo build --release --locked -p wasm-ccm)
    fi
fi
[ -x "$binary" ] || fail "no executable binary at $binary"
binary=$(realpath "$binary")

# The platform, as the image config and Debian name it, and the binary built for it.
architecture=${platform#linux/}
case "$platform" in
    linux/amd64) machine="Advanced Micro Devices X86-64" gnu_triple=x86_64-linux-gnu ;;
    linux/arm64) machine="AArch64" gnu_triple=aarch64-linux-gnu ;;
    *) fail "--platform $platform: linux/amd64 or linux/arm64" ;;
esac
built_for=$(readelf -h "$binary" 2>/dev/null | sed -nE 's/^ *Machine: *(.*)$/\1/p' || true)
[ "$built_for" = "$machine" ] \
    || fail "$binary is built for ${built_for:-an unknown machine}, not $platform ($machine)"
native=false
[ "$architecture" != "$(dpkg --print-architecture)" ] || native=true

# The version the binary reports (`wasm-ccm 0.1.0`), so labels describe what is packaged; a
# binary for another architecture runs under qemu's user emulation with the cross sysroot.
if [ "$native" = true ]; then
    version=$("$binary" --version | awk '{ print $2 }')
else
    emulator=qemu-${gnu_triple%%-*}-static
    need "$emulator" "it runs the $platform binary to ask its version (Debian's qemu-user-static)"
    version=$("$emulator" -L "/usr/$gnu_triple" "$binary" --version | awk '{ print $2 }')
fi
[ -n "$version" ] || fail "$binary --version printed no version"
tag=${tag:-$version}
if [ -z "$revision" ]; then
    revision=$(git -C "$root" rev-parse HEAD 2>/dev/null) \
        || fail "not a git checkout: pass --revision SHA"
fi
if [ -z "$source_url" ]; then
    source_url=$(git -C "$root" remote get-url origin 2>/dev/null || true)
    # git@host:owner/repo.git -> https://host/owner/repo
    source_url=$(sed -E 's#^git@([^:]+):#https://\1/#; s#\.git$##' <<<"$source_url")
fi
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
    SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct 2>/dev/null) \
        || fail "not a git checkout: set SOURCE_DATE_EPOCH"
fi
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
license=$(sed -nE 's/^license = "(.*)"$/\1/p' "$root/Cargo.toml" | head -1)
title=wasm-ccm
description="Kubernetes cloud-controller-manager whose cloud providers are WebAssembly components"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
umask 022
mkdir -p "$rootfs"

# The manager and the libraries it links with the dynamic loader its ELF header names: on
# this machine's architecture at the paths ldd resolves them to; for another, found in
# Debian's cross sysroot by their names (readelf's NEEDED, transitively) and put in that
# architecture's multiarch directory, the loader at the path the binary names. A static
# binary has none.
install -D -m 0755 "$binary" "$rootfs$BINARY_PATH"
if [ "$native" = true ]; then
    libraries=$(ldd "$binary" 2>/dev/null | awk '
        $2 == "=>" && $3 ~ /^\// { print $3 " " $3; next }
        $1 ~ /^\// { print $1 " " $1 }' || true)
else
    sysroot=/usr/$gnu_triple/lib
    [ -d "$sysroot" ] || fail "no $sysroot: install Debian's gcc-$gnu_triple (it brings the $architecture libraries)"
    needed() { readelf -d "$1" | sed -nE 's/.*\(NEEDED\).*\[(.*)\]$/\1/p'; }
    interpreter=$(readelf -l "$binary" | sed -nE 's/.*Requesting program interpreter: (.*)\]$/\1/p')
    libraries=
    [ -z "$interpreter" ] || libraries="$sysroot/$(basename "$interpreter") $interpreter"
    queue=$(needed "$binary")
    seen=" "
    while [ -n "$queue" ]; do
        name=${queue%%$'\n'*}
        [ "$queue" = "$name" ] && queue= || queue=${queue#*$'\n'}
        case "$seen" in *" $name "*) continue ;; esac
        seen="$seen$name "
        [ -f "$sysroot/$name" ] || fail "$binary needs $name, which $sysroot does not have"
        case "$name" in ld-linux*) continue ;; esac
        libraries="$libraries"$'\n'"$sysroot/$name /usr/lib/$gnu_triple/$name"
        more=$(needed "$sysroot/$name")
        [ -z "$more" ] || queue="$queue${queue:+$'\n'}$more"
    done
fi
packages=(ca-certificates)
while read -r library destination; do
    [ -n "$library" ] || continue
    mode=0644
    case "$(basename "$library")" in ld-linux*) mode=0755 ;; esac
    install -D -m "$mode" "$(realpath "$library")" "$rootfs$destination"
    package=$(dpkg-query -S "$library" 2>/dev/null | head -1 | cut -d: -f1 || true)
    [ -n "$package" ] || fail "no Debian package owns $library: cannot ship its copyright file"
    packages+=("$package")
done <<<"$libraries"
packages=($(printf '%s\n' "${packages[@]}" | sort -u))

# Licences of what is copied from Debian, as distroless ships them.
for package in "${packages[@]}"; do
    install -D -m 0644 "/usr/share/doc/$package/copyright" \
        "$rootfs/usr/share/doc/$package/copyright"
done

if [ -n "$packages_out" ]; then
    dpkg-query -W -f '${Package} ${Version} ${Architecture}\n' "${packages[@]}" >"$packages_out"
fi

# Registry pulls verify TLS with the system's roots (rustls-platform-verifier); provider
# egress uses the Mozilla roots compiled into the binary.
install -D -m 0644 "$CA_BUNDLE" "$rootfs$CA_BUNDLE"

mkdir -p "$rootfs/etc" "$rootfs/home/nonroot" "$rootfs/tmp"
cat >"$rootfs/etc/passwd" <<EOF
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:$USER_ID:$USER_ID:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$rootfs/etc/group" <<EOF
root:x:0:
nobody:x:65534:
nonroot:x:$USER_ID:
EOF
# Without it glibc asks DNS before /etc/hosts; Kubernetes mounts /etc/hosts and resolv.conf.
cat >"$rootfs/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
hosts: files dns
EOF
chmod 0644 "$rootfs"/etc/passwd "$rootfs"/etc/group "$rootfs"/etc/nsswitch.conf
chmod 1777 "$rootfs/tmp"

# One layer: sorted entries, numeric owners, fixed mtimes; the home directory is the user's.
layer=$work/layer.tar
tar_options=(--format=gnu --sort=name --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" -C "$rootfs")
(cd "$rootfs" && find . -mindepth 1 -maxdepth 1 ! -name home -printf '%P\n') | sort >"$work/top"
tar "${tar_options[@]}" --owner=0 --group=0 -cf "$layer" -T "$work/top" --no-recursion home
tar "${tar_options[@]}" --owner="$USER_ID" --group="$USER_ID" -rf "$layer" home/nonroot

# Replaced only if it is an earlier layout or empty: a mistyped --layout must not delete a tree.
if [ -e "$layout" ] && [ ! -f "$layout/oci-layout" ] && [ -n "$(ls -A "$layout")" ]; then
    fail "--layout $layout exists and is not an OCI layout: give a new or empty directory"
fi
rm -rf "$layout"
umoci init --layout "$layout"
umoci new --image "$layout:$tag"
history=(--history.created "$created" --history.author wasm-ccm)
umoci raw add-layer --image "$layout:$tag" "${history[@]}" \
    --history.created_by "image/build.sh: $title $version, libraries, CA bundle, passwd" \
    "$layer"

labels=(
    "org.opencontainers.image.title=$title"
    "org.opencontainers.image.description=$description"
    "org.opencontainers.image.version=$version"
    "org.opencontainers.image.revision=$revision"
    "org.opencontainers.image.licenses=$license"
    "org.opencontainers.image.created=$created"
)
if [ -n "$source_url" ]; then
    labels+=("org.opencontainers.image.source=$source_url")
else
    echo "image/build.sh: no git remote origin: org.opencontainers.image.source left out" \
        "(pass --source URL)" >&2
fi
config=(
    --created "$created"
    --architecture "$architecture" --os linux
    --config.user "$USER_ID:$USER_ID"
    --config.entrypoint "$BINARY_PATH"
    --config.workingdir /home/nonroot
    --config.env "SSL_CERT_FILE=$CA_BUNDLE"
    --config.env "PATH=/usr/local/bin"
    --config.exposedports "$METRICS_PORT/tcp"
    --no-history
)
for label in "${labels[@]}"; do
    config+=(--config.label "$label" --manifest.annotation "$label")
done
umoci config --image "$layout:$tag" "${config[@]}"
umoci gc --layout "$layout"

size=$(du -sk --apparent-size "$layout/blobs" | cut -f1)
echo "image/build.sh: $layout:$tag ($title $version, revision $revision, ${size} KiB of blobs)" >&2

if [ -n "$push" ]; then
    tls=()
    [ "$insecure" = false ] || tls=(--dest-tls-verify=false)
    skopeo copy --preserve-digests --digestfile "$work/digest" "${tls[@]}" \
        "oci:$layout:$tag" "docker://$push"
    echo "image/build.sh: pushed $push@$(cat "$work/digest")" >&2
fi
