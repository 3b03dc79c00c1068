//! A tiny non-cryptographic PRNG (SplitMix64) for resource ids and
//! probabilistic faults, seeded from the process's hash randomness.

use std::hash::{BuildHasher, RandomState};
use std::time::SystemTime;

/// SplitMix64: fast, well distributed, and good enough for a simulator.
#[derive(Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator seeded differently on every call.
    pub(crate) fn from_entropy() -> Rng {
        Rng(RandomState::new().hash_one(SystemTime::now()))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn next_u32(&mut self) -> u32 {
        // The high half of the output; truncation is the point.
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn f64_is_in_unit_interval() {
        let mut rng = Rng::from_entropy();
        assert!(
            (0..10_000)
                .map(|_| rng.next_f64())
                .all(|x| (0.0..1.0).contains(&x))
        );
    }
}
