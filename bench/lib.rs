//! The realistic policy the benchmarks decide against, shared by the criterion benchmark
//! (`policy_decide.rs`) and the whole-binary load test (`load.sh`, through the
//! `realistic_policy` example). See README.md.

use std::path::{Path, PathBuf};

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

pub fn geo_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/geo");
    dir.join("country.mmdb").exists().then_some(dir)
}

/// The 10,000 blocked networks: /24s and /32s in 20.0.0.0-59.255.255.255 and /48s in 2001:db8::/32.
pub fn cidrs() -> Vec<String> {
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
pub fn waf_rules(with_geo: bool) -> String {
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

/// The realistic policy: 10,000 blocked CIDRs, geo rules when `geo` holds the databases, a
/// browser check, hotlink protection, 100 custom rules and 3 rate limits; one zone for
/// `example.com` in front of `127.0.0.1:8000`.
pub fn policy_text(geo: Option<&Path>) -> String {
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
