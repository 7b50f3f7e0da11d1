//! Rate-limit micro-benchmarks: one decision through a policy whose only rule is a rate limit on
//! `ip.src` (default `max_keys`, 100,000), with and without a flood of distinct addresses, and
//! the two crates the design could have used instead, on the same work (a key's hit).
//!
//! - `rate/no_rule`: the same decision without the rule (routing, client address): the floor.
//! - `rate/known_key`: a key among 1,000 already tracked, table far from full.
//! - `rate/known_key_after_flood`: the same after 1,000,000 distinct addresses (table full).
//! - `rate/new_key_under_flood`: every request a never-seen address, table full of open keys:
//!   each one evicts the least recently seen key (was a whole-shard sweep before).
//! - `rate/new_key_all_limited`: every request a never-seen address, every slot holding a key
//!   being limited: counted in the sketch.
//! - `crates/governor_keyed`: governor's `DefaultKeyedRateLimiter<u64>::check_key`.
//! - `crates/pingora_limits_rate`: pingora-limits' `Rate::observe` (two count-min sketches).
//!
//! `cargo bench -p signpost-bench --bench rate_limit`

use std::hint::black_box;
use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use signpost_policy::{CompiledPolicy, RequestFacts};

const ZONE: &str = r#"
[[zone]]
name = "www"
hosts = ["example.com"]
origin = "127.0.0.1:8000"
"#;

fn rule(mitigation: &str) -> String {
    format!(
        "[[rate_limit]]\nid = \"ip\"\nperiod = \"1m\"\nrequests_per_period = 5\n\
         mitigation_timeout = \"{mitigation}\"\n{ZONE}"
    )
}

fn addr(i: u64) -> IpAddr {
    let base = u128::from("2001:db8::".parse::<Ipv6Addr>().unwrap());
    IpAddr::V6(Ipv6Addr::from(base + (u128::from(i) << 64) + 1))
}

fn decide(p: &CompiledPolicy, h: &http::HeaderMap, peer: IpAddr, now: Instant) {
    let facts = RequestFacts {
        peer,
        host: "example.com",
        method: "GET",
        uri: "/",
        tls: false,
        sni: None,
        headers: h,
    };
    black_box(p.decide(black_box(&facts), now));
}

fn compile(text: &str) -> CompiledPolicy {
    CompiledPolicy::from_toml(text, "bench.toml", Path::new("."), None)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn bench(c: &mut Criterion) {
    let h = http::HeaderMap::new();
    let now = Instant::now();
    let mut g = c.benchmark_group("rate");

    let bare = compile(ZONE);
    let mut i = 0u64;
    g.bench_function("no_rule", |b| {
        b.iter(|| {
            i = (i + 1) % 1000;
            decide(&bare, &h, addr(i), now)
        })
    });

    let p = compile(&rule("0s"));
    g.bench_function("known_key", |b| {
        b.iter(|| {
            i = (i + 1) % 1000;
            decide(&p, &h, addr(i), now)
        })
    });

    // The flood: a million distinct addresses, one request each.
    for k in 0..1_000_000 {
        decide(&p, &h, addr(1_000 + k), now);
    }
    g.bench_function("known_key_after_flood", |b| {
        b.iter(|| {
            // Keep the 1,000 keys recently seen, as real clients would be.
            i = (i + 1) % 1000;
            decide(&p, &h, addr(i), now)
        })
    });
    let mut fresh = 10_000_000u64;
    g.bench_function("new_key_under_flood", |b| {
        b.iter(|| {
            fresh += 1;
            decide(&p, &h, addr(fresh), now)
        })
    });

    // Every slot limited: 100,000 keys sent over their limit, with a long mitigation.
    let limited = compile(&rule("1h"));
    for k in 0..100_000 {
        for _ in 0..6 {
            decide(&limited, &h, addr(k), now);
        }
    }
    g.bench_function("new_key_all_limited", |b| {
        b.iter(|| {
            fresh += 1;
            decide(&limited, &h, addr(fresh), now)
        })
    });
    g.finish();

    let mut g = c.benchmark_group("crates");
    let quota = governor::Quota::with_period(Duration::from_millis(12))
        .unwrap()
        .allow_burst(NonZeroU32::new(5).unwrap());
    let gov = governor::RateLimiter::<u64, _, _>::keyed(quota);
    for k in 0..1000u64 {
        let _ = gov.check_key(&k);
    }
    g.bench_function("governor_keyed", |b| {
        b.iter(|| {
            i = (i + 1) % 1000;
            black_box(gov.check_key(black_box(&i)).is_ok())
        })
    });
    let rate = pingora_limits::rate::Rate::new(Duration::from_secs(60));
    g.bench_function("pingora_limits_rate", |b| {
        b.iter(|| {
            i = (i + 1) % 1000;
            black_box(rate.observe(black_box(&i), 1) > 5)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
