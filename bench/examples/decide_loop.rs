//! Runs `CompiledPolicy::decide` on the benchmarks' realistic policy a given number of times, for
//! counting instructions, which unlike time do not depend on what else the machine runs:
//!
//! ```sh
//! cargo build --release -p signpost-bench --example decide_loop
//! perf stat -e instructions:u target/release/examples/decide_loop 0
//! perf stat -e instructions:u target/release/examples/decide_loop 1000000
//! ```
//!
//! The difference divided by the count is the instructions of one decision, without loading the
//! policy. The request is a benign one (every phase runs, no rule refuses), from 200 addresses in
//! turn so that the rate limits count under many keys.

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use signpost_policy::{CompiledPolicy, RequestFacts};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let text = signpost_bench::policy_text(signpost_bench::geo_dir().as_deref());
    let policy = CompiledPolicy::from_toml(&text, "bench.toml", Path::new("."), None)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut headers = http::HeaderMap::new();
    headers.insert(
        "user-agent",
        http::HeaderValue::from_static(
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36",
        ),
    );
    headers.insert(
        "referer",
        http::HeaderValue::from_static("https://www.example.com/"),
    );
    let now = Instant::now();
    let mut proxied = 0u64;
    for i in 0..n {
        let facts = RequestFacts {
            peer: std::net::IpAddr::from([192, 0, 2, (i % 200) as u8]),
            host: "www.example.com",
            method: "GET",
            uri: "/products/widget?color=blue&size=m",
            tls: false,
            sni: None,
            headers: &headers,
        };
        let d = policy.decide(black_box(&facts), now);
        proxied += u64::from(d.verdict == signpost_policy::Verdict::Proxy);
    }
    println!("{proxied} of {n} proxied");
}
