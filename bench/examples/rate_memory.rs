//! Memory per tracked rate-limit key, measured: the heap a policy with one rate-limit rule holds
//! after `N` distinct addresses (default 100,000, the default `max_keys`), divided by the keys
//! tracked. A counting allocator wraps the system allocator.
//!
//! `cargo run --release -p signpost-bench --example rate_memory [-- <keys> [max_keys]]`

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use signpost_policy::{CompiledPolicy, RequestFacts};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, only counting bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn main() {
    let mut args = std::env::args().skip(1);
    let keys: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let max_keys: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let text = format!(
        "[[rate_limit]]\nid = \"ip\"\nperiod = \"1m\"\nrequests_per_period = 5\nmax_keys = {max_keys}\n\
         [[zone]]\nname = \"www\"\nhosts = [\"example.com\"]\norigin = \"127.0.0.1:8000\"\n"
    );
    let policy = CompiledPolicy::from_toml(&text, "mem.toml", Path::new("."), None)
        .unwrap_or_else(|e| panic!("{e}"));
    let h = http::HeaderMap::new();
    let base = u128::from("2001:db8::".parse::<Ipv6Addr>().unwrap());
    let now = Instant::now();
    let before = LIVE.load(Ordering::Relaxed);
    for i in 0..keys {
        let facts = RequestFacts {
            peer: IpAddr::V6(Ipv6Addr::from(base + (u128::from(i) << 64) + 1)),
            host: "example.com",
            method: "GET",
            uri: "/",
            tls: false,
            sni: None,
            headers: &h,
        };
        std::hint::black_box(policy.decide(&facts, now));
    }
    let after = LIVE.load(Ordering::Relaxed);
    let tracked = policy.rate_limit_keys();
    let bytes = after.saturating_sub(before);
    println!(
        "{keys} distinct keys sent, max_keys {max_keys}: {tracked} tracked, {bytes} bytes held, \
         {:.1} bytes per tracked key",
        bytes as f64 / tracked.max(1) as f64
    );
}
