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
//! between threads (criterion runs on one thread). The default system allocator is used, as in
//! the `signpost` binary.

use std::hint::black_box;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use ipnet::IpNet;
use signpost_policy::{CompiledPolicy, ParsedExpression, RequestFacts, Verdict};

/// A small deterministic generator so every run benches the same policy.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 16
    }
}

fn geo_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/geo");
    dir.join("country.mmdb").exists().then_some(dir)
}

/// The 10,000 blocked networks: /24s and /32s in 20.0.0.0-59.255.255.255 and /48s in 2001:db8::/32.
fn cidrs() -> Vec<String> {
    let mut rng = Lcg(42);
    (0..10_000)
        .map(|i| {
            let r = rng.next();
            if i % 10 == 9 {
                format!("2001:db8:{:x}::/48", r & 0xffff)
            } else {
                let a = 20 + (r % 40) as u8;
                let (b, c, d) = ((r >> 8) as u8, (r >> 16) as u8, (r >> 24) as u8);
                if i % 2 == 0 {
                    format!("{a}.{b}.{c}.0/24")
                } else {
                    format!("{a}.{b}.{c}.{d}/32")
                }
            }
        })
        .collect()
}

/// 100 custom rules of the usual kinds; a benign request matches none of them.
fn waf_rules(with_geo: bool) -> String {
    let mut out = String::new();
    for i in 0..100 {
        let expr = match i % 10 {
            0 => format!(r#"http.request.uri.path eq "/blocked/{i}""#),
            1 => format!(r#"starts_with(http.request.uri.path, "/wp-{i}/")"#),
            2 => format!(r#"http.request.uri.path matches "^/(old|legacy)-{i}/.*\\.php$""#),
            3 => format!(r#"http.user_agent contains "BadBot/{i}""#),
            4 => format!(
                r#"http.request.method in {{"TRACE" "TRACK"}} and http.request.uri.query contains "q{i}""#
            ),
            5 => format!(r#"http.request.headers["x-attack-{i}"] ne """#),
            6 => format!(
                r#"ip.src in {{10.{i}.0.0/16 192.168.{i}.0/24}} and http.request.uri.path eq "/internal""#
            ),
            7 if with_geo => format!(
                r#"ip.src.country in {{"KP" "SY"}} and http.request.uri.path eq "/export/{i}""#
            ),
            7 => format!(r#"http.host eq "staging-{i}.example.com""#),
            8 => format!(r#"lower(http.request.uri.query) contains "union select {i}""#),
            _ => format!(
                r#"len(http.request.uri) gt {} and http.cookie contains "debug={i}""#,
                4000 + i
            ),
        };
        let action = if i % 25 == 0 { "log" } else { "block" };
        out.push_str(&format!(
            "[[custom_rule]]\nid = \"waf-{i}\"\naction = \"{action}\"\nexpression = '{expr}'\n\n"
        ));
    }
    out
}

fn policy_text(geo: Option<&Path>) -> String {
    let list = cidrs()
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let geo_part = match geo {
        Some(dir) => format!(
            r#"
[geo]
country_db = "{}"
asn_db = "{}"

[[access_rule]]
id = "bad-asn"
action = "block"
asn = [64496, 64497, 64498, 64499]

[[access_rule]]
id = "embargo"
action = "block"
country = ["KP", "IR", "SY", "CU"]
"#,
            dir.join("country.mmdb").display(),
            dir.join("asn.mmdb").display()
        ),
        None => String::new(),
    };
    format!(
        r#"
[client_ip]
trusted_proxies = ["10.0.0.0/8"]

[[zone]]
name = "www"
hosts = ["example.com", "*.example.com"]
origin = "127.0.0.1:8000"

[[access_rule]]
id = "office"
action = "allow"
ip = ["203.0.113.0/24"]

[[access_rule]]
id = "blocklist"
action = "block"
ip = [{list}]
{geo_part}
[browser_check]
block_user_agents = ["(?i)sqlmap", "(?i)nikto", "(?i)masscan"]

[hotlink]
extensions = ["png", "jpg", "gif", "webp"]

{waf}
[[rate_limit]]
id = "login"
expression = 'http.request.uri.path eq "/login"'
period = "1m"
requests_per_period = 10
mitigation_timeout = "10m"

[[rate_limit]]
id = "api"
expression = 'starts_with(http.request.uri.path, "/api/")'
characteristics = ['http.request.headers["x-api-key"]']
period = "10s"
requests_per_period = 100

[[rate_limit]]
id = "everyone"
period = "10s"
requests_per_period = 1000000
"#,
        waf = waf_rules(geo.is_some())
    )
}

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
