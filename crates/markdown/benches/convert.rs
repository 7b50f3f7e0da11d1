//! Conversion throughput on generated documentation-like pages of about 10 KB, 100 KB and 1 MB
//! (headings, paragraphs with links and inline code, lists, a table, code blocks, page chrome).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use signpost_markdown::{Limits, convert_html};
use url::Url;

/// A page of about `bytes` bytes built from one repeated section.
pub fn page(bytes: usize) -> String {
    let mut html = String::from(
        "<!doctype html><html><head><title>Reference</title>\
         <meta name=\"description\" content=\"A reference page\">\
         <link rel=\"stylesheet\" href=\"/s.css\"><script src=\"/app.js\"></script></head><body>\
         <header class=\"site\"><a href=\"/\">Home</a></header>\
         <nav><ul><li><a href=\"/a\">A</a></li><li><a href=\"/b\">B</a></li></ul></nav><main>",
    );
    let mut i = 0;
    while html.len() < bytes {
        i += 1;
        html.push_str(&format!(
            "<section id=\"s{i}\"><h2>Section {i}</h2>\
             <p class=\"lead\">The <code>option_{i}</code> setting controls <em>how</em> the \
             <a href=\"../guide/{i}.html\" class=\"ref\">guide</a> applies; see \
             <strong>notes</strong> below for the details of each case.</p>\
             <ul><li>First point about {i}</li><li>Second point with <a href=\"#x{i}\">anchor</a></li></ul>\
             <table><tr><th>Key</th><th>Value</th></tr><tr><td>k{i}</td><td>v{i}</td></tr></table>\
             <pre><code class=\"language-rust\">fn f_{i}() -> u32 {{ {i} }}\n</code></pre>\
             <div class=\"note\"><p>Note {i}: <img src=\"/i/{i}.png\" alt=\"figure {i}\"></p></div></section>"
        ));
    }
    html.push_str("</main><footer>© Example</footer></body></html>");
    html
}

fn bench(c: &mut Criterion) {
    let url = Url::parse("https://docs.example/ref/page.html").unwrap();
    let limits = Limits::default();
    let mut group = c.benchmark_group("convert");
    for (name, size) in [("10KB", 10_000), ("100KB", 100_000), ("1MB", 1_000_000)] {
        let html = page(size);
        group.throughput(Throughput::Bytes(html.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), &html, |b, html| {
            b.iter(|| convert_html(black_box(html), Some(&url), &limits).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
