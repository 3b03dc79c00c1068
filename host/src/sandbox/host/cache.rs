//! The key-value cache one provider version keeps between calls, held to a byte budget.
//!
//! Every entry is charged its key, its value and [`ENTRY_OVERHEAD`] for the host's
//! bookkeeping, so the budget bounds real memory whether a provider stores a few large
//! values or many tiny ones. When a value does not fit, expired entries go first, then
//! those closest to expiring; an index ordered by expiry makes each eviction O(log n), so a
//! provider storing in a tight loop costs the host little CPU per call.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest a cache entry lives, whatever TTL the provider asks for.
const MAX_TTL: Duration = Duration::from_secs(3600);
/// Refused values are reported at most this often per provider version: a provider that
/// stores too much in a loop gets one warning a minute, not one per value.
pub(crate) const REPORT_EVERY: Duration = Duration::from_secs(60);

/// Bytes charged per entry on top of its key and value: its hash-map slot (64 bytes in a
/// map up to half empty), its expiry-index slot (40 bytes in B-tree nodes up to half
/// empty), the key's `Arc` header and two allocation headers: about 200 bytes typically,
/// so a budget filled with empty values still bounds what the host holds.
pub(crate) const ENTRY_OVERHEAD: usize = 256;

/// How much one provider version may keep in its cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// Most bytes of keys, values and per-entry overhead together (`--provider-cache-size`).
    pub max_bytes: usize,
    /// Longest key; a longer one is refused.
    pub max_key_bytes: usize,
    /// Largest value; a larger one is refused.
    pub max_value_bytes: usize,
}

impl Default for CacheLimits {
    /// 16 MiB: the listings a provider caches (instances, load balancers) are a few
    /// hundred bytes per object, so 16 MiB holds tens of thousands of them, while two
    /// versions side by side during a hot swap stay small next to the manager's own memory.
    /// Keys are names and ids, 1 KiB is ample; a value may be one whole 1 MiB listing.
    fn default() -> Self {
        CacheLimits {
            max_bytes: 16 * 1024 * 1024,
            max_key_bytes: 1024,
            max_value_bytes: 1024 * 1024,
        }
    }
}

/// Why the cache did not store a value (the `limit` label of
/// `wasm_ccm_provider_cache_refused_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    KeyTooLong,
    ValueTooLarge,
    OverBudget,
}

impl Refusal {
    pub(crate) const ALL: [Refusal; 3] = [
        Refusal::KeyTooLong,
        Refusal::ValueTooLarge,
        Refusal::OverBudget,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Refusal::KeyTooLong => "key-too-long",
            Refusal::ValueTooLarge => "value-too-large",
            Refusal::OverBudget => "over-budget",
        }
    }
}

/// What a store did to the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stored {
    /// Bytes charged to the cache afterwards.
    pub bytes: usize,
    /// Unexpired entries evicted to make room.
    pub evicted: usize,
}

/// The key-value cache shared by all calls of one provider version; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ProviderCache {
    entries: Arc<Mutex<Entries>>,
}

#[derive(Debug, Default)]
struct Entries {
    by_key: HashMap<Arc<str>, Entry>,
    /// Keys by (expiry, insertion order): the first is the next to evict.
    by_expiry: BTreeMap<(Instant, u64), Arc<str>>,
    /// Sum of [`charge`] over all entries.
    bytes: usize,
    next_seq: u64,
    refusals: Refusals,
}

/// Refused values not yet reported, and when the last report went out.
#[derive(Debug, Default)]
struct Refusals {
    unreported: u64,
    reported: Option<Instant>,
}

#[derive(Debug)]
struct Entry {
    expires: Instant,
    seq: u64,
    value: Vec<u8>,
}

/// Bytes an entry is charged.
fn charge(key: &str, value: &[u8]) -> usize {
    key.len()
        .saturating_add(value.len())
        .saturating_add(ENTRY_OVERHEAD)
}

impl ProviderCache {
    /// The value under `key` if it has not expired.
    pub(crate) fn get(&self, key: &str) -> Option<Vec<u8>> {
        let now = Instant::now();
        let mut entries = self.lock();
        match entries.by_key.get(key) {
            Some(entry) if entry.expires > now => Some(entry.value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Store `value` under `key` for `ttl` (capped at an hour), evicting what it takes to
    /// stay within `limits`. A refused value is not stored and any earlier value under `key`
    /// is removed, so the provider never reads back a value it meant to replace.
    pub(crate) fn set(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl: Duration,
        limits: &CacheLimits,
    ) -> Result<Stored, Refusal> {
        if key.len() > limits.max_key_bytes {
            return Err(Refusal::KeyTooLong);
        }
        let now = Instant::now();
        let mut entries = self.lock();
        entries.remove(key);
        if value.len() > limits.max_value_bytes {
            return Err(Refusal::ValueTooLarge);
        }
        let cost = charge(key, &value);
        if cost > limits.max_bytes {
            return Err(Refusal::OverBudget);
        }
        entries.remove_expired(now);
        let mut evicted = 0;
        while entries.bytes.saturating_add(cost) > limits.max_bytes && entries.evict_first() {
            evicted += 1;
        }
        if !ttl.is_zero() {
            entries.insert(key.into(), value, now + ttl.min(MAX_TTL));
        }
        Ok(Stored {
            bytes: entries.bytes,
            evicted,
        })
    }

    /// Forget `key`; returns the bytes charged to the cache afterwards.
    pub(crate) fn delete(&self, key: &str) -> usize {
        let mut entries = self.lock();
        entries.remove(key);
        entries.bytes
    }

    /// Bytes charged to the cache: keys, values and per-entry overhead.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Count a refused value. `Some(n)` when the refusal should be reported now (the first,
    /// then at most one per [`REPORT_EVERY`]), `n` being the refusals since the last report,
    /// this one included.
    pub(crate) fn note_refusal(&self, now: Instant) -> Option<u64> {
        let mut entries = self.lock();
        let refusals = &mut entries.refusals;
        refusals.unreported = refusals.unreported.saturating_add(1);
        if refusals
            .reported
            .is_some_and(|at| now.saturating_duration_since(at) < REPORT_EVERY)
        {
            return None;
        }
        refusals.reported = Some(now);
        Some(std::mem::take(&mut refusals.unreported))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Entries {
    fn insert(&mut self, key: Arc<str>, value: Vec<u8>, expires: Instant) {
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        self.bytes = self.bytes.saturating_add(charge(&key, &value));
        self.by_expiry.insert((expires, seq), key.clone());
        self.by_key.insert(
            key,
            Entry {
                expires,
                seq,
                value,
            },
        );
    }

    fn remove(&mut self, key: &str) {
        if let Some((key, entry)) = self.by_key.remove_entry(key) {
            self.by_expiry.remove(&(entry.expires, entry.seq));
            self.bytes = self.bytes.saturating_sub(charge(&key, &entry.value));
        }
    }

    /// Evict the entry closest to expiring (or longest expired); false if there is none.
    fn evict_first(&mut self) -> bool {
        match self.by_expiry.pop_first() {
            Some((_, key)) => {
                if let Some(entry) = self.by_key.remove(&key) {
                    self.bytes = self.bytes.saturating_sub(charge(&key, &entry.value));
                }
                true
            }
            None => false,
        }
    }

    fn remove_expired(&mut self, now: Instant) {
        while self
            .by_expiry
            .first_key_value()
            .is_some_and(|((expires, _), _)| *expires <= now)
        {
            self.evict_first();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn limits(max_bytes: usize) -> CacheLimits {
        CacheLimits {
            max_bytes,
            ..CacheLimits::default()
        }
    }

    /// Room for exactly `n` entries of a 1-byte key and `value` bytes.
    fn room_for(n: usize, value: usize) -> CacheLimits {
        limits(n * (1 + value + ENTRY_OVERHEAD))
    }

    #[test]
    fn entries_expire_and_delete_forgets() {
        let cache = ProviderCache::default();
        let limits = CacheLimits::default();
        cache.set("a", b"1".to_vec(), MINUTE, &limits).unwrap();
        assert_eq!(cache.get("a"), Some(b"1".to_vec()));
        cache
            .set("b", b"2".to_vec(), Duration::ZERO, &limits)
            .unwrap();
        assert_eq!(cache.get("b"), None);
        cache
            .set("c", b"3".to_vec(), Duration::from_millis(1), &limits)
            .unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(cache.get("c"), None);
        assert_eq!(cache.delete("a"), 0);
        assert_eq!(cache.get("a"), None);
    }

    #[test]
    fn bytes_count_key_value_and_overhead_through_overwrite_and_delete() {
        let cache = ProviderCache::default();
        let limits = CacheLimits::default();
        let stored = cache.set("key", vec![0; 100], MINUTE, &limits).unwrap();
        assert_eq!(stored.bytes, 3 + 100 + ENTRY_OVERHEAD);
        let stored = cache.set("key", vec![0; 10], MINUTE, &limits).unwrap();
        assert_eq!(
            stored.bytes,
            3 + 10 + ENTRY_OVERHEAD,
            "overwrite replaces the charge"
        );
        cache.set("other", vec![0; 5], MINUTE, &limits).unwrap();
        assert_eq!(cache.bytes(), 3 + 10 + 5 + 5 + 2 * ENTRY_OVERHEAD);
        assert_eq!(
            cache.delete("key"),
            5 + 5 + ENTRY_OVERHEAD,
            "delete frees its bytes"
        );
        assert_eq!(cache.delete("absent"), 5 + 5 + ENTRY_OVERHEAD);
        cache.delete("other");
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn a_full_cache_evicts_expired_entries_then_the_soonest_to_expire() {
        let cache = ProviderCache::default();
        let limits = room_for(3, 10);
        let value = || vec![0; 10];
        cache
            .set("x", value(), Duration::from_millis(1), &limits)
            .unwrap();
        cache.set("l", value(), 3 * MINUTE, &limits).unwrap();
        cache.set("s", value(), MINUTE, &limits).unwrap();
        std::thread::sleep(Duration::from_millis(5));

        // "x" has expired: it makes room, nothing live is evicted.
        let stored = cache.set("m", value(), 2 * MINUTE, &limits).unwrap();
        assert_eq!(stored.evicted, 0);
        assert_eq!(stored.bytes, limits.max_bytes);
        // Full of live entries: "s" expires first, then "m".
        let stored = cache.set("n", value(), 4 * MINUTE, &limits).unwrap();
        assert_eq!(stored.evicted, 1);
        assert_eq!(cache.get("s"), None);
        cache.set("o", value(), 5 * MINUTE, &limits).unwrap();
        assert_eq!(cache.get("m"), None);
        for kept in ["l", "n", "o"] {
            assert!(cache.get(kept).is_some(), "{kept} kept");
        }
        assert!(cache.bytes() <= limits.max_bytes);
    }

    #[test]
    fn a_large_value_evicts_as_many_entries_as_it_needs() {
        let cache = ProviderCache::default();
        let limits = room_for(4, 10);
        for key in ["a", "b", "c", "d"] {
            cache.set(key, vec![0; 10], MINUTE, &limits).unwrap();
        }
        let big = 2 * (1 + 10 + ENTRY_OVERHEAD) - 1 - ENTRY_OVERHEAD;
        let stored = cache.set("e", vec![0; big], MINUTE, &limits).unwrap();
        assert_eq!(stored.evicted, 2);
        assert_eq!((cache.get("a"), cache.get("b")), (None, None));
        assert!(cache.get("c").is_some() && cache.get("e").is_some());
        assert_eq!(cache.bytes(), limits.max_bytes);
    }

    #[test]
    fn keys_values_and_entries_over_their_bounds_are_refused() {
        let cache = ProviderCache::default();
        let limits = CacheLimits::default();
        let long_key = "k".repeat(limits.max_key_bytes + 1);
        let refused = cache.set(&long_key, b"v".to_vec(), MINUTE, &limits);
        assert_eq!(refused, Err(Refusal::KeyTooLong));
        assert_eq!(cache.get(&long_key), None);
        let longest_key = "k".repeat(limits.max_key_bytes);
        cache
            .set(&longest_key, b"v".to_vec(), MINUTE, &limits)
            .unwrap();
        assert!(cache.get(&longest_key).is_some());

        let big = vec![0; limits.max_value_bytes + 1];
        assert_eq!(
            cache.set("big", big, MINUTE, &limits),
            Err(Refusal::ValueTooLarge)
        );

        let tiny = room_for(1, 10);
        cache.set("a", vec![0; 10], MINUTE, &tiny).unwrap();
        assert_eq!(
            cache.set("b", vec![0; 11], MINUTE, &tiny),
            Err(Refusal::OverBudget),
            "an entry larger than the whole budget"
        );
        assert!(cache.get("a").is_some(), "a refused entry evicts nothing");
    }

    #[test]
    fn refusals_are_reported_once_a_minute_with_a_count() {
        let cache = ProviderCache::default();
        let start = Instant::now();
        assert_eq!(cache.note_refusal(start), Some(1));
        assert_eq!(cache.note_refusal(start), None);
        assert_eq!(cache.note_refusal(start + Duration::from_secs(59)), None);
        assert_eq!(cache.note_refusal(start + REPORT_EVERY), Some(3));
    }

    #[test]
    fn a_refused_overwrite_removes_the_old_value() {
        let cache = ProviderCache::default();
        let limits = CacheLimits::default();
        cache.set("k", b"old".to_vec(), MINUTE, &limits).unwrap();
        let big = vec![0; limits.max_value_bytes + 1];
        assert!(cache.set("k", big, MINUTE, &limits).is_err());
        assert_eq!(cache.get("k"), None);
        assert_eq!(cache.bytes(), 0);
    }
}
