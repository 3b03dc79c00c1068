# Sourced by tests/install-test-tools.sh and release/install-release-tools.sh: `apt_install
# PACKAGE...` installs Debian packages as root (directly, or through sudo).

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null; then
        sudo "$@"
    else
        echo "$(basename "$0"): not root and no sudo; run as root: $*" >&2
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
