//! The per-client cap on origin work: the requests one client (the connection cap's key: an
//! IPv4 address or an IPv6 /64) has on their way to origins, over HTTP/1 connections and HTTP/2
//! streams together, are at most `[connections] max_in_flight_per_client`.
//!
//! A request its client cancels before the origin answered keeps its place for a while: the
//! origin is still working on it (the edge closes its connection to the origin, but an origin
//! that has started on a request rarely notices). Without that hold, a client that opens
//! requests and resets them at once would be counted near zero while the origin works on
//! thousands.

use std::collections::VecDeque;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hashbrown::HashTable;
use prometheus_client::metrics::gauge::Gauge;

/// The longest a cancelled request keeps its place: its zone's `read_timeout` (the longest the
/// edge would have waited for the origin), but not more than this.
pub const CANCELLED_HOLD_MAX: Duration = Duration::from_secs(30);

/// How often the table drops the entries of clients whose held places all expired.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Entry {
    active: u32,
    /// When each held place of a cancelled request is given back.
    held: VecDeque<Instant>,
}

impl Entry {
    fn count(&self) -> usize {
        self.active as usize + self.held.len()
    }
}

/// The clients' entries, hashed with std's keyed SipHash (the keys are addresses an attacker
/// chooses), each key's hash computed once per request: a [`Slot`] keeps it for its drop.
#[derive(Default)]
struct Table {
    clients: HashTable<(IpAddr, Entry)>,
    hasher: RandomState,
    /// When the next sweep is due (an instant compared, not a duration computed, per request).
    next_sweep: Option<Instant>,
}

/// Requests in flight per client key. An entry exists while a request of its client is in flight
/// or held, so the table is bounded by the requests in flight plus those cancelled within
/// [`CANCELLED_HOLD_MAX`], each at most `max_in_flight_per_client` per client.
pub struct InFlight {
    table: Mutex<Table>,
    gauge: Gauge<i64, AtomicI64>,
}

impl InFlight {
    pub fn new(gauge: Gauge<i64, AtomicI64>) -> Self {
        InFlight {
            table: Mutex::default(),
            gauge,
        }
    }

    /// Counts a request of `key` on its way to an origin, unless the client already has `max`.
    pub fn try_start(self: &Arc<Self>, key: IpAddr, max: u32, now: Instant) -> Option<Slot> {
        let mut guard = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let table = &mut *guard;
        if table.next_sweep.is_none_or(|due| now >= due) {
            table.next_sweep = Some(now + SWEEP_EVERY);
            let mut released = 0;
            table.clients.retain(|(_, entry)| {
                let before = entry.held.len();
                entry.held.retain(|until| *until > now);
                released += before - entry.held.len();
                entry.count() > 0
            });
            self.gauge.dec_by(released as i64);
        }
        let hasher = &table.hasher;
        let hash = hasher.hash_one(key);
        let (_, entry) = table
            .clients
            .entry(hash, |(k, _)| *k == key, |(k, _)| hasher.hash_one(k))
            .or_insert_with(|| (key, Entry::default()))
            .into_mut();
        if entry.count() >= max as usize {
            let before = entry.held.len();
            entry.held.retain(|until| *until > now);
            self.gauge.dec_by((before - entry.held.len()) as i64);
            if entry.count() >= max as usize {
                return None;
            }
        }
        entry.active += 1;
        self.gauge.inc();
        Some(Slot {
            table: self.clone(),
            key,
            hash,
            hold_until: None,
        })
    }

    /// The requests counted for `key` now, held ones included.
    #[cfg(test)]
    fn count(&self, key: IpAddr) -> usize {
        let table = self.table.lock().unwrap();
        let hash = table.hasher.hash_one(key);
        table
            .clients
            .find(hash, |(k, _)| *k == key)
            .map_or(0, |(_, entry)| entry.count())
    }
}

/// One request counted in flight; dropping it ends the count, or turns it into a held place.
pub struct Slot {
    table: Arc<InFlight>,
    key: IpAddr,
    /// `key`'s hash in the table.
    hash: u64,
    hold_until: Option<Instant>,
}

impl Slot {
    /// The client cancelled the request before the origin answered: keep its place until `until`.
    pub fn hold_until(&mut self, until: Instant) {
        self.hold_until = Some(until);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.table.table.lock().unwrap_or_else(|e| e.into_inner());
        let key = self.key;
        let Ok(mut found) = table.clients.find_entry(self.hash, |(k, _)| *k == key) else {
            return;
        };
        let (_, entry) = found.get_mut();
        entry.active = entry.active.saturating_sub(1);
        match self.hold_until {
            Some(until) => entry.held.push_back(until),
            None => {
                self.table.gauge.dec();
                if entry.count() == 0 {
                    found.remove();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Arc<InFlight> {
        Arc::new(InFlight::new(Gauge::default()))
    }

    #[test]
    fn a_client_has_at_most_its_share_in_flight() {
        let t = table();
        let key: IpAddr = "192.0.2.1".parse().unwrap();
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        let now = Instant::now();
        let a = t.try_start(key, 2, now).unwrap();
        let _b = t.try_start(key, 2, now).unwrap();
        assert!(t.try_start(key, 2, now).is_none());
        assert!(
            t.try_start(other, 2, now).is_some(),
            "others are not affected"
        );
        drop(a);
        assert!(t.try_start(key, 2, now).is_some());
    }

    #[test]
    fn a_cancelled_request_keeps_its_place_until_its_hold_ends() {
        let t = table();
        let key: IpAddr = "2001:db8::1".parse().unwrap();
        let now = Instant::now();
        let mut slot = t.try_start(key, 1, now).unwrap();
        slot.hold_until(now + Duration::from_secs(5));
        drop(slot);
        assert_eq!(t.gauge.get(), 1);
        assert!(t.try_start(key, 1, now + Duration::from_secs(4)).is_none());
        let later = t.try_start(key, 1, now + Duration::from_secs(6));
        assert!(later.is_some());
        drop(later);
        assert_eq!(t.count(key), 0);
        assert_eq!(t.gauge.get(), 0);
    }

    #[test]
    fn entries_of_clients_gone_quiet_are_swept() {
        let t = table();
        let now = Instant::now();
        for i in 0..1000u32 {
            let key = IpAddr::from(i.to_be_bytes());
            let mut slot = t.try_start(key, 4, now).unwrap();
            slot.hold_until(now + Duration::from_secs(1));
        }
        assert_eq!(t.table.lock().unwrap().clients.len(), 1000);
        let someone: IpAddr = "198.51.100.1".parse().unwrap();
        drop(t.try_start(someone, 4, now + Duration::from_secs(2)));
        assert!(t.table.lock().unwrap().clients.is_empty());
        assert_eq!(t.gauge.get(), 0);
    }
}
