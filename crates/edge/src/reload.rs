//! Live reload: on SIGHUP (and, when asked, when the policy file changes) compile the policy
//! anew and swap it in whole; a policy that does not validate leaves the old one serving.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use signpost_policy::{CompiledPolicy, Decision, OnError, ZoneId};
use tokio::signal::unix::{SignalKind, signal};

use crate::fleet::Fleet;
use crate::markdown::cache::ZoneCache;
use crate::metrics::{Metrics, ZoneMetrics};

/// A compiled policy together with what the metrics and the fleet rate limits need from it,
/// prepared once per load.
pub struct Loaded {
    /// The policy itself, which every stage of a request reads.
    pub policy: CompiledPolicy,
    /// Each zone's metric handles, in the order of `policy.zones()` (a `ZoneId`'s index).
    zone_metrics: Vec<ZoneMetrics>,
    /// The Redis client of fleet rate limits, when the policy has `[redis]`. A reload whose
    /// `[redis]` is unchanged keeps the client and its connection.
    fleet: Option<Arc<Fleet>>,
    /// How requests are identified, when the policy asks who is asking. A reload whose
    /// `[bots]` is unchanged keeps it, its caches and its background fetches.
    pub identifier: Option<Arc<crate::identify::Identifier>>,
    /// Each zone's converted-page cache (`[zone.markdown] cache`), in the order of
    /// `policy.zones()`. A reload keeps a zone's cache when the zone's Markdown settings and
    /// origin are unchanged, and starts it empty otherwise.
    markdown_caches: Vec<Option<Arc<ZoneCache>>>,
    /// The ledger of charged responses, when the policy has `[ledger]`. A reload naming the same
    /// directory keeps it (its writer holds the directory's lock).
    pub ledger: Option<Arc<crate::crawl::ledger::Ledger>>,
    /// The origins' robots.txt files, parsed, per zone; kept across reloads for the zones
    /// that remain.
    pub robots: Arc<crate::crawl::robots::RobotsStore>,
    /// The counters of the policy's rules, by rule id.
    pub rules: crate::rules::RuleCounters,
}

impl Loaded {
    /// Reads and compiles the policy file; `previous` hands over rate-limit state.
    pub fn load(
        path: &std::path::Path,
        previous: Option<&Loaded>,
        metrics: &Arc<Metrics>,
    ) -> Result<Loaded, signpost_policy::PolicyError> {
        let policy = CompiledPolicy::load(path, previous.map(|p| &p.policy))?;
        let zone_metrics = policy
            .zones()
            .iter()
            .map(|z| metrics.zone(&z.name))
            .collect();
        let fleet = policy.redis().and_then(|config| {
            let kept = previous
                .and_then(|p| p.fleet.as_ref())
                .filter(|f| f.config() == config);
            match kept {
                Some(f) => Some(Arc::clone(f)),
                None => Fleet::start(config)
                    .map_err(|e| {
                        tracing::error!("cannot start the Redis client, fleet rate limits fall back to on_error: {e}");
                    })
                    .ok(),
            }
        });
        let identifier = policy.bots().and_then(|config| {
            let kept = previous
                .and_then(|p| p.identifier.as_ref())
                .filter(|i| i.config() == config);
            let identifier = match kept {
                Some(i) => Some(Arc::clone(i)),
                None => crate::identify::Identifier::start(config, &metrics.identity)
                    .map_err(|e| {
                        tracing::error!(
                            "cannot identify requests, every signature reads unverified: {e}"
                        );
                    })
                    .ok(),
            };
            if let (Some(identifier), Some(catalog)) = (&identifier, policy.bot_catalog()) {
                identifier.watch(catalog);
            }
            identifier
        });
        let markdown_caches = policy
            .zones()
            .iter()
            .map(|zone| markdown_cache_of(zone, previous, metrics))
            .collect();
        let ledger = ledger_of(&policy, previous, metrics)?;
        let robots = previous.map_or_else(Default::default, |p| Arc::clone(&p.robots));
        let zone_names: Vec<Arc<str>> = policy.zones().iter().map(|z| z.name.clone()).collect();
        robots.retain_zones(&zone_names);
        // Last: nothing after this refuses the policy, which now serves (or is about to).
        let rules = metrics.rules.for_policy(&policy);
        metrics.observe_policy(&policy);
        Ok(Loaded {
            policy,
            zone_metrics,
            fleet,
            identifier,
            markdown_caches,
            ledger,
            robots,
            rules,
        })
    }

    /// The metric handles of the zone `id` names.
    pub fn zone_metrics(&self, id: ZoneId) -> Option<&ZoneMetrics> {
        self.zone_metrics.get(id.index())
    }

    /// The converted-page cache of the zone `id` names, when it caches.
    pub fn markdown_cache(&self, id: ZoneId) -> Option<&Arc<ZoneCache>> {
        self.markdown_caches.get(id.index())?.as_ref()
    }

    /// The converted-page cache of the zone named `name`: `Err` when no zone has that name,
    /// `Ok(None)` when the zone does not cache.
    pub fn markdown_cache_named(&self, name: &str) -> Result<Option<&Arc<ZoneCache>>, ()> {
        let index = self
            .policy
            .zones()
            .iter()
            .position(|z| &*z.name == name)
            .ok_or(())?;
        Ok(self.markdown_caches[index].as_ref())
    }

    /// Every zone's converted-page cache.
    pub fn markdown_caches(&self) -> impl Iterator<Item = &ZoneCache> {
        self.markdown_caches.iter().flatten().map(|c| &**c)
    }

    /// Counts the decision's fleet rate limits as the policy's fleet step hands them out: Redis
    /// answers each (or its `on_error` fallback, when Redis cannot), and the step decides.
    pub async fn count_in_fleet(&self, decision: &mut Decision, metrics: &Metrics) {
        let mut count = decision.count_in_fleet();
        while let Some(check) = count.next_check() {
            let verdict = match &self.fleet {
                Some(fleet) => fleet.count(check, &metrics.fleet).await,
                None => {
                    let action = self.policy.redis().map_or(OnError::Local, |r| r.on_error);
                    metrics.fleet.fallback("connection", action.as_str());
                    check.fallback(action, Instant::now())
                }
            };
            count.answer(verdict);
        }
    }

    /// Counts the answer to a request that rules counting answers let through (the decision's
    /// `answers`): the policy counts those of this instance, and hands back the fleet ones, each
    /// counted here in Redis (or by its `on_error` fallback). Redis's verdicts only fill the
    /// policy's cache of refused keys: the answer has gone out.
    pub async fn count_answers(
        &self,
        answers: &[signpost_policy::AnswerCount],
        facts: &signpost_policy::RequestFacts<'_>,
        client_ip: std::net::IpAddr,
        identity: Option<&signpost_policy::Identity>,
        response: signpost_policy::ResponseFacts,
        metrics: &Metrics,
    ) {
        let checks = self.policy.count_answers(
            answers,
            facts,
            client_ip,
            identity,
            response,
            Instant::now(),
        );
        for check in &checks {
            match &self.fleet {
                Some(fleet) => {
                    let _ = fleet.count(check, &metrics.fleet).await;
                }
                None => {
                    let action = self.policy.redis().map_or(OnError::Local, |r| r.on_error);
                    metrics.fleet.fallback("connection", action.as_str());
                    let _ = check.fallback(action, Instant::now());
                }
            }
        }
    }
}

/// The connection cap reads the policy loaded now, per connection.
impl crate::connection::conncap::ConnectionPolicy for ArcSwap<Loaded> {
    fn connections(&self) -> signpost_policy::Connections {
        *self.load().policy.connections()
    }

    fn is_trusted_proxy(&self, peer: std::net::IpAddr) -> bool {
        self.load().policy.is_trusted_proxy(peer)
    }
}

/// The policy's ledger: the previous policy's when it names the same directory, else opened
/// (a directory that cannot be opened, or whose lock another process holds, refuses the policy,
/// so that no charge is ever made without a place to record it).
fn ledger_of(
    policy: &CompiledPolicy,
    previous: Option<&Loaded>,
    metrics: &Arc<Metrics>,
) -> Result<Option<Arc<crate::crawl::ledger::Ledger>>, signpost_policy::PolicyError> {
    let Some(config) = policy.ledger() else {
        return Ok(None);
    };
    if let Some((ledger, old)) = previous.and_then(|p| p.ledger.as_ref().zip(p.policy.ledger()))
        && old.dir == config.dir
    {
        if old != config {
            tracing::warn!("[ledger] rotation changes take effect only after a restart");
        }
        return Ok(Some(Arc::clone(ledger)));
    }
    let options = crate::crawl::ledger::LedgerOptions {
        rotate_bytes: config.rotate_bytes,
        rotate_every: Some(config.rotate_every),
        ..Default::default()
    };
    crate::crawl::ledger::Ledger::open(&config.dir, options, Some(metrics.ledger.clone()))
        .map(|l| Some(Arc::new(l)))
        .map_err(|e| {
            config.cannot_open(format!(
                "cannot open the ledger in {}: {e}",
                config.dir.display()
            ))
        })
}

/// A zone's converted-page cache: the previous policy's when the zone of the same name converted
/// with the same settings from the same origin (its entries are still the right Markdown), else
/// a new, empty one; `None` when the zone does not cache.
fn markdown_cache_of(
    zone: &signpost_policy::Zone,
    previous: Option<&Loaded>,
    metrics: &Metrics,
) -> Option<Arc<ZoneCache>> {
    let bytes = zone
        .markdown
        .cache_bytes
        .filter(|_| zone.markdown.enabled)?;
    let kept = previous.and_then(|p| {
        let index = p.policy.zones().iter().position(|z| {
            z.name == zone.name && z.markdown == zone.markdown && z.origin == zone.origin
        })?;
        p.markdown_caches[index].clone()
    });
    Some(kept.unwrap_or_else(|| {
        Arc::new(ZoneCache::new(
            zone.name.clone(),
            bytes,
            &metrics.markdown_cache,
        ))
    }))
}

/// How often `--watch` looks at the policy file.
///
/// Polling the file's modification time and length, rather than subscribing to inotify, also
/// sees the symlink swaps of Kubernetes ConfigMaps and edits on Docker bind mounts, where
/// inotify events are lost; a stat per second costs nothing.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

pub struct Reloader {
    path: PathBuf,
    policy: Arc<ArcSwap<Loaded>>,
    metrics: Arc<Metrics>,
    watch: bool,
    /// The TLS listeners' certificates, loaded again on every reload.
    certs: Arc<crate::connection::certs::Certificates>,
}

impl Reloader {
    pub fn new(
        path: PathBuf,
        policy: Arc<ArcSwap<Loaded>>,
        metrics: Arc<Metrics>,
        watch: bool,
        certs: Arc<crate::connection::certs::Certificates>,
    ) -> Reloader {
        Reloader {
            path,
            policy,
            metrics,
            watch,
            certs,
        }
    }

    /// Compiles the file against the current policy (so rate-limit state of unchanged rules
    /// carries over) and swaps it in; on failure logs every problem and keeps the old policy.
    fn reload(&self, why: &str) {
        let current = self.policy.load_full();
        let path = self.path.clone();
        match Loaded::load(&path, Some(&current), &self.metrics) {
            Ok(next) => {
                if next.policy.listeners() != current.policy.listeners() {
                    tracing::warn!(config = %path.display(), "listener changes take effect only after a restart");
                }
                self.policy.store(Arc::new(next));
                self.metrics.observe_reload(true);
                tracing::info!(config = %path.display(), trigger = why, "policy reloaded");
            }
            Err(err) => {
                self.metrics.observe_reload(false);
                tracing::error!(config = %path.display(), trigger = why, "policy rejected, the previous policy keeps serving:\n{err}");
            }
        }
        // The certificates the policy now serving names, read again: a renewed file is served
        // whether or not the policy changed.
        self.certs.reload(&self.policy.load().policy);
    }

    fn stamp(&self) -> Option<(SystemTime, u64)> {
        let meta = std::fs::metadata(&self.path).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    }
}

#[async_trait]
impl BackgroundService for Reloader {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut hangups = match signal(SignalKind::hangup()) {
            Ok(stream) => stream,
            Err(err) => {
                tracing::error!("cannot listen for SIGHUP, reload disabled: {err}");
                return;
            }
        };
        let mut ticker = tokio::time::interval(WATCH_INTERVAL);
        let mut last = self.stamp();
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = hangups.recv() => {
                    // Compiling blocks (files, large tables), but this service runs on a runtime of
                    // its own, apart from the workers that serve requests.
                    self.reload("SIGHUP");
                    last = self.stamp();
                }
                _ = ticker.tick(), if self.watch => {
                    let now = self.stamp();
                    if now != last {
                        last = now;
                        self.reload("file changed");
                    } else if self.certs.files_changed() {
                        self.certs.reload(&self.policy.load().policy);
                    }
                }
            }
        }
    }
}
