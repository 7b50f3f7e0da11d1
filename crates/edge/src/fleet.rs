//! Fleet-scope rate limits: one Redis call per counted request, through an atomic Lua script.
//!
//! The policy says which requests a fleet rule counts and under which key (`FleetCheck`); this
//! module asks Redis and hands the answer back to the policy. Design:
//!
//! - One multiplexed connection per process (`redis`'s `ConnectionManager`), shared by every
//!   worker; it reconnects by itself with backoff. A task pings Redis every second so that the
//!   connection comes back after a Redis restart even without traffic, and replaces a connection
//!   that stopped answering without being dropped (`STALE_PINGS`).
//! - The script (`EVALSHA`, loaded again on `NOSCRIPT` by `redis::Script`) takes the time from
//!   Redis (`TIME`), so instance clocks do not matter, and sets each key's expiry, so Redis holds
//!   nothing for keys that went quiet.
//! - Every call is bounded by the policy's `timeout`; past it, or on any error, the request gets
//!   the `on_error` fallback. A request never fails because of Redis.
//! - Failures are logged at most once per `LOG_EVERY` per process, each line worded by its cause
//!   and with the count of those not logged: one budget for requests that fell back, one for the
//!   keep-alive task's pings (so that a dead Redis is reported without traffic, and traffic does
//!   not hide it). Metrics count everything.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use signpost_policy::{FleetCheck, RedisConfig, Verdict, redact_url};

/// The counting script. KEYS[1]: the counter; ARGV: period ms, limit, mitigation ms.
/// Returns `{allowed (1|0), wait ms}`. State: a hash of `w` (window start, ms), `c` (count),
/// `b` (blocked until, ms), expiring when nothing in it matters any more.
const SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local period = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local mitigation = tonumber(ARGV[3])
local v = redis.call('HMGET', KEYS[1], 'w', 'c', 'b')
local w = tonumber(v[1])
local c = tonumber(v[2]) or 0
local b = tonumber(v[3]) or 0
if now < b then
  return {0, b - now}
end
if w == nil or now >= w + period then
  w = now
  c = 0
end
c = c + 1
if c <= limit then
  redis.call('HSET', KEYS[1], 'w', w, 'c', c, 'b', 0)
  redis.call('PEXPIRE', KEYS[1], w + period - now)
  return {1, 0}
end
if mitigation > 0 then
  b = now + mitigation
  redis.call('HSET', KEYS[1], 'w', b, 'c', 0, 'b', b)
  redis.call('PEXPIRE', KEYS[1], mitigation)
  return {0, mitigation}
end
redis.call('HSET', KEYS[1], 'w', w, 'c', c, 'b', 0)
redis.call('PEXPIRE', KEYS[1], w + period - now)
return {0, w + period - now}
"#;

/// The checking script, for a rule that counts answers: whether the key is being refused now,
/// counting nothing. KEYS[1]: the counter; ARGV: period ms, limit (the counting script's, one
/// less than the rule's). Returns `{allowed (1|0), wait ms}` as the counting script does.
const CHECK_SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local period = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local v = redis.call('HMGET', KEYS[1], 'w', 'c', 'b')
local w = tonumber(v[1])
local c = tonumber(v[2]) or 0
local b = tonumber(v[3]) or 0
if now < b then
  return {0, b - now}
end
if w ~= nil and now < w + period and c > limit then
  return {0, w + period - now}
end
return {1, 0}
"#;

/// At most one error log line per this long.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// How often the keep-alive task pings Redis.
const PING_EVERY: Duration = Duration::from_secs(1);

/// After this many pings in a row without an answer the connection is replaced by a new one.
///
/// `ConnectionManager` reconnects when the connection drops, but not when it merely stops
/// answering: a path that died without a reset (Redis or this edge moved to another address, a
/// firewall forgot the flow) would otherwise stall every call until the kernel gives up on the
/// socket, some 15 minutes later.
const STALE_PINGS: u32 = 3;

/// Why a call had no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// No answer within the policy's timeout.
    Timeout,
    /// No connection (refused, dropped, reconnecting).
    Connection,
    /// Redis answered with an error, or something unexpected.
    Error,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Timeout => "timeout",
            Cause::Connection => "connection",
            Cause::Error => "error",
        }
    }
}

/// What went wrong with one call or ping, finer than [`Cause`]: how a log line words it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    /// Nothing listens at Redis's address.
    Refused,
    /// The connection broke (reset, closed).
    Dropped,
    /// Connecting, or a read on the connection, timed out.
    TimedOut,
    /// Another I/O error on the way to Redis.
    Io(String),
    /// No answer within this long (the policy's timeout, or the keep-alive's).
    NoAnswer(Duration),
    /// Redis answered with an error, or with something unexpected.
    Error(String),
}

impl Failure {
    fn of(e: &redis::RedisError) -> Failure {
        // In this order: a refusal also counts as a dropped connection.
        if e.is_connection_refusal() {
            Failure::Refused
        } else if e.is_timeout() {
            Failure::TimedOut
        } else if e.is_connection_dropped() {
            Failure::Dropped
        } else if e.is_io_error() {
            Failure::Io(e.to_string())
        } else {
            Failure::Error(e.to_string())
        }
    }

    /// The metrics' coarser label.
    fn cause(&self) -> Cause {
        match self {
            Failure::NoAnswer(_) => Cause::Timeout,
            Failure::Error(_) => Cause::Error,
            Failure::Refused | Failure::Dropped | Failure::TimedOut | Failure::Io(_) => {
                Cause::Connection
            }
        }
    }

    /// The cause as a log line says it.
    fn describe(&self) -> String {
        match self {
            Failure::Refused => "connection refused".to_owned(),
            Failure::Dropped => "connection dropped".to_owned(),
            Failure::TimedOut => "connection timed out".to_owned(),
            Failure::Io(e) => format!("connection failed: {e}"),
            Failure::NoAnswer(within) => format!("no answer within {within:?}"),
            Failure::Error(e) => format!("error: {e}"),
        }
    }
}

/// The keep-alive task's account of its pings: when to replace the connection, and what to log.
#[derive(Debug, Default)]
struct KeepAlive {
    /// Pings in a row without an answer.
    unanswered: u32,
}

/// What the keep-alive task does after one ping.
#[derive(Debug, PartialEq, Eq)]
struct AfterPing {
    /// Replace the connection with a new one (see [`STALE_PINGS`]).
    replace: bool,
    /// The line to log and the number of lines not logged before it, when the ping failed and
    /// the log's budget allows a line.
    log: Option<(String, u64)>,
}

impl KeepAlive {
    /// Accounts for one ping's outcome at `now` (ms, as [`LogGate::admit_at`] takes it).
    fn after_ping(&mut self, ping: Result<(), Failure>, log: &LogGate, now: u64) -> AfterPing {
        let failure = match ping {
            Ok(()) => {
                self.unanswered = 0;
                return AfterPing {
                    replace: false,
                    log: None,
                };
            }
            Err(failure) => failure,
        };
        self.unanswered += 1;
        let replace = self.unanswered >= STALE_PINGS;
        if replace {
            self.unanswered = 0;
        }
        let log = log.admit_at(now).map(|skipped| {
            let line = match (&failure, replace) {
                (Failure::NoAnswer(_) | Failure::TimedOut, true) => format!(
                    "Redis stopped answering on its connection ({}, {STALE_PINGS} pings in a row): opening a new one",
                    failure.describe()
                ),
                (_, true) => format!(
                    "Redis did not answer the keep-alive ping ({}, {STALE_PINGS} in a row): opening a new connection",
                    failure.describe()
                ),
                (_, false) => format!(
                    "Redis did not answer the keep-alive ping ({})",
                    failure.describe()
                ),
            };
            (line, skipped)
        });
        AfterPing { replace, log }
    }
}

/// The process's Redis client for fleet rules.
pub struct Fleet {
    config: RedisConfig,
    /// The connection, replaced by the keep-alive task when it stops answering (see
    /// [`STALE_PINGS`]).
    conn: ArcSwap<ConnectionManager>,
    client: redis::Client,
    manager_config: ConnectionManagerConfig,
    script: redis::Script,
    check_script: redis::Script,
}

/// The log budget of requests that fell back, shared by every `Fleet` of the process.
static CALL_FAILURES_LOG: LogGate = LogGate::new();
/// The log budget of the keep-alive task's failed pings and reconnections, shared likewise.
static CONNECTION_LOG: LogGate = LogGate::new();

/// The runtime that drives the keep-alive task, shared by every `Fleet` of the process and
/// never dropped (a runtime cannot be dropped from async code, where a reload may replace a
/// `Fleet`).
fn runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("signpost-redis")
            .enable_all()
            .build()
            .map_err(|e| tracing::error!("cannot start the Redis client's runtime: {e}"))
            .ok()
    })
    .as_ref()
}

impl Fleet {
    /// A client for `config`; connects in the background (Redis may be down at start).
    pub fn start(config: &RedisConfig) -> Result<Arc<Fleet>, String> {
        // rustls needs one process-wide crypto provider for `rediss://`; the edge uses ring.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut info = redis::IntoConnectionInfo::into_connection_info(config.url.as_str())
            .map_err(|e| format!("{}: {e}", redact_url(&config.url)))?;
        let mut settings = info.redis_settings().clone();
        if let Some(password) = &config.password {
            settings = settings.set_password(password.clone());
        }
        if let Some(db) = config.db {
            settings = settings.set_db(i64::from(db));
        }
        info = info.set_redis_settings(settings);
        let client = redis::Client::open(info).map_err(|e| e.to_string())?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_secs(1))
            .set_number_of_retries(3);
        let rt = runtime().ok_or("no runtime for the Redis client")?;
        let conn = {
            let _guard = rt.enter();
            ConnectionManager::new_lazy_with_config(client.clone(), manager_config.clone())
                .map_err(|e| e.to_string())?
        };
        let fleet = Arc::new(Fleet {
            config: config.clone(),
            conn: ArcSwap::from_pointee(conn),
            client,
            manager_config,
            script: redis::Script::new(SCRIPT),
            check_script: redis::Script::new(CHECK_SCRIPT),
        });
        let weak = Arc::downgrade(&fleet);
        rt.spawn(async move {
            let mut tick = tokio::time::interval(PING_EVERY);
            let mut keep_alive = KeepAlive::default();
            loop {
                tick.tick().await;
                let Some(fleet) = weak.upgrade() else { return };
                let mut conn = ConnectionManager::clone(&fleet.conn.load());
                let ping = match tokio::time::timeout(
                    PING_EVERY,
                    redis::cmd("PING").query_async::<()>(&mut conn),
                )
                .await
                {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(Failure::of(&e)),
                    Err(_) => Err(Failure::NoAnswer(PING_EVERY)),
                };
                let after = keep_alive.after_ping(ping, &CONNECTION_LOG, log_clock());
                if let Some((line, skipped)) = &after.log {
                    tracing::warn!(redis = %redact_url(&fleet.config.url), not_logged_since_last = skipped, "{line}");
                }
                if after.replace {
                    fleet.reconnect();
                }
            }
        });
        tracing::info!(redis = %redact_url(&config.url), timeout = ?config.timeout, on_error = config.on_error.as_str(), "fleet rate limits share counters in Redis");
        Ok(fleet)
    }

    /// Replaces the connection with a new one, made on its next use; the old one is dropped
    /// once the calls still holding it end (each within the policy's timeout).
    fn reconnect(&self) {
        match ConnectionManager::new_lazy_with_config(
            self.client.clone(),
            self.manager_config.clone(),
        ) {
            // The keep-alive task has logged why (within its budget).
            Ok(conn) => self.conn.store(Arc::new(conn)),
            Err(e) => {
                if let Some(skipped) = CONNECTION_LOG.admit() {
                    tracing::warn!(redis = %redact_url(&self.config.url), not_logged_since_last = skipped, "cannot open a new Redis connection: {e}");
                }
            }
        }
    }

    /// The configuration this client was started with (a reload keeps the client when equal).
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// Counts the request (or the answer) in Redis, or for a check that does not count
    /// ([`FleetCheck::counts`]) asks whether its key is refused; the policy's fallback when
    /// Redis does not answer in time.
    pub async fn count(&self, check: &FleetCheck, metrics: &FleetMetrics) -> Verdict {
        let started = Instant::now();
        let mut conn = ConnectionManager::clone(&self.conn.load());
        let script = if check.counts() {
            &self.script
        } else {
            &self.check_script
        };
        let mut invocation = script.key(check.key());
        invocation
            .arg(check.period_ms())
            .arg(check.limit())
            .arg(check.mitigation_ms());
        let call = invocation.invoke_async::<(i64, i64)>(&mut conn);
        let failure = match tokio::time::timeout(self.config.timeout, call).await {
            Ok(Ok((allowed, wait))) => {
                let allowed = allowed == 1;
                metrics.call(
                    if allowed { "allowed" } else { "refused" },
                    Some(started.elapsed()),
                );
                return check.shared(allowed, u64::try_from(wait).unwrap_or(0), Instant::now());
            }
            Ok(Err(e)) => Failure::of(&e),
            Err(_) => Failure::NoAnswer(self.config.timeout),
        };
        let cause = failure.cause();
        let action = self.config.on_error;
        metrics.call(cause.as_str(), None);
        metrics.fallback(cause.as_str(), action.as_str());
        if let Some(skipped) = CALL_FAILURES_LOG.admit() {
            tracing::warn!(
                redis = %redact_url(&self.config.url),
                cause = cause.as_str(),
                on_error = action.as_str(),
                rule = %check.rule_id(),
                not_logged_since_last = skipped,
                "Redis did not count a fleet rate limit, falling back: {}",
                failure.describe()
            );
        }
        check.fallback(action, Instant::now())
    }
}

/// Admits one log line per `LOG_EVERY`; counts the rest.
#[derive(Default)]
struct LogGate {
    /// Milliseconds since `epoch()` of the last line logged, plus one (0: never).
    last: AtomicU64,
    skipped: AtomicU64,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Now, as [`LogGate::admit_at`] takes it.
fn log_clock() -> u64 {
    u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1
}

impl LogGate {
    const fn new() -> LogGate {
        LogGate {
            last: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }

    /// `Some(lines skipped since the last one)` when a line may be logged now.
    fn admit(&self) -> Option<u64> {
        self.admit_at(log_clock())
    }

    /// `admit` at `now` (ms since `epoch()`, plus one).
    fn admit_at(&self, now: u64) -> Option<u64> {
        let last = self.last.load(Ordering::Relaxed);
        let every = u64::try_from(LOG_EVERY.as_millis()).unwrap_or(u64::MAX);
        if last != 0 && now.saturating_sub(last) < every {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if self
            .last
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.skipped.swap(0, Ordering::Relaxed))
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FallbackLabels {
    /// `timeout`, `connection` or `error`.
    cause: &'static str,
    /// The policy's `on_error`: `local`, `allow` or `refuse`.
    action: &'static str,
}

/// Fleet rate limits' metric families: Redis calls by outcome and time, and requests that fell
/// back to the policy's `on_error`.
#[derive(Clone)]
pub struct FleetMetrics {
    calls: Family<OutcomeLabel, Counter>,
    fallbacks: Family<FallbackLabels, Counter>,
    latency: Histogram,
}

impl FleetMetrics {
    pub fn register(registry: &mut Registry) -> FleetMetrics {
        let calls = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "fleet_calls",
            "Redis calls of fleet rate limits by outcome: allowed, refused (Redis answered), \
             timeout, connection, error (it did not)",
            calls.clone(),
        );
        let fallbacks = Family::<FallbackLabels, Counter>::default();
        registry.register(
            "fleet_fallbacks",
            "Requests a fleet rate limit could not count in Redis, by cause and by the on_error \
             action taken",
            fallbacks.clone(),
        );
        // 50 µs to ~100 ms: loopback to a distant Redis; the timeout is usually a few ms.
        let latency = Histogram::new(exponential_buckets(0.000_05, 2.0, 12));
        registry.register(
            "fleet_call_seconds",
            "Time of the Redis calls of fleet rate limits that Redis answered",
            latency.clone(),
        );
        FleetMetrics {
            calls,
            fallbacks,
            latency,
        }
    }

    /// One Redis call of a fleet rule: its outcome, and its time when Redis answered.
    pub fn call(&self, outcome: &'static str, latency: Option<Duration>) {
        self.calls.get_or_create(&OutcomeLabel { outcome }).inc();
        if let Some(latency) = latency {
            self.latency.observe(latency.as_secs_f64());
        }
    }

    /// A request a fleet rule could not count in Redis.
    pub fn fallback(&self, cause: &'static str, action: &'static str) {
        self.fallbacks
            .get_or_create(&FallbackLabels { cause, action })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_gate_admits_one_line_per_interval() {
        let gate = LogGate::default();
        assert_eq!(gate.admit_at(5), Some(0));
        assert_eq!(gate.admit_at(6), None);
        assert_eq!(gate.admit_at(5 + 9_999), None);
        assert_eq!(
            gate.admit_at(5 + 10_000),
            Some(2),
            "two lines were not logged"
        );
        assert_eq!(gate.admit_at(5 + 10_001), None);
    }

    /// Redis down for 12 s, pinged every second: at most one line per 10 s, the next one saying
    /// how many were not logged, each worded by its cause (a refusal is not a stalled
    /// connection). The connection is still replaced every third failed ping.
    #[test]
    fn a_refused_connection_is_logged_once_per_interval_by_its_cause() {
        let log = LogGate::default();
        let mut keep_alive = KeepAlive::default();
        let mut lines = Vec::new();
        let mut replaced = 0;
        for second in 0..12 {
            let after = keep_alive.after_ping(Err(Failure::Refused), &log, 1 + second * 1_000);
            replaced += u32::from(after.replace);
            lines.extend(after.log);
        }
        assert_eq!(replaced, 4);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0].1, 0);
        assert_eq!(lines[1].1, 9, "nine pings failed unlogged in between");
        for (line, _) in &lines {
            assert!(line.contains("connection refused"), "{line}");
            assert!(!line.contains("stopped answering"), "{line}");
        }
    }

    #[test]
    fn a_stalled_connection_is_replaced_after_three_unanswered_pings() {
        let log = LogGate::default();
        let mut keep_alive = KeepAlive::default();
        let no_answer = || Err(Failure::NoAnswer(PING_EVERY));
        let first = keep_alive.after_ping(no_answer(), &log, 1);
        assert!(!first.replace);
        let (line, _) = first.log.unwrap();
        assert!(line.contains("no answer within 1s"), "{line}");
        // An answer in between starts the count again.
        assert_eq!(
            keep_alive.after_ping(Ok(()), &log, 1_001),
            AfterPing {
                replace: false,
                log: None
            }
        );
        assert!(!keep_alive.after_ping(no_answer(), &log, 10_001).replace);
        assert!(!keep_alive.after_ping(no_answer(), &log, 10_500).replace);
        let third = keep_alive.after_ping(no_answer(), &log, 20_001);
        assert!(third.replace);
        let (line, skipped) = third.log.unwrap();
        assert!(line.contains("stopped answering"), "{line}");
        assert_eq!(skipped, 1);
        assert!(!keep_alive.after_ping(no_answer(), &log, 21_001).replace);
    }

    #[test]
    fn failures_are_named_by_cause_and_counted_as_before() {
        use std::io::{Error, ErrorKind};
        let of = |kind| Failure::of(&redis::RedisError::from(Error::from(kind)));
        assert_eq!(of(ErrorKind::ConnectionRefused), Failure::Refused);
        assert_eq!(of(ErrorKind::ConnectionReset), Failure::Dropped);
        assert_eq!(of(ErrorKind::TimedOut), Failure::TimedOut);
        for kind in [
            ErrorKind::ConnectionRefused,
            ErrorKind::ConnectionReset,
            ErrorKind::BrokenPipe,
            ErrorKind::TimedOut,
            ErrorKind::AddrNotAvailable,
        ] {
            assert_eq!(of(kind).cause(), Cause::Connection, "{kind:?}");
        }
        assert_eq!(
            Failure::NoAnswer(Duration::from_millis(5)).cause(),
            Cause::Timeout
        );
        assert_eq!(
            Failure::NoAnswer(Duration::from_millis(5)).describe(),
            "no answer within 5ms"
        );
        assert_eq!(Failure::Refused.describe(), "connection refused");
    }
}
