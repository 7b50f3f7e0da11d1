//! Policy engine micro-benchmarks: how long `CompiledPolicy::decide` takes on a realistic policy,
//! and what loading that policy and its expressions costs.
//!
//! The policy has 10,000 blocked CIDRs (IPv4 and IPv6), country and ASN rules answered by the real
//! databases in `../shared/data/geo` (left out, with a note, when that directory is absent),
//! browser and hotlink checks, 100 custom (WAF) expressions that a benign request must all
//! evaluate, and 3 rate-limit rules. Groups:
//! - `policy`: parse + validate + compile the whole file (`from_toml`), databases included;
//! - `expression`: parse, then compile, one typical expression;
//! - `decide`: one decision for a benign request (every phase runs), an early IP block, a WAF
//!   match half-way down the list, and an unknown host;
//! - `baseline`: a naive linear scan of the 10,000 CIDRs against the prefix table behind decide.
//!
//! Left out: header parsing and everything else the edge does per request, and lock contention
//! between threads (criterion runs on one thread). The system allocator is used here; the
//! `signpost` binary uses mimalloc, so these figures are if anything pessimistic.

use std::hint::black_box;
use std::net::IpAddr;
use std::path::Path;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use ipnet::IpNet;
use signpost_bench::{cidrs, geo_dir, policy_text, waf_rules};
use signpost_policy::{CompiledPolicy, ParsedExpression, RequestFacts, Verdict};

fn headers() -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert(
        "user-agent",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36"
            .parse()
            .unwrap(),
    );
    h.insert("accept", "text/html,application/xhtml+xml".parse().unwrap());
    h.insert("referer", "https://www.example.com/".parse().unwrap());
    h.insert(
        "cookie",
        "session=0123456789abcdef; theme=dark".parse().unwrap(),
    );
    h
}

fn bench(c: &mut Criterion) {
    let geo = geo_dir();
    if geo.is_none() {
        eprintln!("note: ../shared/data/geo not found; benching without country/ASN rules");
    }
    let text = policy_text(geo.as_deref());
    let policy = CompiledPolicy::from_toml(&text, "bench.toml", Path::new("."), None)
        .unwrap_or_else(|e| panic!("{e}"));

    let mut g = c.benchmark_group("policy");
    g.sample_size(10);
    g.bench_function("from_toml_10k_cidrs_100_waf", |b| {
        b.iter(|| {
            CompiledPolicy::from_toml(black_box(&text), "bench.toml", Path::new("."), None).unwrap()
        })
    });
    g.finish();

    let src = r#"http.request.uri.path matches "^/wp-(admin|login)" and not ip.src in {10.0.0.0/8 192.168.0.0/16} and http.request.method in {"GET" "POST"}"#;
    let mut g = c.benchmark_group("expression");
    g.bench_function("parse", |b| {
        b.iter(|| ParsedExpression::parse(black_box(src)).unwrap())
    });
    let parsed = ParsedExpression::parse(src).unwrap();
    g.bench_function("compile", |b| {
        b.iter(|| black_box(&parsed).compile().unwrap())
    });
    let compiled = parsed.compile().unwrap();
    let h = headers();
    let facts = RequestFacts {
        peer: "81.2.69.142".parse().unwrap(),
        host: "www.example.com",
        method: "GET",
        uri: "/wp-login.php",
        tls: true,
        sni: Some("www.example.com"),
        headers: &h,
    };
    g.bench_function("eval", |b| {
        b.iter(|| compiled.matches(black_box(&facts), facts.peer))
    });
    if std::env::var_os("BENCH_KINDS").is_some() {
        let benign = RequestFacts {
            uri: "/products/123?ref=newsletter",
            ..facts
        };
        for (k, line) in waf_rules(false)
            .lines()
            .filter(|l| l.starts_with("expression"))
            .take(10)
            .enumerate()
        {
            let src = line
                .trim_start_matches("expression = '")
                .trim_end_matches('\'');
            let e = ParsedExpression::parse(src).unwrap().compile().unwrap();
            g.bench_function(format!("kind_{k}"), |b| {
                b.iter(|| e.matches(black_box(&benign), benign.peer))
            });
        }
        let name = http::header::HeaderName::from_static("x-attack-5");
        g.bench_function("raw_header_get", |b| {
            b.iter(|| black_box(&h).get(black_box(&name)).is_some())
        });
        let ua = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36";
        g.bench_function("raw_str_contains", |b| {
            b.iter(|| black_box(ua).contains(black_box("BadBot/3")))
        });
        let re = regex::Regex::new("^/(old|legacy)-2/.*\\.php$").unwrap();
        g.bench_function("raw_regex", |b| {
            b.iter(|| re.is_match(black_box("/products/123")))
        });
    }
    g.finish();

    // A thousand public client addresses (outside every blocked range), reused round-robin.
    let clients: Vec<IpAddr> = (0..1000u32)
        .map(|i| IpAddr::from([81, 2, (i >> 8) as u8, i as u8]))
        .collect();
    let now = Instant::now();
    let mut g = c.benchmark_group("decide");
    let mut i = 0usize;
    g.bench_function("benign_all_phases", |b| {
        b.iter(|| {
            i = (i + 1) % clients.len();
            let facts = RequestFacts {
                peer: clients[i],
                host: "www.example.com",
                method: "GET",
                uri: "/products/123?ref=newsletter",
                tls: true,
                sni: Some("www.example.com"),
                headers: &h,
            };
            let d = policy.decide(black_box(&facts), now);
            debug_assert_eq!(d.verdict, Verdict::Proxy);
            d
        })
    });
    let no_geo = CompiledPolicy::from_toml(&policy_text(None), "bench.toml", Path::new("."), None)
        .unwrap_or_else(|e| panic!("{e}"));
    g.bench_function("benign_all_phases_without_geo", |b| {
        b.iter(|| {
            i = (i + 1) % clients.len();
            let facts = RequestFacts {
                peer: clients[i],
                host: "www.example.com",
                method: "GET",
                uri: "/products/123?ref=newsletter",
                tls: true,
                sni: Some("www.example.com"),
                headers: &h,
            };
            policy_no_geo_decide(&no_geo, &facts, now)
        })
    });
    let blocked_ip: IpAddr = cidrs()[0].split('/').next().unwrap().parse().unwrap();
    g.bench_function("ip_blocklist_hit", |b| {
        b.iter(|| {
            let facts = RequestFacts {
                peer: blocked_ip,
                host: "www.example.com",
                method: "GET",
                uri: "/",
                tls: true,
                sni: None,
                headers: &h,
            };
            policy.decide(black_box(&facts), now)
        })
    });
    g.bench_function("waf_match_rule_50", |b| {
        b.iter(|| {
            let facts = RequestFacts {
                peer: clients[7],
                host: "www.example.com",
                method: "GET",
                uri: "/blocked/50",
                tls: true,
                sni: None,
                headers: &h,
            };
            policy.decide(black_box(&facts), now)
        })
    });
    g.bench_function("unknown_host", |b| {
        b.iter(|| {
            let facts = RequestFacts {
                peer: clients[7],
                host: "nowhere.example.org",
                method: "GET",
                uri: "/",
                tls: true,
                sni: None,
                headers: &h,
            };
            policy.decide(black_box(&facts), now)
        })
    });
    g.finish();

    // Baseline: what the prefix table saves over scanning the list.
    let nets: Vec<IpNet> = cidrs().iter().map(|c| c.parse().unwrap()).collect();
    let ip_only = format!(
        "[[zone]]\nname = \"w\"\nhosts = [\"*\"]\norigin = \"127.0.0.1:1\"\n\n[[access_rule]]\nid = \"b\"\naction = \"block\"\nip = [{}]\n",
        cidrs()
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(",")
    );
    let ip_policy = CompiledPolicy::from_toml(&ip_only, "b.toml", Path::new("."), None).unwrap();
    let miss: IpAddr = "81.2.69.142".parse().unwrap();
    let mut g = c.benchmark_group("baseline");
    g.bench_function("linear_scan_10k_cidrs", |b| {
        b.iter(|| nets.iter().any(|n| n.contains(black_box(&miss))))
    });
    g.bench_function("decide_prefix_table_10k_cidrs", |b| {
        b.iter(|| {
            let facts = RequestFacts {
                peer: miss,
                host: "x.org",
                method: "GET",
                uri: "/",
                tls: false,
                sni: None,
                headers: &h,
            };
            ip_policy.decide(black_box(&facts), now)
        })
    });
    g.finish();
}

fn policy_no_geo_decide(
    p: &CompiledPolicy,
    facts: &RequestFacts<'_>,
    now: Instant,
) -> signpost_policy::Decision {
    p.decide(black_box(facts), now)
}

criterion_group!(benches, bench);
criterion_main!(benches);
