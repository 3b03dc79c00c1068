//! Paths of the guest components this crate's build script compiled from source.
//!
//! Tests and benchmarks depend on this crate instead of on prebuilt `.wasm` files, so every
//! test run exercises the guests as they are in the tree.

/// `guests/simcloud`: the reference provider for the cloud simulator.
pub const SIMCLOUD: &str = env!("GUEST_SIMCLOUD");

/// `guests/simcloud` built with the stamp [`SIMCLOUD_V2_BUILD`] (`SIMCLOUD_BUILD=v2`): the
/// same provider, observably different, as a second version to swap [`SIMCLOUD`] for. It adds
/// the node label `simcloud.wasm-ccm.io/build: v2`, and a `v2.`-prefixed hostname to
/// load-balancer ingress points; load balancer names are unchanged, so it adopts the load
/// balancers [`SIMCLOUD`] created. See simcloud's module doc.
pub const SIMCLOUD_V2: &str = env!("GUEST_SIMCLOUD_V2");

/// The build stamp of [`SIMCLOUD_V2`]: `v2`.
pub const SIMCLOUD_V2_BUILD: &str = env!("GUEST_SIMCLOUD_V2_BUILD");

/// `guests/aws`: the provider for Amazon Web Services (EC2, ELBv2), signed by the host.
pub const AWS: &str = env!("GUEST_AWS");

/// `guests/simcloud-py`: simcloud ported to Python (the `cloud-provider` world: instances,
/// load balancers, routes), built with componentize-py (a CPython inside: about 18.5 MB).
pub const SIMCLOUD_PY: &str = env!("GUEST_SIMCLOUD_PY");

/// `guests/simcloud-ts`: simcloud's `init` and instances ported to TypeScript, built with
/// componentize-js (a SpiderMonkey inside the component: about 12.7 MB).
pub const SIMCLOUD_TS: &str = env!("GUEST_SIMCLOUD_TS");

/// The command that built [`SIMCLOUD_TS`]: the one docs/src/authors/typescript.md shows,
/// typed as a reader types it from the workspace root.
pub const SIMCLOUD_TS_COMMAND: &str = include_str!(env!("GUEST_SIMCLOUD_TS_COMMAND"));

/// The command that built [`SIMCLOUD_PY`]: the one docs/src/authors/python.md shows, typed
/// as a reader types it from the workspace root.
pub const SIMCLOUD_PY_COMMAND: &str = include_str!(env!("GUEST_SIMCLOUD_PY_COMMAND"));

/// `tests/guests/hostile`: a provider that misbehaves on purpose.
pub const HOSTILE: &str = env!("GUEST_HOSTILE");

/// `tests/guests/overreach`: a provider importing an interface the host does not offer.
pub const OVERREACH: &str = env!("GUEST_OVERREACH");

/// `tests/guests/rollout`: a provider that answers everything with fixed results unless its
/// cloud config makes `init` fail or every Nth call trap (refused rollouts, rollbacks).
pub const ROLLOUT: &str = env!("GUEST_ROLLOUT");

/// `tests/guests/legacy`: a provider built for the contract without node sets (bare
/// wit-bindgen), which gets load-balancer nodes as a `list<node>` and reports what arrived.
pub const LEGACY: &str = env!("GUEST_LEGACY");

/// The bytes of the component at `path`.
pub fn read(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|err| panic!("cannot read guest component {path}: {err}"))
}
