//! Conversion throughput per core and latency percentiles, measured by this thread's CPU time
//! (`/proc/thread-self/schedstat`, Linux) as well as wall time, so that other processes on a
//! shared machine do not lower the per-core figure.
//!
//!     cargo run --profile bench -p signpost-markdown --example throughput [seconds per size]
//!
//! `throughput once <bytes> [real | <file>]` converts one generated page (or, with `real`, one
//! cut from git-doc; or the file, whatever its size) once and exits, for an instruction count that does not depend on the
//! machine's load:
//!
//!     valgrind --tool=callgrind target/release/examples/throughput once 1000000

use std::time::{Duration, Instant};

use signpost_markdown::{Limits, convert_html};
use url::Url;

/// The allocator the edge binary uses (crates/edge/src/main.rs), so the figures are the edge's:
/// the conversion allocates a node per element and a string per piece of text.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../benches/page.rs"]
mod page;

fn thread_cpu() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let ns = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Duration::from_nanos(ns)
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("once") {
        let size = std::env::args()
            .nth(2)
            .and_then(|s| s.parse().ok())
            .unwrap_or(1_000_000);
        let url = Url::parse("https://docs.example/ref/page.html").unwrap();
        let html = match std::env::args().nth(3).as_deref() {
            Some("real") => page::real_page(size).expect("git-doc installed"),
            Some(path) => std::fs::read_to_string(path).expect("a UTF-8 file"),
            None => page::page(size),
        };
        // No parse deadline: under valgrind everything is fifty times slower.
        let limits = Limits {
            max_parse_time: Duration::from_secs(3600),
            ..Limits::default()
        };
        let md = convert_html(&html, Some(&url), &limits).unwrap();
        println!("{} bytes of Markdown", md.len());
        return;
    }
    let seconds: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let url = Url::parse("https://docs.example/ref/page.html").unwrap();
    let limits = Limits::default();
    println!(
        "| page | size | iterations | MB/s per core (CPU time) | MB/s (wall) | p50 CPU | p99 CPU | p99 wall |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut pages = Vec::new();
    for (name, size) in [("10 KB", 10_000), ("100 KB", 100_000), ("1 MB", 1_000_000)] {
        pages.push((format!("generated {name}"), page::page(size)));
    }
    for (name, size) in [("10 KB", 10_000), ("100 KB", 100_000), ("1 MB", 1_000_000)] {
        if let Some(html) = page::real_page(size) {
            pages.push((format!("git-doc bodies {name}"), html));
        }
    }
    for (name, html) in pages {
        // Warm up (thread-local converter, allocator).
        convert_html(&html, Some(&url), &limits).unwrap();
        let (mut cpu, mut wall) = (Vec::new(), Vec::new());
        let started = Instant::now();
        while started.elapsed().as_secs_f64() < seconds || cpu.len() < 5 {
            let (c0, w0) = (thread_cpu(), Instant::now());
            let md = convert_html(&html, Some(&url), &limits).unwrap();
            std::hint::black_box(md);
            cpu.push(thread_cpu() - c0);
            wall.push(w0.elapsed());
        }
        let total_cpu: Duration = cpu.iter().sum();
        let total_wall: Duration = wall.iter().sum();
        let bytes = (html.len() * cpu.len()) as f64 / 1e6;
        cpu.sort();
        wall.sort();
        let pct = |v: &[Duration], p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
        println!(
            "| {name} | {} | {} | {:.1} | {:.1} | {:.2} ms | {:.2} ms | {:.2} ms |",
            html.len(),
            cpu.len(),
            bytes / total_cpu.as_secs_f64(),
            bytes / total_wall.as_secs_f64(),
            pct(&cpu, 0.5).as_secs_f64() * 1e3,
            pct(&cpu, 0.99).as_secs_f64() * 1e3,
            pct(&wall, 0.99).as_secs_f64() * 1e3,
        );
    }
    let html = page::page(1_000_000);
    let mut sums = [Duration::ZERO; 5];
    for _ in 0..5 {
        let t = signpost_markdown::step_times(&html, Some(&url), &limits);
        for (s, t) in sums.iter_mut().zip(t) {
            *s += t;
        }
    }
    println!(
        "\n1 MB page, wall time per step (5 runs): tokenizer alone {:?}, filtered tree (tokenizer included) {:?}, walk {:?}, htmd {:?}, trailing spaces {:?}",
        sums[0] / 5,
        sums[1] / 5,
        sums[2] / 5,
        sums[3] / 5,
        sums[4] / 5
    );
    // Debian documentation packages, each a site of its own: AsciiDoc manual pages (git-doc),
    // Sphinx (python3.11-doc), DocBook (postgresql-doc-15), the SQLite website's pages
    // (sqlite3-doc) and the Apache HTTP Server manual in English (apache2-doc).
    for dir in [
        "/usr/share/doc/git-doc",
        "/usr/share/doc/python3.11/html",
        "/usr/share/doc/postgresql-doc-15/html",
        "/usr/share/doc/sqlite3",
        "/usr/share/doc/apache2-doc/manual/en",
    ] {
        corpus(dir, &limits);
    }
}

/// Every `.html` file under `dir`: throughput per core over the whole corpus, the slowest page,
/// and the cl100k_base token reduction (median and over all bytes); for the pages whose source
/// ships with them (see [`source_of`]), the same reduction for the source: what the author wrote
/// before any markup, near the floor of a conversion that keeps the text.
fn corpus(dir: &str, limits: &Limits) {
    let mut files = Vec::new();
    let mut stack = vec![std::path::PathBuf::from(dir)];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "html") {
                files.push(p);
            }
        }
    }
    if files.is_empty() {
        println!("{dir}: not installed");
        return;
    }
    let bpe = tiktoken_rs::cl100k_base_singleton();
    let (mut bytes, mut cpu, mut slowest) = (0usize, Duration::ZERO, Duration::ZERO);
    let (mut html_tokens, mut md_tokens, mut reductions, mut failed) =
        (0usize, 0usize, Vec::new(), 0);
    // (Markdown's reduction, the source's reduction) for pages whose source is beside them.
    let mut against_source: Vec<(f64, f64)> = Vec::new();
    for f in &files {
        let raw = std::fs::read(f).unwrap();
        let source = signpost_markdown::Source {
            body: &raw,
            content_type: Some("text/html"),
            content_encoding: None,
        };
        let c0 = thread_cpu();
        let result =
            signpost_markdown::convert(&source, Some("https://docs.example/a/b.html"), limits);
        let took = thread_cpu() - c0;
        let Ok(md) = result else {
            failed += 1;
            continue;
        };
        bytes += raw.len();
        cpu += took;
        slowest = slowest.max(took);
        let h = bpe
            .encode_with_special_tokens(&String::from_utf8_lossy(&raw))
            .len();
        let m = bpe.encode_with_special_tokens(&md).len();
        html_tokens += h;
        md_tokens += m;
        let reduction = 1.0 - m as f64 / h.max(1) as f64;
        reductions.push(reduction);
        if let Some(source) = source_of(dir, f) {
            let s = bpe.encode_with_special_tokens(&source).len();
            against_source.push((reduction, 1.0 - s as f64 / h.max(1) as f64));
        }
    }
    reductions.sort_by(f64::total_cmp);
    println!(
        "{dir}: {} pages ({failed} not converted), {:.1} MB, {:.1} MB/s per core, slowest page {:.1} ms CPU; tokens {html_tokens} -> {md_tokens} ({:.1}% fewer overall), median page {:.1}% fewer",
        files.len(),
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / cpu.as_secs_f64(),
        slowest.as_secs_f64() * 1e3,
        100.0 * (1.0 - md_tokens as f64 / html_tokens as f64),
        100.0 * reductions[reductions.len() / 2],
    );
    if !against_source.is_empty() {
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            100.0 * v[v.len() / 2]
        };
        let shorter = against_source.iter().filter(|(m, s)| m >= s).count();
        println!(
            "  {} pages with their whole source: median page {:.1}% fewer tokens as Markdown, {:.1}% fewer as the source; the Markdown is no longer than the source on {shorter}",
            against_source.len(),
            median(against_source.iter().map(|p| p.0).collect()),
            median(against_source.iter().map(|p| p.1).collect()),
        );
    }
}

/// The source a documentation page was generated from, when it ships with the page: git-doc's
/// AsciiDoc beside each page (`git-add.txt`), Sphinx's reStructuredText under `_sources`
/// (`_sources/library/functions.rst.txt`). A source that includes other files is not the whole
/// page, and counts as none.
fn source_of(dir: &str, page: &std::path::Path) -> Option<String> {
    let beside = page.with_extension("txt");
    let sphinx = std::path::Path::new(dir)
        .join("_sources")
        .join(page.strip_prefix(dir).ok()?.with_extension("rst.txt"));
    let source = std::fs::read_to_string(beside)
        .or_else(|_| std::fs::read_to_string(sphinx))
        .ok()?;
    (!source.contains("include::")).then_some(source)
}
