//! Conversion throughput on generated documentation-like pages of about 10 KB, 100 KB and 1 MB
//! (headings, paragraphs with links and inline code, lists, a table, code blocks, page chrome).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use signpost_markdown::{Limits, convert_html};
use url::Url;

/// The allocator the edge binary uses (crates/edge/src/main.rs), so the figures are the edge's:
/// the conversion allocates a node per element and a string per piece of text.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "page.rs"]
mod page;
use page::page;

fn bench(c: &mut Criterion) {
    let url = Url::parse("https://docs.example/ref/page.html").unwrap();
    let limits = Limits::default();
    let mut group = c.benchmark_group("convert");
    let mut pages = Vec::new();
    for (name, size) in [("10KB", 10_000), ("100KB", 100_000), ("1MB", 1_000_000)] {
        pages.push((name.to_string(), page(size)));
        if let Some(html) = page::real_page(size) {
            pages.push((format!("git-doc-{name}"), html));
        }
    }
    for (name, html) in pages {
        group.throughput(Throughput::Bytes(html.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(&name), &html, |b, html| {
            b.iter(|| convert_html(black_box(html), Some(&url), &limits).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
