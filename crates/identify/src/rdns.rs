//! Forward-confirmed reverse DNS (FCrDNS) of client addresses, for bots verified by the domain
//! their addresses resolve to (`crawl-66-249-66-1.googlebot.com`).
//!
//! A request never waits for DNS: [`ReverseDns::check`] answers from a bounded cache, and on a
//! miss starts one background check for the address and answers [`DnsCheck::Pending`]. The
//! check asks the PTR names of the address, then the A (or AAAA) records of at most
//! [`MAX_PTR_NAMES`] of them; the address is confirmed when one name resolves back to it. A
//! PTR record alone proves nothing: whoever controls an address's reverse zone can write any
//! name there, only the forward zone belongs to the domain's owner.
//!
//! Bounds: the cache holds at most `max_entries` addresses (least recently used evicted); at
//! most `max_in_flight` checks run at once (further misses answer `Pending` and start nothing);
//! each DNS query has a deadline of `timeout`, so a check ends within `(1 + MAX_PTR_NAMES) *
//! timeout`.
//!
//! A resolver failure (a timeout, SERVFAIL, REFUSED, no server reachable) says nothing about
//! the address, so it is answered `Pending` (not `Unconfirmed`: the edge's own DNS trouble
//! never marks a bot as an impostor) and is retried after `failure_ttl`; an answer the resolver
//! gave before is kept meanwhile.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolveHosts, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{Name, RData, RecordType};
use lru::LruCache;

use crate::OutcomeCounter;

/// How many of an address's PTR names are checked forward: real crawlers have one; a reverse
/// zone listing hundreds must not buy an attacker hundreds of lookups.
pub const MAX_PTR_NAMES: usize = 4;

/// How long an expired answer is still served while its refresh runs: a check takes at most
/// `(1 + MAX_PTR_NAMES) * timeout`, so a confirmed bot does not flicker to `Pending` each time
/// its TTL runs out.
const STALE_GRACE: Duration = Duration::from_secs(60);

/// What is known of an address's reverse DNS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DnsCheck {
    /// Not known yet (a check is running, could not start, or the resolver failed).
    Pending,
    /// The address has no PTR record.
    NoName,
    /// The address's PTR name resolves back to it: the name, lowercased, without a final dot.
    Confirmed(Arc<str>),
    /// The address has PTR names, and none of them resolves back to it.
    Unconfirmed,
}

/// Where to ask and what to keep.
#[derive(Clone, Debug)]
pub struct ReverseDnsConfig {
    /// The name servers to ask; `None`: the system's (`/etc/resolv.conf`).
    pub nameservers: Option<Vec<SocketAddr>>,
    /// The deadline of each DNS query.
    pub timeout: Duration,
    /// Answers are kept for their records' TTL, but at least this long...
    pub positive_ttl_floor: Duration,
    /// ... and at most this long.
    pub positive_ttl_ceiling: Duration,
    /// How long `NoName` and `Unconfirmed` are kept.
    pub negative_ttl: Duration,
    /// How long after a resolver failure the address is asked again.
    pub failure_ttl: Duration,
    /// Addresses kept in the cache.
    pub max_entries: usize,
    /// Checks running at once.
    pub max_in_flight: usize,
}

impl Default for ReverseDnsConfig {
    fn default() -> Self {
        ReverseDnsConfig {
            nameservers: None,
            timeout: Duration::from_secs(2),
            positive_ttl_floor: Duration::from_secs(60),
            positive_ttl_ceiling: Duration::from_secs(24 * 3600),
            negative_ttl: Duration::from_secs(300),
            failure_ttl: Duration::from_secs(30),
            max_entries: 100_000,
            max_in_flight: 64,
        }
    }
}

/// The verdict of one finished check, before it is cached.
#[derive(Debug)]
enum Outcome {
    Confirmed { host: Arc<str>, ttl: Duration },
    NoName,
    Unconfirmed,
    Failed,
}

impl Outcome {
    fn label(&self) -> &'static str {
        match self {
            Outcome::Confirmed { .. } => "confirmed",
            Outcome::NoName => "no_name",
            Outcome::Unconfirmed => "unconfirmed",
            Outcome::Failed => "failed",
        }
    }
}

struct Entry {
    answer: DnsCheck,
    /// Until when the answer is served without asking again.
    fresh_until: Instant,
    /// When the resolver last gave an answer for this address (`None`: only failures so far).
    answered_at: Option<Instant>,
}

struct State {
    cache: LruCache<IpAddr, Entry>,
    in_flight: HashSet<IpAddr>,
}

/// The cache and the background checks; one per process (its cache outlives policy reloads).
pub struct ReverseDns {
    /// `None` when the system's resolver configuration could not be read: every check fails.
    resolver: Option<TokioResolver>,
    config: ReverseDnsConfig,
    state: Mutex<State>,
    lookups: OutcomeCounter,
}

impl ReverseDns {
    /// A resolver for `config`, counting its checks in `lookups`
    /// (`signpost_reverse_dns_lookups_total{outcome}`).
    pub fn new(config: ReverseDnsConfig, lookups: OutcomeCounter) -> Arc<Self> {
        let resolver = build_resolver(&config)
            .map_err(|e| tracing::error!("reverse DNS is off: {e}"))
            .ok();
        let capacity = NonZeroUsize::new(config.max_entries).unwrap_or(NonZeroUsize::MIN);
        Arc::new(ReverseDns {
            resolver,
            state: Mutex::new(State {
                cache: LruCache::new(capacity),
                in_flight: HashSet::new(),
            }),
            config,
            lookups,
        })
    }

    /// Never awaits: answers from the cache; on a miss (or an expired answer) starts one
    /// background check for `ip`, unless one is running for it or `max_in_flight` are, and
    /// answers `Pending` (or the expired answer, within [`STALE_GRACE`]).
    pub fn check(self: &Arc<Self>, ip: IpAddr) -> DnsCheck {
        let ip = canonical(ip);
        let now = Instant::now();
        let mut state = self.lock();
        let stale = match state.cache.get(&ip) {
            Some(entry) if now < entry.fresh_until => return entry.answer.clone(),
            Some(entry) if now < entry.fresh_until + STALE_GRACE => Some(entry.answer.clone()),
            _ => None,
        };
        if !state.in_flight.contains(&ip) {
            if state.in_flight.len() >= self.config.max_in_flight {
                self.lookups.inc("busy");
            } else if let (Some(rt), Some(resolver)) =
                (crate::runtime::runtime(), self.resolver.clone())
            {
                state.in_flight.insert(ip);
                let this = Arc::clone(self);
                rt.spawn(async move {
                    // Removes the address from the in-flight set however the task ends.
                    let _running = InFlight { dns: &this, ip };
                    let outcome = forward_confirmed(&resolver, ip, this.config.timeout).await;
                    this.lookups.inc(outcome.label());
                    this.store(ip, outcome);
                });
            } else {
                self.lookups.inc("failed");
            }
        }
        stale.unwrap_or(DnsCheck::Pending)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Caches a finished check's verdict.
    fn store(&self, ip: IpAddr, outcome: Outcome) {
        let now = Instant::now();
        let config = &self.config;
        let mut state = self.lock();
        let entry = match outcome {
            Outcome::Confirmed { host, ttl } => Entry {
                answer: DnsCheck::Confirmed(host),
                fresh_until: now
                    + ttl
                        .max(config.positive_ttl_floor)
                        .min(config.positive_ttl_ceiling),
                answered_at: Some(now),
            },
            Outcome::NoName | Outcome::Unconfirmed => Entry {
                answer: if matches!(outcome, Outcome::NoName) {
                    DnsCheck::NoName
                } else {
                    DnsCheck::Unconfirmed
                },
                fresh_until: now + config.negative_ttl,
                answered_at: Some(now),
            },
            Outcome::Failed => {
                // The resolver's last answer stands (for at most a day past it) until it can
                // be asked again; without one, the address stays unknown.
                let kept = state.cache.peek(&ip).and_then(|old| {
                    let answered_at = old.answered_at?;
                    (now.duration_since(answered_at) < config.positive_ttl_ceiling)
                        .then(|| (old.answer.clone(), answered_at))
                });
                let (answer, answered_at) = match kept {
                    Some((answer, at)) => (answer, Some(at)),
                    None => (DnsCheck::Pending, None),
                };
                Entry {
                    answer,
                    fresh_until: now + config.failure_ttl,
                    answered_at,
                }
            }
        };
        state.cache.put(ip, entry);
    }
}

/// Takes an address out of the in-flight set when its check ends, aborted or not.
struct InFlight<'a> {
    dns: &'a ReverseDns,
    ip: IpAddr,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.dns.lock().in_flight.remove(&self.ip);
    }
}

fn build_resolver(config: &ReverseDnsConfig) -> Result<TokioResolver, String> {
    let rt = crate::runtime::runtime().ok_or("no runtime")?;
    // The resolver spawns its connections' tasks on the runtime it is built in.
    let _guard = rt.enter();
    let mut builder = match &config.nameservers {
        None => TokioResolver::builder_tokio()
            .map_err(|e| format!("cannot read the system's resolver configuration: {e}"))?,
        Some(servers) => {
            let servers = servers
                .iter()
                .map(|addr| {
                    let mut server = NameServerConfig::udp_and_tcp(addr.ip());
                    let mut udp = ConnectionConfig::udp();
                    udp.port = addr.port();
                    let mut tcp = ConnectionConfig::tcp();
                    tcp.port = addr.port();
                    server.connections = vec![udp, tcp];
                    server
                })
                .collect();
            TokioResolver::builder_with_config(
                ResolverConfig::from_name_servers(servers),
                TokioRuntimeProvider::default(),
            )
        }
    };
    let opts = builder.options_mut();
    opts.timeout = config.timeout;
    // One try per query: the deadline of a check is ours to state, and the next request for
    // the address retries after `failure_ttl` anyway.
    opts.attempts = 1;
    // Answers are cached here, per address; the resolver's own cache only has to help the
    // forward lookups of one check.
    opts.cache_size = 1024;
    // /etc/hosts must not confirm a crawler's name.
    opts.use_hosts_file = ResolveHosts::Never;
    builder.build().map_err(|e| e.to_string())
}

/// Asks the PTR names of `ip`, then whether one of them resolves back to `ip`.
async fn forward_confirmed(resolver: &TokioResolver, ip: IpAddr, timeout: Duration) -> Outcome {
    let started = Instant::now();
    let reverse =
        match tokio::time::timeout(timeout, resolver.lookup(Name::from(ip), RecordType::PTR)).await
        {
            Ok(Ok(lookup)) => lookup,
            Ok(Err(e)) if e.is_no_records_found() => return Outcome::NoName,
            Ok(Err(_)) | Err(_) => return Outcome::Failed,
        };
    let names: Vec<Name> = reverse
        .answers()
        .iter()
        .filter_map(|record| match &record.data {
            RData::PTR(ptr) if !ptr.0.is_root() => Some(ptr.0.clone()),
            _ => None,
        })
        .take(MAX_PTR_NAMES)
        .collect();
    if names.is_empty() {
        return Outcome::NoName;
    }
    let record_type = match ip {
        IpAddr::V4(_) => RecordType::A,
        IpAddr::V6(_) => RecordType::AAAA,
    };
    let mut failed = false;
    for mut name in names {
        // A PTR target is absolute: no search domain may be appended to it.
        name.set_fqdn(true);
        let forward =
            match tokio::time::timeout(timeout, resolver.lookup(name.clone(), record_type)).await {
                Ok(Ok(lookup)) => lookup,
                Ok(Err(e)) if e.is_no_records_found() => continue,
                Ok(Err(_)) | Err(_) => {
                    failed = true;
                    continue;
                }
            };
        let resolves_back = forward.answers().iter().any(|record| match &record.data {
            RData::A(a) => IpAddr::V4(a.0) == ip,
            RData::AAAA(aaaa) => IpAddr::V6(aaaa.0) == ip,
            _ => false,
        });
        if resolves_back {
            let valid_until = reverse.valid_until().min(forward.valid_until());
            return Outcome::Confirmed {
                host: host_name(&name),
                ttl: valid_until.saturating_duration_since(started),
            };
        }
    }
    // A name that could not be asked might have confirmed the address.
    if failed {
        Outcome::Failed
    } else {
        Outcome::Unconfirmed
    }
}

/// A PTR name as rules see it: ASCII (IDNs stay in their `xn--` form), lowercased, no final dot.
fn host_name(name: &Name) -> Arc<str> {
    let text = name.to_lowercase().to_ascii();
    Arc::from(text.strip_suffix('.').unwrap_or(&text))
}

/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) is asked and cached as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
#[path = "../../../tests/e2e/dns.rs"]
mod dns;

#[cfg(test)]
mod tests {
    use super::dns::{DnsRecord, Dnsmasq, silent_dns_server, start_dnsmasq};
    use super::*;
    use signpost_policy::host_in_suffixes;

    fn config(server: SocketAddr) -> ReverseDnsConfig {
        ReverseDnsConfig {
            nameservers: Some(vec![server]),
            timeout: Duration::from_millis(500),
            ..ReverseDnsConfig::default()
        }
    }

    /// Asks until the answer is no longer `Pending`, within `within`.
    fn settled(dns: &Arc<ReverseDns>, ip: IpAddr, within: Duration) -> DnsCheck {
        let deadline = Instant::now() + within;
        loop {
            let answer = dns.check(ip);
            if answer != DnsCheck::Pending || Instant::now() > deadline {
                return answer;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn ptr(ip_text: &str, name: &str) -> DnsRecord {
        DnsRecord::Ptr {
            ip: ip(ip_text),
            name: name.into(),
        }
    }

    fn address(name: &str, ip_text: &str) -> DnsRecord {
        DnsRecord::Address {
            name: name.into(),
            ip: ip(ip_text),
        }
    }

    /// The four cases of the brief against a real dnsmasq: a confirmed crawler (IPv4 and
    /// IPv6), an impostor whose PTR name resolves elsewhere, an address without PTR.
    fn bots() -> Option<Dnsmasq> {
        start_dnsmasq(
            &[
                ptr("192.0.2.10", "crawl-192-0-2-10.googlebot.test"),
                address("crawl-192-0-2-10.googlebot.test", "192.0.2.10"),
                ptr("2001:db8::10", "crawl-v6.googlebot.test"),
                address("crawl-v6.googlebot.test", "2001:db8::10"),
                // The impostor controls its reverse zone, not googlebot.test.
                ptr("198.51.100.7", "crawl-192-0-2-10.googlebot.test"),
                // Several names, the third one resolving back.
                ptr("203.0.113.5", "a.example.test"),
                ptr("203.0.113.5", "b.example.test"),
                ptr("203.0.113.5", "crawl.search.test"),
                address("a.example.test", "203.0.113.99"),
                address("crawl.search.test", "203.0.113.5"),
            ],
            300,
        )
    }

    #[test]
    fn forward_confirmed_reverse_dns_against_dnsmasq() {
        let Some(server) = bots() else { return };
        let lookups = OutcomeCounter::default();
        let dns = ReverseDns::new(config(server.addr), lookups.clone());
        let within = Duration::from_secs(5);

        assert_eq!(
            dns.check(ip("192.0.2.10")),
            DnsCheck::Pending,
            "a miss never waits"
        );
        let confirmed = settled(&dns, ip("192.0.2.10"), within);
        assert_eq!(
            confirmed,
            DnsCheck::Confirmed("crawl-192-0-2-10.googlebot.test".into())
        );
        let DnsCheck::Confirmed(host) = confirmed else {
            unreachable!()
        };
        assert!(host_in_suffixes(&host, &["googlebot.test"]));
        assert!(!host_in_suffixes(&host, &["bot.test"]));

        assert_eq!(
            settled(&dns, ip("2001:db8::10"), within),
            DnsCheck::Confirmed("crawl-v6.googlebot.test".into())
        );
        assert_eq!(
            settled(&dns, ip("::ffff:192.0.2.10"), within),
            DnsCheck::Confirmed("crawl-192-0-2-10.googlebot.test".into()),
            "an IPv4-mapped address is its IPv4 address"
        );
        assert_eq!(
            settled(&dns, ip("198.51.100.7"), within),
            DnsCheck::Unconfirmed,
            "a PTR name that resolves to another address"
        );
        assert_eq!(settled(&dns, ip("192.0.2.30"), within), DnsCheck::NoName);
        assert_eq!(
            settled(&dns, ip("203.0.113.5"), within),
            DnsCheck::Confirmed("crawl.search.test".into()),
            "the one name of several that resolves back"
        );

        // Five checks in all (the mapped address is the cached IPv4 one); answers come from
        // the cache from then on.
        assert_eq!(lookups.get("confirmed"), 3);
        assert_eq!(lookups.get("unconfirmed"), 1);
        assert_eq!(lookups.get("no_name"), 1);
        assert_eq!(lookups.get("failed"), 0);
        let log = server.stop_and_log();
        assert_eq!(
            log.matches("query[PTR] 10.2.0.192.in-addr.arpa").count(),
            1,
            "one PTR query for the confirmed address: {log}"
        );
    }

    #[test]
    fn concurrent_misses_start_one_check_per_address() {
        let Some(server) = bots() else { return };
        let lookups = OutcomeCounter::default();
        let dns = ReverseDns::new(config(server.addr), lookups.clone());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let dns = Arc::clone(&dns);
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        dns.check(ip("192.0.2.10"));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert!(matches!(
            settled(&dns, ip("192.0.2.10"), Duration::from_secs(5)),
            DnsCheck::Confirmed(_)
        ));
        assert_eq!(lookups.get("confirmed"), 1, "400 checks, one lookup");
        let log = server.stop_and_log();
        assert_eq!(log.matches("query[PTR]").count(), 1, "{log}");
    }

    #[test]
    fn a_silent_resolver_leaves_the_address_pending_and_is_not_asked_again_at_once() {
        let (addr, _udp, _tcp) = silent_dns_server();
        let lookups = OutcomeCounter::default();
        let dns = ReverseDns::new(
            ReverseDnsConfig {
                timeout: Duration::from_millis(200),
                failure_ttl: Duration::from_secs(60),
                ..config(addr)
            },
            lookups.clone(),
        );
        let started = Instant::now();
        assert_eq!(dns.check(ip("192.0.2.10")), DnsCheck::Pending);
        assert!(
            started.elapsed() < Duration::from_millis(50),
            "check never waits"
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while lookups.get("failed") == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(lookups.get("failed"), 1, "the lookup timed out");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "within its deadline: {:?}",
            started.elapsed()
        );
        for _ in 0..10 {
            assert_eq!(
                dns.check(ip("192.0.2.10")),
                DnsCheck::Pending,
                "a failure is neither a name nor an impostor"
            );
        }
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(lookups.get("failed"), 1, "no new lookup within failure_ttl");
    }

    #[test]
    fn checks_in_flight_are_bounded() {
        let (addr, _udp, _tcp) = silent_dns_server();
        let lookups = OutcomeCounter::default();
        let dns = ReverseDns::new(
            ReverseDnsConfig {
                timeout: Duration::from_secs(2),
                max_in_flight: 2,
                ..config(addr)
            },
            lookups.clone(),
        );
        for last in 1..=5u8 {
            assert_eq!(
                dns.check(IpAddr::from([192, 0, 2, last])),
                DnsCheck::Pending
            );
        }
        assert_eq!(lookups.get("busy"), 3, "two started, three turned away");
        assert_eq!(dns.lock().in_flight.len(), 2);
    }

    #[test]
    fn the_cache_is_bounded_and_evicts_the_least_recently_used() {
        let Some(server) = bots() else { return };
        let lookups = OutcomeCounter::default();
        let dns = ReverseDns::new(
            ReverseDnsConfig {
                max_entries: 2,
                ..config(server.addr)
            },
            lookups.clone(),
        );
        let within = Duration::from_secs(5);
        for last in [31u8, 32, 33] {
            assert_eq!(
                settled(&dns, IpAddr::from([192, 0, 2, last]), within),
                DnsCheck::NoName
            );
        }
        assert_eq!(dns.lock().cache.len(), 2);
        assert_eq!(
            dns.check(IpAddr::from([192, 0, 2, 31])),
            DnsCheck::Pending,
            "the oldest was evicted and is asked again"
        );
        assert_eq!(dns.check(IpAddr::from([192, 0, 2, 33])), DnsCheck::NoName);
    }

    #[test]
    fn an_expired_answer_is_served_while_it_is_refreshed() {
        // dnsmasq says an hour; the ceiling keeps it 300 ms.
        let Some(server) = start_dnsmasq(
            &[
                ptr("192.0.2.10", "crawl.googlebot.test"),
                address("crawl.googlebot.test", "192.0.2.10"),
            ],
            3600,
        ) else {
            return;
        };
        let lookups = OutcomeCounter::default();
        let dns = ReverseDns::new(
            ReverseDnsConfig {
                positive_ttl_floor: Duration::from_millis(100),
                positive_ttl_ceiling: Duration::from_millis(300),
                ..config(server.addr)
            },
            lookups.clone(),
        );
        let confirmed = DnsCheck::Confirmed("crawl.googlebot.test".into());
        assert_eq!(
            settled(&dns, ip("192.0.2.10"), Duration::from_secs(5)),
            confirmed
        );
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(dns.check(ip("192.0.2.10")), confirmed, "stale, not Pending");
        let deadline = Instant::now() + Duration::from_secs(5);
        while lookups.get("confirmed") < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(lookups.get("confirmed"), 2, "refreshed after the ceiling");
    }

    #[test]
    fn suffixes_match_on_label_boundaries() {
        let suffixes = vec!["googlebot.com".to_string(), ".search.msn.com.".to_string()];
        for host in [
            "crawl-66-249-66-1.googlebot.com",
            "googlebot.com",
            "CRAWL.GoogleBot.COM",
            "geo.googlebot.com.",
            "msnbot-1.search.msn.com",
        ] {
            assert!(host_in_suffixes(host, &suffixes), "{host}");
        }
        for host in [
            "evilgooglebot.com",
            "googlebot.com.evil.test",
            "com",
            "msn.com",
            "",
        ] {
            assert!(!host_in_suffixes(host, &suffixes), "{host}");
        }
        assert!(!host_in_suffixes("anything.test", &["", "."]));
        assert!(
            !host_in_suffixes("aé", &["x"]),
            "no panic off a char boundary"
        );
        // The policy keeps its suffixes as `Box<str>`.
        let boxed: Vec<Box<str>> = vec!["googlebot.com".into()];
        assert!(host_in_suffixes("crawl.googlebot.com", &boxed));
    }

    proptest::proptest! {
        #[test]
        fn suffix_matching_never_panics_and_agrees_with_labels(
            host in "[a-zA-Z0-9é.-]{0,30}",
            suffix in "[a-zA-Z0-9é.-]{0,12}",
        ) {
            let matched = host_in_suffixes(&host, std::slice::from_ref(&suffix));
            let (h, s) = (host.to_ascii_lowercase(), suffix.to_ascii_lowercase());
            let h = h.strip_suffix('.').unwrap_or(&h);
            let s = s.trim_start_matches('.');
            let s = s.strip_suffix('.').unwrap_or(s);
            let expected = !s.is_empty() && (h == s || h.ends_with(&format!(".{s}")));
            proptest::prop_assert_eq!(matched, expected, "{} in {}", host, suffix);
        }
    }

    #[test]
    fn host_names_are_lowercased_without_the_final_dot() {
        let name = Name::from_ascii("Crawl-1.GoogleBot.COM.").unwrap();
        assert_eq!(&*host_name(&name), "crawl-1.googlebot.com");
    }
}
