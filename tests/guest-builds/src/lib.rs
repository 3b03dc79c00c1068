//! Paths of the guest components this crate's build script compiled from source.
//!
//! Tests and benchmarks depend on this crate instead of on prebuilt `.wasm` files, so every
//! test run exercises the guests as they are in the tree.

/// `guests/simcloud`: the reference provider for the cloud simulator.
pub const SIMCLOUD: &str = env!("GUEST_SIMCLOUD");

/// `tests/guests/hostile`: a provider that misbehaves on purpose.
pub const HOSTILE: &str = env!("GUEST_HOSTILE");

/// `tests/guests/overreach`: a provider importing an interface the host does not offer.
pub const OVERREACH: &str = env!("GUEST_OVERREACH");

/// The bytes of the component at `path`.
pub fn read(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|err| panic!("cannot read guest component {path}: {err}"))
}
