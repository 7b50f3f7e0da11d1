//! Rate limiting: per-rule counters keyed by request characteristics, in bounded memory.
//!
//! Each rule has a `Limiter`: a fixed window per key (it starts at the key's first request),
//! plus an optional mitigation timeout during which the key is refused outright.
//!
//! Memory is fixed per rule: keys live in `SHARDS` shards of at most `cap_per_shard` entries
//! each (`max_keys` in total, rounded up to a multiple of `SHARDS`). Every shard keeps two
//! intrusive lists over one slot array:
//!
//! - *open* keys (not being refused), least recently seen at the tail;
//! - *limited* keys (being refused), in the order they became limited.
//!
//! A new key in a full shard takes the slot of, in this order: the oldest limited key whose
//! refusal is over, else the least recently seen open key. Both are O(1) (no sweep). Keys being
//! limited are never evicted. Only when every slot of the shard holds a key still being refused
//! is the new key counted in the shard's count-min sketch (fixed memory, allocated on first use,
//! like `pingora-limits`' `Estimator`): it may over-count (a key sharing cells with heavy keys is
//! refused early) but never under-counts, so a new key is always counted. See docs/policy.md.

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
/// Rows of a shard's count-min sketch (independent hash functions).
const SKETCH_ROWS: usize = 4;
/// Bounds on the counters per sketch row: a quarter of the shard's slots, within these.
const SKETCH_MIN_WIDTH: usize = 64;
const SKETCH_MAX_WIDTH: usize = 4096;
/// "No slot" in the intrusive lists.
const NIL: u32 = u32::MAX;

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

/// Which list a slot is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    Open = 0,
    Limited = 1,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    key: u64,
    entry: Entry,
    list: List,
    prev: u32,
    next: u32,
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

/// A fixed window of approximate counts, for new keys when every slot holds a limited key.
///
/// Conservative-update count-min sketch: a key's count is the minimum of its cells, and only
/// the cells at that minimum are raised, so the estimate never falls below the true count.
/// Each cell also keeps the latest `blocked_until` written through it; a key's block is the
/// minimum over its cells, so a key is never released before its own block ends.
struct Sketch {
    width: usize,
    window_start: u64,
    counts: Box<[u32]>,
    blocked: Box<[u64]>,
}

impl Sketch {
    fn new(width: usize, now: u64) -> Sketch {
        Sketch {
            width,
            window_start: now,
            counts: vec![0; width * SKETCH_ROWS].into_boxed_slice(),
            blocked: vec![0; width * SKETCH_ROWS].into_boxed_slice(),
        }
    }

    fn cells(&self, key: u64) -> [usize; SKETCH_ROWS] {
        // Keys are already uniformly hashed; derive one index per row by remixing.
        let mut out = [0; SKETCH_ROWS];
        for (row, o) in out.iter_mut().enumerate() {
            let h = (key ^ (row as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .wrapping_mul(0xD6E8_FEB8_6659_FD93);
            let h = h ^ (h >> 32);
            *o = row * self.width + usize::try_from(h % self.width as u64).unwrap_or(0);
        }
        out
    }

    fn hit(&mut self, key: u64, now: u64, l: &Limiter) -> Outcome {
        let cells = self.cells(key);
        let blocked = cells
            .iter()
            .map(|&c| self.blocked.get(c).copied().unwrap_or(0))
            .min()
            .unwrap_or(0);
        if now < blocked {
            return Outcome::Limited(Duration::from_millis(blocked - now));
        }
        if now >= self.window_start.saturating_add(l.period) {
            self.counts.fill(0);
            self.window_start = now;
        }
        let min = cells
            .iter()
            .map(|&c| self.counts.get(c).copied().unwrap_or(0))
            .min()
            .unwrap_or(0);
        let estimate = min.saturating_add(1);
        for &c in &cells {
            if let Some(v) = self.counts.get_mut(c) {
                *v = (*v).max(estimate);
            }
        }
        if estimate <= l.limit {
            return Outcome::Allowed;
        }
        if l.mitigation > 0 {
            let until = now.saturating_add(l.mitigation);
            for &c in &cells {
                if let Some(v) = self.blocked.get_mut(c) {
                    *v = (*v).max(until);
                }
            }
            Outcome::Limited(Duration::from_millis(l.mitigation))
        } else {
            Outcome::Limited(Duration::from_millis(
                self.window_start
                    .saturating_add(l.period)
                    .saturating_sub(now),
            ))
        }
    }
}

impl Sketch {
    /// Whether `key` is being refused through the sketch at `now`: [`Limiter::refusal`] over its
    /// cells (the least block and count), counting nothing.
    fn refusal(&self, key: u64, now: u64, l: &Limiter) -> Outcome {
        let cells = self.cells(key);
        let blocked = cells
            .iter()
            .map(|&c| self.blocked.get(c).copied().unwrap_or(0))
            .min()
            .unwrap_or(0);
        let count = cells
            .iter()
            .map(|&c| self.counts.get(c).copied().unwrap_or(0))
            .min()
            .unwrap_or(0);
        l.refusal(
            &Entry {
                window_start: self.window_start,
                count,
                blocked_until: blocked,
            },
            now,
        )
    }

    /// What [`Sketch::hit`] would answer, and the count it would reach, without counting.
    fn peek(&self, key: u64, now: u64, l: &Limiter) -> (u32, Outcome) {
        let cells = self.cells(key);
        let min_of = |values: &[u64]| {
            cells
                .iter()
                .map(|&c| values.get(c).copied().unwrap_or(0))
                .min()
                .unwrap_or(0)
        };
        let blocked = min_of(&self.blocked);
        let count = cells
            .iter()
            .map(|&c| self.counts.get(c).copied().unwrap_or(0))
            .min()
            .unwrap_or(0);
        if now < blocked {
            return (
                count,
                Outcome::Limited(Duration::from_millis(blocked - now)),
            );
        }
        let (window_start, count) = if now >= self.window_start.saturating_add(l.period) {
            (now, 0)
        } else {
            (self.window_start, count)
        };
        let estimate = count.saturating_add(1);
        (estimate, l.over_limit(estimate, window_start, now))
    }
}

#[derive(Default)]
struct Shard {
    /// Key → index into `slots`.
    index: HashMap<u64, u32, BuildHasherDefault<KeyHasher>>,
    /// At most `cap_per_shard` slots, each on exactly one list.
    slots: Vec<Slot>,
    /// Head (most recent) and tail (oldest) of each list, indexed by `List`.
    head: [u32; 2],
    tail: [u32; 2],
    sketch: Option<Box<Sketch>>,
}

impl Shard {
    fn new() -> Shard {
        Shard {
            head: [NIL; 2],
            tail: [NIL; 2],
            ..Shard::default()
        }
    }

    fn unlink(&mut self, i: u32) {
        let Some(&Slot {
            list, prev, next, ..
        }) = self.slots.get(i as usize)
        else {
            return;
        };
        let l = list as usize;
        match self.slots.get_mut(prev as usize) {
            Some(p) => p.next = next,
            None => self.head[l] = next,
        }
        match self.slots.get_mut(next as usize) {
            Some(n) => n.prev = prev,
            None => self.tail[l] = prev,
        }
    }

    /// Puts slot `i` (not linked) at the head of `list`.
    fn push_front(&mut self, i: u32, list: List) {
        let l = list as usize;
        let old = self.head[l];
        if let Some(s) = self.slots.get_mut(i as usize) {
            s.list = list;
            s.prev = NIL;
            s.next = old;
        }
        match self.slots.get_mut(old as usize) {
            Some(o) => o.prev = i,
            None => self.tail[l] = i,
        }
        self.head[l] = i;
    }
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
    /// Open keys evicted to make room for a new key.
    evicted: AtomicU64,
    /// New keys counted in a sketch because every slot held a limited key.
    sketched: AtomicU64,
    /// The rule's definition; a reload reuses this limiter only when it is unchanged.
    pub(crate) fingerprint: String,
    /// Counts answers (`counting_expression`): `limit` is then one less than the rule's, so that
    /// the answer that reaches the rule's limit trips it (see [`Limiter::counting_answers`]).
    counts_answers: bool,
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
            // Slot indices are u32 (NIL excluded); max_keys is capped far below that.
            cap_per_shard: max_keys.div_ceil(SHARDS).clamp(1, (NIL - 1) as usize),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::new())).collect(),
            seed: RandomState::new(),
            evicted: AtomicU64::new(0),
            sketched: AtomicU64::new(0),
            fingerprint,
            counts_answers: false,
        }
    }

    /// This limiter, for a rule that counts answers: a request is refused once `limit` answers
    /// were counted in the key's window (or, with a mitigation timeout, for that long from the
    /// answer that reached the limit). The requests themselves are only [`check`](Self::check)ed;
    /// the answers are counted with [`hit`](Self::hit), whose outcome then says whether that
    /// answer tripped the limit.
    pub(crate) fn counting_answers(mut self) -> Limiter {
        if !self.counts_answers {
            self.counts_answers = true;
            self.limit = self.limit.saturating_sub(1);
        }
        self
    }

    /// Whether `key` is being refused at `now`, counting nothing and storing nothing (a key it
    /// has never seen is not stored: a flood of new keys checked costs no memory).
    pub(crate) fn check(&self, key: u64, now: Instant) -> Outcome {
        let now = millis(now.saturating_duration_since(self.epoch));
        let idx = usize::try_from(key % SHARDS as u64).unwrap_or(0);
        let Some(shard) = self.shards.get(idx) else {
            return Outcome::Allowed;
        };
        let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        match shard
            .index
            .get(&key)
            .and_then(|&i| shard.slots.get(i as usize))
        {
            Some(s) => self.refusal(&s.entry, now),
            None => shard
                .sketch
                .as_ref()
                .map_or(Outcome::Allowed, |sk| sk.refusal(key, now, self)),
        }
    }

    /// The count `key` holds in its window at `now` (0 when its window is over or it is not
    /// tracked in a slot): what a trace shows of a rule that counts answers.
    pub(crate) fn counted(&self, key: u64, now: Instant) -> u32 {
        let now = millis(now.saturating_duration_since(self.epoch));
        let idx = usize::try_from(key % SHARDS as u64).unwrap_or(0);
        let Some(shard) = self.shards.get(idx) else {
            return 0;
        };
        let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        match shard
            .index
            .get(&key)
            .and_then(|&i| shard.slots.get(i as usize))
        {
            Some(s) if now < s.entry.window_start.saturating_add(self.period) => s.entry.count,
            _ => 0,
        }
    }

    /// Whether the key of `e` is being refused at `now`, and for how long.
    fn refusal(&self, e: &Entry, now: u64) -> Outcome {
        let window_end = e.window_start.saturating_add(self.period);
        if now < e.blocked_until {
            Outcome::Limited(Duration::from_millis(e.blocked_until - now))
        } else if e.count > self.limit && now < window_end {
            Outcome::Limited(Duration::from_millis(window_end - now))
        } else {
            Outcome::Allowed
        }
    }

    /// The count a key must pass to be refused: the rule's limit, or one less for a rule that
    /// counts answers (Redis's script takes the same).
    pub(crate) fn threshold(&self) -> u32 {
        self.limit
    }

    /// A hasher for building a key; keyed with this limiter's random seed so that clients
    /// cannot choose colliding keys.
    pub(crate) fn key_hasher(&self) -> impl Hasher {
        self.seed.build_hasher()
    }

    /// Whether `e` is being refused at `now`.
    fn is_limited(&self, e: &Entry, now: u64) -> bool {
        now < e.blocked_until
            || (e.count > self.limit && now < e.window_start.saturating_add(self.period))
    }

    /// Counts one request for `key` at `now` and says whether it may pass.
    pub(crate) fn hit(&self, key: u64, now: Instant) -> Outcome {
        let now = millis(now.saturating_duration_since(self.epoch));
        let idx = usize::try_from(key % SHARDS as u64).unwrap_or(0);
        let Some(shard) = self.shards.get(idx) else {
            return Outcome::Allowed;
        };
        // A panic while holding the lock cannot leave a list half-linked (nothing in here
        // panics); keep going.
        let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        let slot = match shard.index.get(&key) {
            Some(&i) => i,
            None => match self.make_room(&mut shard, key, now) {
                Some(i) => i,
                None => {
                    self.sketched.fetch_add(1, Ordering::Relaxed);
                    let width = (self.cap_per_shard / 4).clamp(SKETCH_MIN_WIDTH, SKETCH_MAX_WIDTH);
                    let sketch = shard
                        .sketch
                        .get_or_insert_with(|| Box::new(Sketch::new(width, now)));
                    return sketch.hit(key, now, self);
                }
            },
        };
        let Some(s) = shard.slots.get_mut(slot as usize) else {
            return Outcome::Allowed;
        };
        let (outcome, limited) = self.count(&mut s.entry, now);
        let was = s.list;
        let to = if limited { List::Limited } else { List::Open };
        // Open keys move to the front on every hit (least recently seen at the tail); limited
        // keys stay in the order they became limited.
        if to == List::Open || was != to {
            shard.unlink(slot);
            shard.push_front(slot, to);
        }
        outcome
    }

    /// What [`hit`](Self::hit) would answer for `key` at `now`, and the count the key would
    /// reach in its window, without counting or moving anything: a trace's view of the limiter.
    pub(crate) fn peek(&self, key: u64, now: Instant) -> (u32, Outcome) {
        let now = millis(now.saturating_duration_since(self.epoch));
        let idx = usize::try_from(key % SHARDS as u64).unwrap_or(0);
        let Some(shard) = self.shards.get(idx) else {
            return (1, Outcome::Allowed);
        };
        let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        let entry = match shard.index.get(&key) {
            Some(&i) => match shard.slots.get(i as usize) {
                Some(s) => s.entry,
                None => return (1, Outcome::Allowed),
            },
            None if self.would_make_room(&shard, now) => {
                // As `make_room` starts a new key: a block through the sketch carries over.
                let blocked = shard.sketch.as_ref().map_or(0, |sk| {
                    sk.cells(key)
                        .iter()
                        .map(|&c| sk.blocked.get(c).copied().unwrap_or(0))
                        .min()
                        .unwrap_or(0)
                });
                Entry {
                    window_start: now,
                    count: 0,
                    blocked_until: if blocked > now { blocked } else { 0 },
                }
            }
            None => {
                return match &shard.sketch {
                    Some(sketch) => sketch.peek(key, now, self),
                    // A sketch made now starts empty: the key's first request.
                    None => (1, Outcome::Allowed),
                };
            }
        };
        let reached = if now < entry.blocked_until {
            entry.count
        } else if now >= entry.window_start.saturating_add(self.period) {
            1
        } else {
            entry.count.saturating_add(1)
        };
        let mut copy = entry;
        (reached, self.count(&mut copy, now).0)
    }

    /// Whether [`make_room`](Self::make_room) would find a slot for a new key: the same choice,
    /// without making it.
    fn would_make_room(&self, shard: &Shard, now: u64) -> bool {
        if shard.slots.len() < self.cap_per_shard {
            return true;
        }
        let oldest_limited = shard.tail[List::Limited as usize];
        match shard.slots.get(oldest_limited as usize) {
            Some(s) if !self.is_limited(&s.entry, now) => true,
            _ => shard.tail[List::Open as usize] != NIL,
        }
    }

    /// The outcome for a count of `count` in the window that started at `window_start`.
    fn over_limit(&self, count: u32, window_start: u64, now: u64) -> Outcome {
        if count <= self.limit {
            Outcome::Allowed
        } else if self.mitigation > 0 {
            Outcome::Limited(Duration::from_millis(self.mitigation))
        } else {
            Outcome::Limited(Duration::from_millis(
                window_start.saturating_add(self.period).saturating_sub(now),
            ))
        }
    }

    /// A slot for a new `key`: a free one, the oldest limited key whose refusal is over, or the
    /// least recently seen open key. `None` when every slot holds a key still being refused.
    fn make_room(&self, shard: &mut Shard, key: u64, now: u64) -> Option<u32> {
        // A key refused through the sketch stays refused when it gets a slot.
        let blocked = shard.sketch.as_ref().map_or(0, |sk| {
            sk.cells(key)
                .iter()
                .map(|&c| sk.blocked.get(c).copied().unwrap_or(0))
                .min()
                .unwrap_or(0)
        });
        let fresh = Slot {
            key,
            entry: Entry {
                window_start: now,
                count: 0,
                blocked_until: if blocked > now { blocked } else { 0 },
            },
            list: List::Open,
            prev: NIL,
            next: NIL,
        };
        let i = if shard.slots.len() < self.cap_per_shard {
            let len = shard.slots.len();
            let i = u32::try_from(len).ok()?;
            if len == shard.slots.capacity() {
                // Grow by doubling, but never past the cap.
                shard
                    .slots
                    .reserve_exact(len.max(8).min(self.cap_per_shard - len));
            }
            shard.slots.push(fresh);
            i
        } else {
            let oldest_limited = shard.tail[List::Limited as usize];
            let victim = match shard.slots.get(oldest_limited as usize) {
                Some(s) if !self.is_limited(&s.entry, now) => oldest_limited,
                _ => {
                    let lru = shard.tail[List::Open as usize];
                    if lru == NIL {
                        return None;
                    }
                    self.evicted.fetch_add(1, Ordering::Relaxed);
                    lru
                }
            };
            shard.unlink(victim);
            let old = shard.slots.get_mut(victim as usize)?;
            let old_key = old.key;
            *old = fresh;
            shard.index.remove(&old_key);
            victim
        };
        shard.index.insert(key, i);
        // Linked by the caller after counting.
        shard.push_front(i, List::Open);
        Some(i)
    }

    /// Counts one request on `e`: the outcome, and whether the key is now being refused.
    fn count(&self, e: &mut Entry, now: u64) -> (Outcome, bool) {
        if now < e.blocked_until {
            return (
                Outcome::Limited(Duration::from_millis(e.blocked_until - now)),
                true,
            );
        }
        if now >= e.window_start.saturating_add(self.period) {
            e.window_start = now;
            e.count = 0;
        }
        e.count = e.count.saturating_add(1);
        if e.count <= self.limit {
            return (Outcome::Allowed, false);
        }
        if self.mitigation > 0 {
            // Blocked for the mitigation time, then a fresh window: the retry time is exact.
            e.blocked_until = now.saturating_add(self.mitigation);
            e.window_start = e.blocked_until;
            e.count = 0;
            (
                Outcome::Limited(Duration::from_millis(self.mitigation)),
                true,
            )
        } else {
            (
                Outcome::Limited(Duration::from_millis(
                    e.window_start
                        .saturating_add(self.period)
                        .saturating_sub(now),
                )),
                true,
            )
        }
    }

    /// Period (ms, at least 1), requests (or answers) per period as the rule says it,
    /// mitigation timeout (ms).
    pub(crate) fn limits(&self) -> (u64, u32, u64) {
        (
            self.period,
            self.limit.saturating_add(u32::from(self.counts_answers)),
            self.mitigation,
        )
    }

    /// Keys currently tracked (in slots; keys counted only in a sketch are not included).
    pub(crate) fn keys(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).slots.len())
            .sum()
    }

    /// Open keys evicted for new ones, and new keys counted in a sketch, since start.
    pub(crate) fn pressure(&self) -> (u64, u64) {
        (
            self.evicted.load(Ordering::Relaxed),
            self.sketched.load(Ordering::Relaxed),
        )
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

    /// Distinct keys spread like real hashed keys.
    fn flood_key(i: u64) -> u64 {
        i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ 0x5555
    }

    #[test]
    fn a_million_keys_stay_under_the_cap_and_a_new_abuser_is_limited() {
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
            assert_eq!(
                l.hit(flood_key(i), t0 + Duration::from_micros(i)),
                Outcome::Allowed
            );
        }
        assert!(l.keys() <= l.capacity(), "{} > {}", l.keys(), l.capacity());
        assert!(l.capacity() <= cap + SHARDS);
        let t1 = t0 + Duration::from_secs(2);
        // The limited key was never evicted by the flood.
        assert!(matches!(l.hit(abuser, t1), Outcome::Limited(_)));
        // A key first seen after the flood is counted from its first request.
        let newcomer = key(&l, "newcomer");
        for n in 0..5 {
            assert_eq!(l.hit(newcomer, t1), Outcome::Allowed, "request {n}");
        }
        assert_eq!(
            l.hit(newcomer, t1),
            Outcome::Limited(Duration::from_secs(60))
        );
        let (evicted, sketched) = l.pressure();
        assert!(evicted >= 1_000_000 - cap as u64, "{evicted}");
        assert_eq!(sketched, 0, "open keys were there to evict");
    }

    #[test]
    fn least_recently_seen_open_key_is_evicted_first() {
        // One slot per shard: 16 slots in all; use keys of one shard.
        let l = Limiter::new(
            Duration::from_secs(60),
            3,
            Duration::ZERO,
            2 * SHARDS,
            String::new(),
        );
        let t0 = Instant::now();
        let (a, b, c) = (0u64, SHARDS as u64, 2 * SHARDS as u64);
        l.hit(a, t0);
        l.hit(a, t0);
        l.hit(b, t0);
        l.hit(a, t0); // a: 3 requests, most recently seen
        l.hit(c, t0); // evicts b, the least recently seen
        assert!(
            matches!(l.hit(a, t0), Outcome::Limited(_)),
            "a kept its count"
        );
        assert_eq!(l.pressure(), (1, 0));
    }

    #[test]
    fn when_every_slot_is_limited_new_keys_are_counted_in_the_sketch() {
        let l = Limiter::new(
            Duration::from_secs(10),
            2,
            Duration::from_secs(300),
            SHARDS * 4,
            String::new(),
        );
        let t0 = Instant::now();
        // Fill every slot with a limited key.
        let mut limited = Vec::new();
        let mut i = 0;
        while l.keys() < l.capacity() || limited.len() < l.capacity() {
            let k = flood_key(i);
            i += 1;
            for _ in 0..3 {
                l.hit(k, t0);
            }
            if matches!(l.hit(k, t0), Outcome::Limited(_)) {
                limited.push(k);
            }
        }
        assert_eq!(l.keys(), l.capacity());
        for &k in &limited {
            assert!(matches!(l.hit(k, t0), Outcome::Limited(_)), "kept");
        }
        // A new abusive key: counted in the sketch, limited after 2, for the mitigation time.
        let abuser = key(&l, "abuser");
        assert_eq!(l.hit(abuser, t0), Outcome::Allowed);
        assert_eq!(l.hit(abuser, t0), Outcome::Allowed);
        assert_eq!(
            l.hit(abuser, t0),
            Outcome::Limited(Duration::from_secs(300))
        );
        assert_eq!(
            l.hit(abuser, t0 + Duration::from_secs(100)),
            Outcome::Limited(Duration::from_secs(200))
        );
        assert!(l.pressure().1 >= 3);
        // Once the first refusals end, their slots go to new keys first; the abuser, now
        // tracked in a slot, keeps the block the sketch gave it.
        let later = t0 + Duration::from_secs(301);
        assert_eq!(
            l.hit(abuser, later - Duration::from_secs(2)),
            Outcome::Limited(Duration::from_secs(1))
        );
        let sketched = l.pressure().1;
        assert_eq!(l.hit(key(&l, "fresh"), later), Outcome::Allowed);
        assert_eq!(l.pressure().1, sketched, "a slot was reclaimed");
    }

    #[test]
    fn a_limiter_counting_answers_refuses_once_the_limit_is_counted() {
        let l = Limiter::new(
            Duration::from_secs(10),
            2,
            Duration::ZERO,
            1000,
            String::new(),
        )
        .counting_answers();
        assert_eq!(l.limits(), (10_000, 2, 0), "the rule's limit, as written");
        let t0 = Instant::now();
        let k = key(&l, "a");
        assert_eq!(l.check(k, t0), Outcome::Allowed);
        assert_eq!(l.hit(k, t0), Outcome::Allowed, "the first answer");
        assert_eq!(l.check(k, t0), Outcome::Allowed);
        assert!(
            matches!(l.hit(k, t0), Outcome::Limited(_)),
            "the second trips it"
        );
        assert_eq!(
            l.check(k, t0 + Duration::from_secs(4)),
            Outcome::Limited(Duration::from_secs(6))
        );
        assert_eq!(l.counted(k, t0), 2);
        assert_eq!(l.check(k, t0 + Duration::from_secs(10)), Outcome::Allowed);
    }

    #[test]
    fn checking_keys_stores_nothing() {
        let l = Limiter::new(
            Duration::from_secs(60),
            1,
            Duration::from_secs(60),
            1000,
            String::new(),
        )
        .counting_answers();
        let t0 = Instant::now();
        for i in 0..100_000u64 {
            assert_eq!(l.check(flood_key(i), t0), Outcome::Allowed);
        }
        assert_eq!(l.keys(), 0, "a flood of checks costs no memory");
        // A key blocked through the sketch (every slot limited) is refused by a check too.
        for i in 0..5_000u64 {
            l.hit(flood_key(i), t0);
        }
        assert!(l.keys() <= l.capacity());
        let abuser = key(&l, "abuser");
        l.hit(abuser, t0);
        assert!(matches!(l.check(abuser, t0), Outcome::Limited(_)));
    }

    #[test]
    fn sketch_never_undercounts() {
        let mut sk = Sketch::new(SKETCH_MIN_WIDTH, 0);
        let l = Limiter::new(
            Duration::from_secs(60),
            1000,
            Duration::ZERO,
            16,
            String::new(),
        );
        // Many more keys than cells: estimates only grow.
        for round in 1..=3u32 {
            for k in 0..2_000u64 {
                let _ = sk.hit(flood_key(k), 1, &l);
                let est = sk
                    .cells(flood_key(k))
                    .iter()
                    .map(|&c| sk.counts[c])
                    .min()
                    .unwrap();
                assert!(est >= round, "key {k} round {round}: {est}");
            }
        }
    }
}

#[cfg(test)]
mod peek_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A peek answers what the next hit answers, and the count it reaches, in slots, on
        /// eviction and in the sketch (a limiter of one slot per shard fills at once); and it
        /// moves nothing.
        #[test]
        fn peek_answers_what_hit_does(
            steps in proptest::collection::vec((0u64..40, 0u64..400), 1..200),
            mitigation_ms in prop_oneof![Just(0u64), 1u64..2000],
            limit in 1u32..4,
        ) {
            let l = Limiter::new(
                Duration::from_millis(500),
                limit,
                Duration::from_millis(mitigation_ms),
                SHARDS,
                String::new(),
            );
            let start = l.epoch;
            let mut now = start;
            for (key, advance) in steps {
                now += Duration::from_millis(advance);
                let first = l.peek(key, now);
                prop_assert_eq!(l.peek(key, now), first, "a peek moved something");
                let hit = l.hit(key, now);
                prop_assert_eq!(first.1, hit);
            }
        }
    }
}
