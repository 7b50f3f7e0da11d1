//! The process's own metrics under the names every Prometheus client library uses
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds`, ...), so
//! that dashboards and alerts written for any exporter's process work unchanged; and the
//! binary's `signpost_build_info`.
//!
//! The metrics library has no process collector, and no crate offers one for it (the crates that
//! do are for the `metrics` facade or for the `prometheus` crate's own registry), so this small
//! collector reads `/proc/self` at each scrape, through the `procfs` crate, which parses its
//! files (`stat`'s command field may hold spaces and parentheses) and knows the clock tick and
//! the page size. Off Linux, or when `/proc` cannot be read, the process metrics are left out of
//! the scrape rather than made up.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

/// Registers the process metrics into `registry`, which must have no prefix: their names are
/// the standard ones.
pub fn register_process(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector));
}

/// Registers `build_info` (under the registry's prefix): the version this binary was built
/// from, its architecture and operating system, as a constant 1.
pub fn register_build_info(registry: &mut Registry) {
    registry.register(
        "build",
        "A metric with a constant '1' value labeled by the version signpost was built from, and \
         the architecture and operating system it was built for",
        Info::new(vec![
            ("version", env!("CARGO_PKG_VERSION")),
            ("arch", std::env::consts::ARCH),
            ("os", std::env::consts::OS),
        ]),
    );
}

/// What `/proc/self` says, read once per scrape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessFacts {
    pub cpu_seconds: f64,
    pub resident_memory_bytes: u64,
    pub virtual_memory_bytes: u64,
    pub start_time_seconds: f64,
    pub threads: i64,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
}

impl ProcessFacts {
    /// This process's facts now; `None` where `/proc/self/stat` cannot be read.
    pub fn read() -> Option<ProcessFacts> {
        let me = procfs::process::Process::myself().ok()?;
        let stat = me.stat().ok()?;
        let ticks = procfs::ticks_per_second().max(1) as f64;
        let boot = procfs::boot_time_secs().ok()? as f64;
        let max_fds = me
            .limits()
            .ok()
            .and_then(|l| match l.max_open_files.soft_limit {
                procfs::process::LimitValue::Value(n) => Some(n),
                procfs::process::LimitValue::Unlimited => None,
            });
        Some(ProcessFacts {
            cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
            resident_memory_bytes: stat.rss.saturating_mul(procfs::page_size()),
            virtual_memory_bytes: stat.vsize,
            start_time_seconds: boot + stat.starttime as f64 / ticks,
            threads: stat.num_threads,
            open_fds: me.fd_count().ok().map(|n| n as u64),
            max_fds,
        })
    }
}

#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(facts) = ProcessFacts::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(facts.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            None,
            cpu.metric_type(),
        )?)?;
        let gauges: [(&str, &str, Option<f64>); 6] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                Some(facts.resident_memory_bytes as f64),
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                Some(facts.virtual_memory_bytes as f64),
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds.",
                Some(facts.start_time_seconds),
            ),
            (
                "process_threads",
                "Number of OS threads in the process.",
                Some(facts.threads as f64),
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                facts.open_fds.map(|n| n as f64),
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                facts.max_fds.map(|n| n as f64),
            ),
        ];
        for (name, help, value) in gauges {
            let Some(value) = value else { continue };
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_facts_are_this_process() {
        // Work until the kernel has counted a clock tick of CPU time for this process (a tick
        // is 10 ms at the usual 100 Hz); bounded in rounds, not in time.
        let mut sum = 0_u64;
        let mut facts = ProcessFacts::read().expect("/proc/self is readable on Linux");
        for round in 0..10_000_u64 {
            if facts.cpu_seconds > 0.0 {
                break;
            }
            for i in 0..1_000_000_u64 {
                sum = std::hint::black_box(sum.wrapping_mul(31).wrapping_add(i ^ round));
            }
            facts = ProcessFacts::read().unwrap();
        }
        assert!(facts.cpu_seconds > 0.0, "{facts:?} ({sum})");
        assert!(facts.resident_memory_bytes > 1 << 20, "{facts:?}");
        assert!(facts.virtual_memory_bytes >= facts.resident_memory_bytes);
        assert!(facts.threads >= 1);
        // Standard input, output and error at least.
        let fds = facts.open_fds.expect("open descriptors");
        assert!(fds >= 3, "{facts:?}");
        assert!(facts.max_fds.is_none_or(|max| max >= fds), "{facts:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            facts.start_time_seconds <= now + 1.0 && facts.start_time_seconds > now - 86_400.0,
            "started at {} (now {now})",
            facts.start_time_seconds
        );
    }
}
