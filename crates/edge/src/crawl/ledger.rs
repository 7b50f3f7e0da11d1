//! The ledger of charged responses: one JSON line per response the edge charged a crawler for
//! (pay per crawl), in an append-only file that survives a crash and a restart without losing or
//! duplicating an acknowledged record.
//!
//! # When a record counts as written
//!
//! A record is written when the `write` of its line and the `fdatasync` after it have both
//! returned: [`Ledger::record`] resolves only then. The edge awaits it after the origin's
//! response header has been judged a success and before it sends the response header with
//! `crawler-charged`: that header is the crawler's receipt, so no client may hold a receipt the
//! ledger could lose; and not earlier, because only a successful response is charged and its
//! price may come from the origin's own header. A crash after the write and before the
//! response leaves a record whose receipt never went out (at most the records in flight, which
//! the queue bounds); a crash before the `fdatasync` returned loses only records nobody was told
//! about.
//!
//! # Group commit
//!
//! One writer thread owns the file (so it is the lock that rotation happens under). It takes
//! the first waiting record, then every record already queued behind it up to
//! [`LedgerOptions::max_batch`], writes them with one `write` and makes them durable with one
//! `fdatasync`. It does not wait for more: a fixed window would add its length to every charge
//! when traffic is light, and under load the `fdatasync` itself is the window (records arriving
//! during one sync go together in the next).
//!
//! # Bounds and failures
//!
//! The queue holds [`LedgerOptions::queue`] records. When it is full, [`Ledger::record`] fails
//! at once with [`LedgerError::Full`]: the charge is refused (`crawler-error: InternalError`,
//! 500, retry with backoff) rather than served unrecorded. A failed write or sync is undone by
//! truncating the file to its last durable length, and the batch's records fail the same way;
//! if even that fails, the ledger refuses every later record.
//!
//! # Recovery and rotation
//!
//! On open, a last line that is incomplete or does not parse (it was never acknowledged) is cut
//! off, with everything after it. The live file is `ledger.jsonl`; when it reaches
//! [`LedgerOptions::rotate_bytes`] or is older than [`LedgerOptions::rotate_every`], the writer
//! renames it `ledger-<sequence>-<UTC time>.jsonl` (the sequence zero-padded to ten digits,
//! so that name order is sequence order whatever the clock does) and opens a new one: a record
//! is in exactly one file, and reading the rotated files in name order, then `ledger.jsonl`,
//! reads every record once, oldest first. A lock file keeps a second process off the same directory.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use signpost_policy::{CURRENCY, Price};

/// The live file's name.
pub const LEDGER_FILE: &str = "ledger.jsonl";
/// The lock file's name.
const LOCK_FILE: &str = "ledger.lock";
/// How many times, and how far apart, opening retries a lock held by someone else.
const LOCK_TRIES: u32 = 20;
const LOCK_RETRY: Duration = Duration::from_millis(50);
/// The longest line the ledger reads back; a longer one can only be damage (a record's fields
/// are bounded by the request's own limits, far below this).
const MAX_LINE: u64 = 1024 * 1024;

/// How the ledger batches and rotates.
#[derive(Clone, Debug)]
pub struct LedgerOptions {
    /// Records waiting for the writer, at most; more are refused.
    pub queue: usize,
    /// Records written and synced together, at most.
    pub max_batch: usize,
    /// Rotate the live file once it holds this many bytes.
    pub rotate_bytes: u64,
    /// Rotate the live file once it is this old (from when it was opened), if set.
    pub rotate_every: Option<Duration>,
}

impl Default for LedgerOptions {
    fn default() -> Self {
        LedgerOptions {
            queue: 4096,
            max_batch: 64,
            rotate_bytes: 64 * 1024 * 1024,
            rotate_every: Some(Duration::from_secs(24 * 60 * 60)),
        }
    }
}

/// One charged response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerRecord {
    /// When the charge was decided.
    pub time: SystemTime,
    /// The request's ray id.
    pub ray_id: String,
    /// The zone's name.
    pub zone: Arc<str>,
    /// The crawler's catalog name.
    pub crawler: String,
    /// The Web Bot Auth key directory (`Signature-Agent`) that vouched for it.
    pub directory: String,
    /// The key id of the signature.
    pub key_id: String,
    /// The request's path and query.
    pub path: String,
    /// What was charged.
    pub price: Price,
}

impl LedgerRecord {
    /// The record as one JSON line, newline included. JSON escaping keeps any byte of the
    /// request (a path with a newline, say) inside its string.
    fn to_line(&self) -> Vec<u8> {
        let value = serde_json::json!({
            "time": humantime::format_rfc3339_millis(self.time).to_string(),
            "ray_id": self.ray_id,
            "zone": &*self.zone,
            "crawler": self.crawler,
            "directory": self.directory,
            "key_id": self.key_id,
            "path": self.path,
            "price_cents": self.price.cents(),
            "currency": CURRENCY,
        });
        let mut line = value.to_string().into_bytes();
        line.push(b'\n');
        line
    }
}

/// Why a record was not written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LedgerError {
    /// The queue is full: refuse the charge, the crawler retries later.
    Full,
    /// Writing or syncing failed; the record is not in the ledger.
    Io(String),
    /// The writer has stopped.
    Closed,
}

impl std::fmt::Display for LedgerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LedgerError::Full => f.write_str("the ledger's queue is full"),
            LedgerError::Io(why) => write!(f, "the ledger could not write: {why}"),
            LedgerError::Closed => f.write_str("the ledger is closed"),
        }
    }
}

impl std::error::Error for LedgerError {}

struct Pending {
    line: Vec<u8>,
    done: tokio::sync::oneshot::Sender<Result<(), LedgerError>>,
}

/// A crawler, by catalog name: the label set is bounded by the catalog (at most
/// `signpost_policy::MAX_BOTS` names), whatever the requests claim.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CrawlerLabel {
    crawler: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

impl LedgerError {
    /// The error as the failures metric labels it.
    fn reason(&self) -> &'static str {
        match self {
            LedgerError::Full => "full",
            LedgerError::Io(_) => "io",
            LedgerError::Closed => "closed",
        }
    }
}

/// The ledger's metric families: cents charged (pay per crawl) and recorded, per crawler; and
/// charges the ledger could not record, by reason.
#[derive(Clone)]
pub struct LedgerMetrics {
    charged_cents: Family<CrawlerLabel, Counter>,
    failures: Family<ReasonLabel, Counter>,
}

impl LedgerMetrics {
    pub fn register(registry: &mut Registry) -> LedgerMetrics {
        let charged_cents = Family::<CrawlerLabel, Counter>::default();
        registry.register(
            "crawler_charged_cents",
            "US cents charged to crawlers (pay per crawl) and recorded in the ledger, by crawler \
             (catalog names; other for the rest)",
            charged_cents.clone(),
        );
        let failures = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "ledger_failures",
            "Charges the ledger could not record, so refused (the crawler may retry), by reason: \
             full (its queue), io (a write or sync failed), closed (its writer stopped)",
            failures.clone(),
        );
        // Every reason from the start, at 0: an alert reads its rate before any failure.
        for error in [
            LedgerError::Full,
            LedgerError::Io(String::new()),
            LedgerError::Closed,
        ] {
            drop(failures.get_or_create(&ReasonLabel {
                reason: error.reason(),
            }));
        }
        LedgerMetrics {
            charged_cents,
            failures,
        }
    }

    /// A charge the ledger could not record.
    fn failed(&self, error: &LedgerError) {
        self.failures
            .get_or_create(&ReasonLabel {
                reason: error.reason(),
            })
            .inc();
    }

    /// A charge recorded in the ledger, by the crawler's catalog name.
    fn charged(&self, crawler: &Arc<str>, cents: u64) {
        self.charged_cents
            .get_or_create(&CrawlerLabel {
                crawler: Arc::clone(crawler),
            })
            .inc_by(cents);
    }
}

/// The append-only ledger; cheap to share behind an `Arc`.
pub struct Ledger {
    queue: SyncSender<Pending>,
    metrics: Option<LedgerMetrics>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Ledger {
    /// Opens (or creates) the ledger in `dir`: takes its lock, cuts a torn last line, and starts
    /// the writer thread. `metrics`, when given, counts the charged cents per crawler.
    pub fn open(
        dir: &Path,
        options: LedgerOptions,
        metrics: Option<LedgerMetrics>,
    ) -> io::Result<Ledger> {
        std::fs::create_dir_all(dir)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK_FILE))?;
        // A few tries: a child process forked by this one (between its fork and its exec)
        // shares the lock for a moment after this process let go of it.
        let mut tries = 0;
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) if tries < LOCK_TRIES => {
                    tries += 1;
                    std::thread::sleep(LOCK_RETRY);
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!("another process holds the ledger in {}", dir.display()),
                    ));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        let (file, len) = open_live(dir)?;
        let (queue, rx) = std::sync::mpsc::sync_channel(options.queue.max(1));
        let mut writer = Writer {
            dir: dir.to_path_buf(),
            file,
            len,
            opened: Instant::now(),
            options,
            failed: None,
            _lock: lock,
        };
        let writer = std::thread::Builder::new()
            .name("signpost-ledger".into())
            .spawn(move || writer.run(rx))?;
        Ok(Ledger {
            queue,
            metrics,
            writer: Some(writer),
        })
    }

    /// Appends `record` and resolves once it is durable (see the module's doc). Fails at once
    /// when the queue is full. `crawler_label` is the crawler's catalog name for the metric.
    pub async fn record(
        &self,
        record: &LedgerRecord,
        crawler_label: &Arc<str>,
    ) -> Result<(), LedgerError> {
        let recorded = self.append(record).await;
        if let Some(metrics) = &self.metrics {
            match &recorded {
                Ok(()) => metrics.charged(crawler_label, record.price.cents()),
                Err(e) => metrics.failed(e),
            }
        }
        recorded
    }

    /// Queues `record` and waits until the writer has made it durable, or failed to.
    async fn append(&self, record: &LedgerRecord) -> Result<(), LedgerError> {
        let (done, wait) = tokio::sync::oneshot::channel();
        let pending = Pending {
            line: record.to_line(),
            done,
        };
        match self.queue.try_send(pending) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(LedgerError::Full),
            Err(TrySendError::Disconnected(_)) => return Err(LedgerError::Closed),
        }
        wait.await.unwrap_or(Err(LedgerError::Closed))
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        // Closing the queue ends the writer after it has written what was queued.
        let (closed, _) = std::sync::mpsc::sync_channel(1);
        drop(std::mem::replace(&mut self.queue, closed));
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

/// Opens `ledger.jsonl` for appending after cutting anything past its last good line.
fn open_live(dir: &Path) -> io::Result<(File, u64)> {
    let path = dir.join(LEDGER_FILE);
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .append(true)
        .open(&path)?;
    let good = good_length(&mut file)?;
    if good != file.metadata()?.len() {
        tracing::warn!(
            file = %path.display(),
            kept = good,
            "ledger: cut an incomplete last record (it was never acknowledged)"
        );
        file.set_len(good)?;
        file.sync_all()?;
    }
    sync_dir(dir)?;
    Ok((file, good))
}

/// The length of the file's prefix made of whole lines that parse as JSON objects. Every
/// acknowledged batch was synced before the next was written, so anything after the first bad
/// line belongs to a batch nobody was told about.
fn good_length(file: &mut File) -> io::Result<u64> {
    use std::io::Seek;
    file.seek(io::SeekFrom::Start(0))?;
    let mut reader = BufReader::new(&*file);
    let mut good = 0u64;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .by_ref()
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)?;
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        let whole = serde_json::from_slice::<serde_json::Value>(&line[..n - 1])
            .is_ok_and(|v| v.is_object());
        if !whole {
            break;
        }
        good += n as u64;
    }
    Ok(good)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

struct Writer {
    dir: PathBuf,
    file: File,
    /// Bytes of `file` that are durable.
    len: u64,
    opened: Instant,
    options: LedgerOptions,
    /// Set when a failed write could not be undone: every later record is refused.
    failed: Option<String>,
    _lock: File,
}

impl Writer {
    fn run(&mut self, rx: Receiver<Pending>) {
        let mut batch: Vec<Pending> = Vec::with_capacity(self.options.max_batch);
        let mut buf = Vec::new();
        loop {
            // Wake at least every second so that a quiet ledger still rotates on time.
            let first = match rx.recv_timeout(Duration::from_secs(1)) {
                Ok(p) => p,
                Err(RecvTimeoutError::Timeout) => {
                    self.maybe_rotate();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            };
            batch.push(first);
            while batch.len() < self.options.max_batch {
                match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(_) => break,
                }
            }
            buf.clear();
            for p in &batch {
                buf.extend_from_slice(&p.line);
            }
            let result = self.append(&buf);
            for p in batch.drain(..) {
                // A caller that went away (its request was cancelled) does not need the answer.
                let _ = p.done.send(result.clone());
            }
            self.maybe_rotate();
        }
    }

    fn append(&mut self, buf: &[u8]) -> Result<(), LedgerError> {
        if let Some(why) = &self.failed {
            return Err(LedgerError::Io(why.clone()));
        }
        let written = self
            .file
            .write_all(buf)
            .and_then(|()| self.file.sync_data());
        match written {
            Ok(()) => {
                self.len += buf.len() as u64;
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "ledger: write failed; the batch's charges are refused");
                // Undo the partial batch so that no half line or unacknowledged record stays.
                if let Err(undo) = self
                    .file
                    .set_len(self.len)
                    .and_then(|()| self.file.sync_data())
                {
                    self.failed = Some(format!("{e}; undoing it failed: {undo}"));
                }
                Err(LedgerError::Io(e.to_string()))
            }
        }
    }

    fn maybe_rotate(&mut self) {
        let by_size = self.len >= self.options.rotate_bytes;
        let by_age = self
            .options
            .rotate_every
            .is_some_and(|every| self.opened.elapsed() >= every && self.len > 0);
        if self.failed.is_some() || !(by_size || by_age) {
            return;
        }
        if let Err(e) = self.rotate() {
            // The live file stays as it is and keeps growing; the next batch tries again.
            tracing::error!(error = %e, "ledger: rotation failed");
        }
    }

    /// Renames the live file aside and opens a new one. Every record already in the file is
    /// durable (the writer rotates between batches), and the rename is atomic, so each record
    /// is in exactly one file.
    fn rotate(&mut self) -> io::Result<()> {
        // The sequence number orders the files, whatever the clock does (two rotations in one
        // millisecond, a clock set back); the time is for people.
        let sequence = rotated_files(&self.dir)?
            .iter()
            .filter_map(|p| rotated_sequence(p))
            .max()
            .map_or(1, |n| n + 1);
        let stamp = humantime::format_rfc3339_millis(SystemTime::now())
            .to_string()
            .replace([':', '-'], "");
        let target = self
            .dir
            .join(format!("ledger-{sequence:010}-{stamp}.jsonl"));
        std::fs::rename(self.dir.join(LEDGER_FILE), &target)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .append(true)
            .open(self.dir.join(LEDGER_FILE))?;
        sync_dir(&self.dir)?;
        self.file = file;
        self.len = 0;
        self.opened = Instant::now();
        Ok(())
    }
}

/// The rotated files of the ledger in `dir`, in no particular order.
fn rotated_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| rotated_sequence(p).is_some())
        .collect())
}

/// The sequence number of a rotated file, `ledger-<sequence>-<UTC time>.jsonl`.
fn rotated_sequence(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    let rest = name.strip_prefix("ledger-")?.strip_suffix(".jsonl")?;
    rest.split('-').next()?.parse().ok()
}

/// Every file of the ledger in `dir`, oldest first: the rotated files in sequence order, then
/// the live one.
#[cfg(test)]
pub fn ledger_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut rotated = rotated_files(dir)?;
    rotated.sort_by_key(|p| rotated_sequence(p));
    let live = dir.join(LEDGER_FILE);
    if live.exists() {
        rotated.push(live);
    }
    Ok(rotated)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "signpost-ledger-{name}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn record(seq: u64) -> LedgerRecord {
        LedgerRecord {
            time: SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000),
            ray_id: format!("seq-{seq}"),
            zone: Arc::from("example"),
            crawler: "ExampleBot".into(),
            directory: "https://crawler.example".into(),
            key_id: "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U".into(),
            path: format!("/page/{seq}?q=\"x\"\n"),
            price: Price::from_cents(1).unwrap(),
        }
    }

    /// Every line of every ledger file, parsed; panics on a line that does not parse.
    fn read_all(dir: &Path) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        for path in ledger_files(dir).unwrap() {
            let text = std::fs::read(&path).unwrap();
            assert!(
                text.is_empty() || text.ends_with(b"\n"),
                "{}",
                path.display()
            );
            for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                out.push(serde_json::from_slice(line).unwrap_or_else(|e| {
                    panic!("{}: {e}: {}", path.display(), String::from_utf8_lossy(line))
                }));
            }
        }
        out
    }

    fn seq_of(v: &serde_json::Value) -> u64 {
        v["ray_id"].as_str().unwrap()["seq-".len()..]
            .parse()
            .unwrap()
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn records_are_json_lines_that_survive_a_reopen() {
        let dir = temp_dir("lines");
        let mut registry = Registry::with_prefix("signpost");
        let metrics = LedgerMetrics::register(&mut registry);
        runtime().block_on(async {
            let ledger =
                Ledger::open(&dir, LedgerOptions::default(), Some(metrics.clone())).unwrap();
            for seq in 0..3 {
                ledger
                    .record(&record(seq), &Arc::from("ExampleBot"))
                    .await
                    .unwrap();
            }
            ledger
                .record(&record(3), &Arc::from("OtherBot"))
                .await
                .unwrap();
        });
        let all = read_all(&dir);
        assert_eq!(all.len(), 4);
        let first = &all[0];
        assert_eq!(first["time"], "2026-11-18T11:06:40.000Z");
        assert_eq!(first["zone"], "example");
        assert_eq!(first["crawler"], "ExampleBot");
        assert_eq!(first["directory"], "https://crawler.example");
        assert_eq!(first["path"], "/page/0?q=\"x\"\n");
        assert_eq!(first["price_cents"], 1);
        assert_eq!(first["currency"], "USD");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("signpost_crawler_charged_cents_total{crawler=\"ExampleBot\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("signpost_crawler_charged_cents_total{crawler=\"OtherBot\"} 1"),
            "{text}"
        );
        // Reopened, the ledger appends after what is there.
        runtime().block_on(async {
            let ledger = Ledger::open(&dir, LedgerOptions::default(), None).unwrap();
            ledger
                .record(&record(4), &Arc::from("ExampleBot"))
                .await
                .unwrap();
        });
        let seqs: Vec<u64> = read_all(&dir).iter().map(seq_of).collect();
        assert_eq!(seqs, [0, 1, 2, 3, 4]);
    }

    #[test]
    fn a_torn_or_damaged_tail_is_cut_on_open() {
        for tail in [
            &b"{\"time\":\"2026-11-18T20:5"[..],
            b"\0\0\0\0\0\0\0\0",
            b"\0\0\0\0{\"ray_id\":\"seq-9\"}\n",
            b"not json\n{\"ray_id\":\"seq-9\"}\n",
        ] {
            let dir = temp_dir("torn");
            runtime().block_on(async {
                let ledger = Ledger::open(&dir, LedgerOptions::default(), None).unwrap();
                for seq in 0..2 {
                    ledger
                        .record(&record(seq), &Arc::from("ExampleBot"))
                        .await
                        .unwrap();
                }
            });
            let mut f = OpenOptions::new()
                .append(true)
                .open(dir.join(LEDGER_FILE))
                .unwrap();
            f.write_all(tail).unwrap();
            drop(f);
            runtime().block_on(async {
                let ledger = Ledger::open(&dir, LedgerOptions::default(), None).unwrap();
                ledger
                    .record(&record(2), &Arc::from("ExampleBot"))
                    .await
                    .unwrap();
            });
            let seqs: Vec<u64> = read_all(&dir).iter().map(seq_of).collect();
            assert_eq!(seqs, [0, 1, 2], "{:?}", String::from_utf8_lossy(tail));
        }
    }

    #[test]
    fn rotation_by_size_loses_and_repeats_nothing() {
        let dir = temp_dir("rotate");
        let options = LedgerOptions {
            rotate_bytes: 2048,
            ..LedgerOptions::default()
        };
        runtime().block_on(async {
            let ledger = Arc::new(Ledger::open(&dir, options, None).unwrap());
            let mut tasks = Vec::new();
            for task in 0..8u64 {
                let ledger = ledger.clone();
                tasks.push(tokio::spawn(async move {
                    for i in 0..50 {
                        ledger
                            .record(&record(task * 1000 + i), &Arc::from("ExampleBot"))
                            .await
                            .unwrap();
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        });
        let files = ledger_files(&dir).unwrap();
        assert!(files.len() > 10, "{files:?}");
        let mut seqs: Vec<u64> = read_all(&dir).iter().map(seq_of).collect();
        assert_eq!(seqs.len(), 400);
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs.len(), 400);
        // Each task's records are in its order across files.
        let in_order: Vec<u64> = read_all(&dir)
            .iter()
            .map(seq_of)
            .filter(|s| s / 1000 == 3)
            .collect();
        assert!(in_order.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn a_second_process_cannot_open_a_held_ledger() {
        let dir = temp_dir("lock");
        let _held = Ledger::open(&dir, LedgerOptions::default(), None).unwrap();
        let again = Ledger::open(&dir, LedgerOptions::default(), None);
        assert_eq!(
            again.err().map(|e| e.kind()),
            Some(io::ErrorKind::WouldBlock)
        );
    }

    #[test]
    fn a_full_queue_refuses_at_once() {
        let dir = temp_dir("full");
        let options = LedgerOptions {
            queue: 1,
            max_batch: 1,
            ..LedgerOptions::default()
        };
        let mut registry = Registry::with_prefix("signpost");
        let metrics = LedgerMetrics::register(&mut registry);
        runtime().block_on(async {
            let ledger = Arc::new(Ledger::open(&dir, options, Some(metrics)).unwrap());
            // Many records at once into a queue of one: some must be refused, and each is
            // either refused or written, never both.
            let mut tasks = Vec::new();
            for seq in 0..200 {
                let ledger = ledger.clone();
                tasks.push(tokio::spawn(async move {
                    (
                        seq,
                        ledger.record(&record(seq), &Arc::from("ExampleBot")).await,
                    )
                }));
            }
            let mut written = Vec::new();
            let mut refused = 0;
            for t in tasks {
                match t.await.unwrap() {
                    (seq, Ok(())) => written.push(seq),
                    (_, Err(LedgerError::Full)) => refused += 1,
                    (_, Err(e)) => panic!("{e}"),
                }
            }
            assert!(refused > 0, "a queue of one took 200 records at once");
            // Each refusal is counted as a failure of the ledger, by its reason.
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            assert!(
                text.contains(&format!(
                    "signpost_ledger_failures_total{{reason=\"full\"}} {refused}\n"
                )),
                "{text}"
            );
            assert!(text.contains("signpost_ledger_failures_total{reason=\"io\"} 0\n"));
            drop(ledger);
            let mut on_disk: Vec<u64> = read_all(&dir).iter().map(seq_of).collect();
            on_disk.sort_unstable();
            written.sort_unstable();
            assert_eq!(on_disk, written);
        });
    }

    const CRASH_DIR: &str = "SIGNPOST_LEDGER_CRASH_DIR";

    /// The child of `acknowledged_records_survive_sigkill`: appends from many tasks until it is
    /// killed, printing `ack <seq>` once each record is acknowledged.
    #[test]
    #[ignore = "the child process of acknowledged_records_survive_sigkill, which runs it"]
    fn crash_child() {
        let dir = PathBuf::from(std::env::var_os(CRASH_DIR).expect("run by the crash test"));
        let options = LedgerOptions {
            rotate_bytes: 32 * 1024,
            ..LedgerOptions::default()
        };
        runtime().block_on(async {
            let ledger = Arc::new(Ledger::open(&dir, options, None).unwrap());
            let next = Arc::new(AtomicU64::new(0));
            let stdout = Arc::new(std::sync::Mutex::new(std::io::stdout()));
            let mut tasks = Vec::new();
            for _ in 0..32 {
                let (ledger, next, stdout) = (ledger.clone(), next.clone(), stdout.clone());
                tasks.push(tokio::spawn(async move {
                    loop {
                        let seq = next.fetch_add(1, Ordering::Relaxed);
                        match ledger.record(&record(seq), &Arc::from("ExampleBot")).await {
                            Ok(()) => {
                                let mut out = stdout.lock().unwrap();
                                writeln!(out, "ack {seq}").unwrap();
                                out.flush().unwrap();
                            }
                            Err(LedgerError::Full) => tokio::task::yield_now().await,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }));
            }
            // The parent kills this process long before; never outlive a parent that died.
            tokio::time::sleep(Duration::from_secs(60)).await;
        });
    }

    #[test]
    fn acknowledged_records_survive_sigkill() {
        let dir = temp_dir("crash");
        let started = Instant::now();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "crawl::ledger::tests::crash_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_DIR, &dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(seq) = line.strip_prefix("ack ") {
                    let _ = tx.send(seq.parse::<u64>().unwrap());
                }
            }
        });
        // Kill it in the middle of its traffic: after a few thousand acknowledgements, and
        // after several rotations.
        let mut acked = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while acked.len() < 3000 && Instant::now() < deadline {
            if let Ok(seq) = rx.recv_timeout(Duration::from_millis(100)) {
                acked.push(seq);
            }
        }
        let elapsed = started.elapsed();
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reader.join().unwrap();
        acked.extend(rx.try_iter());
        assert!(
            acked.len() >= 3000,
            "the child acknowledged only {} records",
            acked.len()
        );

        // Reopening recovers; then every acknowledged record is there exactly once, and every
        // line parses.
        drop(Ledger::open(&dir, LedgerOptions::default(), None).unwrap());
        let records = read_all(&dir);
        let mut count: HashMap<u64, usize> = HashMap::new();
        for r in &records {
            *count.entry(seq_of(r)).or_default() += 1;
        }
        assert!(
            count.values().all(|&n| n == 1),
            "a record is in the ledger twice"
        );
        for seq in &acked {
            assert_eq!(
                count.get(seq),
                Some(&1),
                "acknowledged record {seq} is missing"
            );
        }
        // At most the records in flight at the kill are there without an acknowledgement.
        assert!(records.len() - acked.len() <= LedgerOptions::default().queue + 64);
        let files = ledger_files(&dir).unwrap().len();
        assert!(files > 2, "no rotation happened under load");
        eprintln!(
            "killed after {} acknowledgements in {elapsed:?} (start-up included); {} records on \
             disk in {files} files",
            acked.len(),
            records.len()
        );
    }
}
