//! Rate limiting: per-rule counters keyed by request characteristics, with bounded memory.
//!
//! Each rule has a `Limiter`: a fixed window per key (it starts at the key's first request),
//! plus an optional mitigation timeout during which the key is refused outright. Keys live in
//! sharded maps. Memory is bounded two ways: expired entries are swept (amortised, and never
//! more often than something can have expired), and each rule has a hard cap on keys. When a
//! rule's table is full of live keys, a *new* key is not tracked (its request passes): keys
//! already counted, the ones that are abusive, stay limited. See docs/policy.md.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Shards per limiter: enough to keep two cores from contending on one lock.
const SHARDS: usize = 16;
/// Default cap on tracked keys per rate-limit rule.
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// The verdict of a limiter for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Allowed,
    /// Refused; the key may succeed again after this long.
    Limited(Duration),
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Milliseconds since the limiter's epoch.
    window_start: u64,
    count: u32,
    /// While `now < blocked_until`, the key is refused without counting.
    blocked_until: u64,
}

impl Entry {
    fn expires_at(&self, period: u64) -> u64 {
        self.window_start
            .saturating_add(period)
            .max(self.blocked_until)
    }
}

/// Keys are already hashed with the limiter's random seed; the map need not hash them again.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[derive(Default)]
struct Shard {
    map: HashMap<u64, Entry, BuildHasherDefault<KeyHasher>>,
    /// Nothing in the shard expires before this time (ms), so sweeping earlier is pointless.
    next_expiry: u64,
    inserts_since_sweep: usize,
}

/// The counters of one rate-limit rule.
pub(crate) struct Limiter {
    epoch: Instant,
    period: u64,
    limit: u32,
    mitigation: u64,
    cap_per_shard: usize,
    shards: Box<[Mutex<Shard>]>,
    seed: RandomState,
    /// New keys not tracked because the table was full.
    overflow: AtomicU64,
    /// The rule's definition; a reload reuses this limiter only when it is unchanged.
    pub(crate) fingerprint: String,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("period_ms", &self.period)
            .field("limit", &self.limit)
            .field("keys", &self.keys())
            .finish_non_exhaustive()
    }
}

impl Limiter {
    pub(crate) fn new(
        period: Duration,
        limit: u32,
        mitigation: Duration,
        max_keys: usize,
        fingerprint: String,
    ) -> Limiter {
        Limiter {
            epoch: Instant::now(),
            period: millis(period).max(1),
            limit,
            mitigation: millis(mitigation),
            cap_per_shard: max_keys.div_ceil(SHARDS).max(1),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            seed: RandomState::new(),
            overflow: AtomicU64::new(0),
            fingerprint,
        }
    }

    /// A hasher for building a key; keyed with this limiter's random seed so that clients
    /// cannot choose colliding keys.
    pub(crate) fn key_hasher(&self) -> impl Hasher {
        self.seed.build_hasher()
    }

    /// Counts one request for `key` at `now` and says whether it may pass.
    pub(crate) fn hit(&self, key: u64, now: Instant) -> Outcome {
        let now = millis(now.saturating_duration_since(self.epoch));
        let idx = usize::try_from(key % SHARDS as u64).unwrap_or(0);
        let Some(shard) = self.shards.get(idx) else {
            return Outcome::Allowed;
        };
        // A panic while holding the lock cannot leave an entry half-written; keep going.
        let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        if !shard.map.contains_key(&key) {
            shard.inserts_since_sweep += 1;
            let full = shard.map.len() >= self.cap_per_shard;
            if (full || shard.inserts_since_sweep > self.cap_per_shard / 2)
                && now >= shard.next_expiry
            {
                self.sweep(&mut shard, now);
            }
            if shard.map.len() >= self.cap_per_shard {
                self.overflow.fetch_add(1, Ordering::Relaxed);
                return Outcome::Allowed;
            }
        }
        let period = self.period;
        let entry = shard.map.entry(key).or_insert(Entry {
            window_start: now,
            count: 0,
            blocked_until: 0,
        });
        if now < entry.blocked_until {
            return Outcome::Limited(Duration::from_millis(entry.blocked_until - now));
        }
        if now >= entry.window_start.saturating_add(period) {
            entry.window_start = now;
            entry.count = 0;
        }
        entry.count = entry.count.saturating_add(1);
        if entry.count <= self.limit {
            return Outcome::Allowed;
        }
        if self.mitigation > 0 {
            // Blocked for the mitigation time, then a fresh window: the retry time is exact.
            entry.blocked_until = now.saturating_add(self.mitigation);
            entry.window_start = entry.blocked_until;
            entry.count = 0;
            Outcome::Limited(Duration::from_millis(self.mitigation))
        } else {
            Outcome::Limited(Duration::from_millis(
                entry
                    .window_start
                    .saturating_add(period)
                    .saturating_sub(now),
            ))
        }
    }

    fn sweep(&self, shard: &mut Shard, now: u64) {
        let period = self.period;
        let mut next = u64::MAX;
        shard.map.retain(|_, e| {
            let exp = e.expires_at(period);
            if exp > now {
                next = next.min(exp);
                true
            } else {
                false
            }
        });
        shard.next_expiry = next;
        shard.inserts_since_sweep = 0;
    }

    /// Keys currently tracked.
    pub(crate) fn keys(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).map.len())
            .sum()
    }

    /// The most keys this limiter will hold.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.cap_per_shard * SHARDS
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Whole seconds until retry, rounded up, at least 1.
pub(crate) fn retry_secs(d: Duration) -> u32 {
    let ms = d.as_millis();
    u32::try_from(ms.div_ceil(1000)).unwrap_or(u32::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(l: &Limiter, s: &str) -> u64 {
        let mut h = l.key_hasher();
        h.write(s.as_bytes());
        h.finish()
    }

    #[test]
    fn window_without_mitigation_retries_at_window_end() {
        let l = Limiter::new(
            Duration::from_secs(10),
            2,
            Duration::ZERO,
            1000,
            String::new(),
        );
        let t0 = Instant::now();
        let k = key(&l, "a");
        assert_eq!(l.hit(k, t0), Outcome::Allowed);
        assert_eq!(l.hit(k, t0 + Duration::from_secs(1)), Outcome::Allowed);
        assert_eq!(
            l.hit(k, t0 + Duration::from_millis(3500)),
            Outcome::Limited(Duration::from_millis(6500))
        );
        assert_eq!(retry_secs(Duration::from_millis(6500)), 7);
        assert_eq!(l.hit(k, t0 + Duration::from_secs(10)), Outcome::Allowed);
        assert_eq!(
            l.hit(key(&l, "b"), t0),
            Outcome::Allowed,
            "keys are independent"
        );
    }

    #[test]
    fn mitigation_blocks_then_resets() {
        let l = Limiter::new(
            Duration::from_secs(10),
            1,
            Duration::from_secs(60),
            1000,
            String::new(),
        );
        let t0 = Instant::now();
        let k = key(&l, "a");
        assert_eq!(l.hit(k, t0), Outcome::Allowed);
        assert_eq!(l.hit(k, t0), Outcome::Limited(Duration::from_secs(60)));
        assert_eq!(
            l.hit(k, t0 + Duration::from_secs(59)),
            Outcome::Limited(Duration::from_secs(1))
        );
        assert_eq!(
            l.hit(k, t0 + Duration::from_millis(59_999)),
            Outcome::Limited(Duration::from_millis(1))
        );
        assert_eq!(retry_secs(Duration::from_millis(1)), 1);
        assert_eq!(l.hit(k, t0 + Duration::from_secs(60)), Outcome::Allowed);
    }

    #[test]
    fn huge_periods_and_time_going_backwards_do_not_overflow() {
        let l = Limiter::new(Duration::MAX, 1, Duration::MAX, 10, String::new());
        let t0 = Instant::now() + Duration::from_secs(5);
        let k = key(&l, "a");
        assert_eq!(l.hit(k, t0), Outcome::Allowed);
        assert!(matches!(l.hit(k, t0), Outcome::Limited(_)));
        assert!(matches!(
            l.hit(k, t0 - Duration::from_secs(5)),
            Outcome::Limited(_)
        ));
        let l = Limiter::new(
            Duration::from_secs(10),
            1,
            Duration::ZERO,
            10,
            String::new(),
        );
        assert_eq!(l.hit(k, t0), Outcome::Allowed);
        assert!(matches!(
            l.hit(k, t0 - Duration::from_secs(4)),
            Outcome::Limited(_)
        ));
    }

    #[test]
    fn a_million_keys_stay_under_the_cap() {
        let cap = 10_000;
        let l = Limiter::new(
            Duration::from_secs(60),
            5,
            Duration::ZERO,
            cap,
            String::new(),
        );
        let t0 = Instant::now();
        let abuser = key(&l, "abuser");
        for _ in 0..6 {
            l.hit(abuser, t0);
        }
        for i in 0..1_000_000u64 {
            l.hit(
                i.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                t0 + Duration::from_micros(i),
            );
        }
        assert!(
            l.keys() <= l.capacity(),
            "{} keys > cap {}",
            l.keys(),
            l.capacity()
        );
        assert!(l.capacity() <= cap + SHARDS);
        assert!(matches!(
            l.hit(abuser, t0 + Duration::from_secs(2)),
            Outcome::Limited(_)
        ));
        // Once their windows end, old keys are reclaimed and new ones are tracked again.
        let later = t0 + Duration::from_secs(120);
        for i in 0..1_000u64 {
            l.hit(i.wrapping_mul(0x1234_5678_9abc_def1), later);
        }
        assert!(l.keys() <= 1_000 + SHARDS, "{} keys after expiry", l.keys());
    }
}
