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
//! - Errors are logged at most once per `LOG_EVERY` per process, with the count of those not
//!   logged; metrics count everything.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use signpost_policy::{FleetCheck, RedisConfig, Verdict, redact_url};

use crate::metrics::Metrics;

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

/// The process's Redis client for fleet rules.
pub struct Fleet {
    config: RedisConfig,
    /// The connection, replaced by the keep-alive task when it stops answering (see
    /// [`STALE_PINGS`]).
    conn: ArcSwap<ConnectionManager>,
    client: redis::Client,
    manager_config: ConnectionManagerConfig,
    script: redis::Script,
    logs: LogGate,
}

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
            logs: LogGate::default(),
        });
        let weak = Arc::downgrade(&fleet);
        rt.spawn(async move {
            let mut tick = tokio::time::interval(PING_EVERY);
            let mut unanswered = 0;
            loop {
                tick.tick().await;
                let Some(fleet) = weak.upgrade() else { return };
                let mut conn = ConnectionManager::clone(&fleet.conn.load());
                let answered = tokio::time::timeout(
                    PING_EVERY,
                    redis::cmd("PING").query_async::<()>(&mut conn),
                )
                .await
                .is_ok_and(|r| r.is_ok());
                unanswered = if answered { 0 } else { unanswered + 1 };
                if unanswered >= STALE_PINGS {
                    unanswered = 0;
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
            Ok(conn) => {
                self.conn.store(Arc::new(conn));
                tracing::warn!(redis = %redact_url(&self.config.url), "Redis stopped answering on its connection: opening a new one");
            }
            Err(e) => {
                tracing::warn!(redis = %redact_url(&self.config.url), "cannot open a new Redis connection: {e}");
            }
        }
    }

    /// The configuration this client was started with (a reload keeps the client when equal).
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// Counts the request in Redis; the policy's fallback when Redis does not answer in time.
    pub async fn count(&self, check: &FleetCheck, metrics: &Metrics) -> Verdict {
        let started = Instant::now();
        let mut conn = ConnectionManager::clone(&self.conn.load());
        let mut invocation = self.script.key(check.key());
        invocation
            .arg(check.period_ms())
            .arg(check.limit())
            .arg(check.mitigation_ms());
        let call = invocation.invoke_async::<(i64, i64)>(&mut conn);
        let failure = match tokio::time::timeout(self.config.timeout, call).await {
            Ok(Ok((allowed, wait))) => {
                let allowed = allowed == 1;
                metrics.observe_fleet_call(
                    if allowed { "allowed" } else { "refused" },
                    Some(started.elapsed()),
                );
                return check.shared(allowed, u64::try_from(wait).unwrap_or(0), Instant::now());
            }
            Ok(Err(e)) => {
                let cause = if e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_timeout()
                {
                    Cause::Connection
                } else {
                    Cause::Error
                };
                (cause, e.to_string())
            }
            Err(_) => (
                Cause::Timeout,
                format!("no answer within {:?}", self.config.timeout),
            ),
        };
        let (cause, why) = failure;
        let action = self.config.on_error;
        metrics.observe_fleet_call(cause.as_str(), None);
        metrics.observe_fleet_fallback(cause.as_str(), action.as_str());
        if let Some(skipped) = self.logs.admit() {
            tracing::warn!(
                redis = %redact_url(&self.config.url),
                cause = cause.as_str(),
                on_error = action.as_str(),
                rule = %check.rule_id(),
                not_logged_since_last = skipped,
                "Redis did not count a fleet rate limit, falling back: {why}"
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

impl LogGate {
    /// `Some(lines skipped since the last one)` when a line may be logged now.
    fn admit(&self) -> Option<u64> {
        self.admit_at(u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1)
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
}
