//! `CompiledPolicy::decide` end to end: every rule type, the phase order, the client address,
//! geo databases (made here with mmdb-writer, and the real ones in ../shared/data/geo when
//! present) and rate limits with injected time.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use mmdb_writer::{Value, Writer};
use signpost_policy::{Code, CompiledPolicy, Decision, RequestFacts, Verdict};

// === helpers ===

/// A fresh directory per call, under the system temp dir.
fn temp_dir() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "signpost-policy-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes small country (flat and GeoIP2 layouts) and ASN databases; returns their directory.
fn write_dbs() -> PathBuf {
    let dir = temp_dir();
    let mut flat = Writer::new("test-flat-country");
    flat.insert_value(net("198.51.100.0/24"), Value::map([("country_code", "KP")]))
        .unwrap();
    flat.insert_value(net("203.0.113.0/24"), Value::map([("country_code", "SE")]))
        .unwrap();
    flat.insert_value(net("2001:db8:1::/48"), Value::map([("country_code", "KP")]))
        .unwrap();
    std::fs::write(dir.join("flat.mmdb"), flat.to_bytes().unwrap()).unwrap();

    let mut geoip2 = Writer::new("GeoIP2-Country");
    let rec = |code: &str| {
        Value::map([(
            "country",
            Value::map([
                ("iso_code", Value::from(code)),
                ("names", Value::map([("en", "Somewhere")])),
            ]),
        )])
    };
    geoip2
        .insert_value(net("198.51.100.0/24"), rec("KP"))
        .unwrap();
    geoip2
        .insert_value(net("203.0.113.0/24"), rec("SE"))
        .unwrap();
    std::fs::write(dir.join("geoip2.mmdb"), geoip2.to_bytes().unwrap()).unwrap();

    let mut asn = Writer::new("GeoLite2-ASN");
    asn.insert_value(
        net("192.0.2.0/24"),
        Value::map([
            ("autonomous_system_number", Value::from(64_500_u32)),
            ("autonomous_system_organization", Value::from("Bad Hosting")),
        ]),
    )
    .unwrap();
    asn.insert_value(
        net("203.0.113.0/24"),
        Value::map([("autonomous_system_number", Value::from(64_501_u32))]),
    )
    .unwrap();
    std::fs::write(dir.join("asn.mmdb"), asn.to_bytes().unwrap()).unwrap();
    dir
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

fn compile(text: &str, dir: &Path) -> CompiledPolicy {
    CompiledPolicy::from_toml(text, "test.toml", dir, None).unwrap_or_else(|e| panic!("{e}"))
}

struct Req {
    peer: IpAddr,
    host: &'static str,
    method: &'static str,
    uri: &'static str,
    headers: http::HeaderMap,
}

fn req(peer: &str, uri: &'static str) -> Req {
    let mut headers = http::HeaderMap::new();
    headers.insert("user-agent", "Mozilla/5.0".parse().unwrap());
    Req {
        peer: peer.parse().unwrap(),
        host: "www.example.com",
        method: "GET",
        uri,
        headers,
    }
}

impl Req {
    fn header(mut self, k: &'static str, v: &str) -> Self {
        self.headers.insert(k, v.parse().unwrap());
        self
    }
    fn without(mut self, k: &'static str) -> Self {
        self.headers.remove(k);
        self
    }
    fn decide(&self, p: &CompiledPolicy, now: Instant) -> Decision {
        p.decide(
            &RequestFacts {
                peer: self.peer,
                host: self.host,
                method: self.method,
                uri: self.uri,
                tls: false,
                sni: None,
                headers: &self.headers,
            },
            now,
        )
    }
}

fn refused(code: u16) -> Verdict {
    Verdict::Refuse {
        code: Code::new(code),
        retry_after: None,
    }
}

fn outcome(d: &Decision) -> (Verdict, Option<&str>) {
    (d.verdict, d.rule_id.as_deref())
}

const ZONE: &str = r#"
[[zone]]
name = "www"
hosts = ["example.com", "*.example.com"]
origin = "127.0.0.1:8000"
"#;

// === access rules ===

fn access_policy(country_db: &str) -> String {
    format!(
        r#"
[geo]
country_db = "{country_db}"
asn_db = "asn.mmdb"

[[access_rule]]
id = "office"
action = "allow"
ip = ["192.0.2.10", "2001:db8:1::10"]

[[access_rule]]
id = "bad-ips"
action = "block"
ip = ["192.0.2.0/24", "2001:db8:bad::/48"]

[[access_rule]]
id = "bad-asn"
action = "block"
asn = [64500, 64501]

[[access_rule]]
id = "embargo"
action = "block"
country = ["KP", "ir"]

[[custom_rule]]
id = "no-admin"
action = "block"
expression = 'http.request.uri.path eq "/admin"'

[[legal_rule]]
id = "dmca-1"
expression = 'http.request.uri.path eq "/pirated"'
{ZONE}"#
    )
}

#[test]
fn access_rules_raise_their_codes() {
    let dir = write_dbs();
    for db in ["flat.mmdb", "geoip2.mmdb"] {
        let p = compile(&access_policy(db), &dir);
        let now = Instant::now();
        let d = req("192.0.2.77", "/").decide(&p, now);
        assert_eq!(outcome(&d), (refused(1006), Some("bad-ips")), "{db}");
        assert_eq!(
            outcome(&req("2001:db8:bad::1", "/").decide(&p, now)),
            (refused(1006), Some("bad-ips"))
        );
        // 203.0.113.9: ASN 64501 and country SE: ASN blocks first.
        assert_eq!(
            outcome(&req("203.0.113.9", "/").decide(&p, now)),
            (refused(1005), Some("bad-asn"))
        );
        assert_eq!(
            outcome(&req("198.51.100.1", "/").decide(&p, now)),
            (refused(1009), Some("embargo")),
            "{db}"
        );
        assert_eq!(
            outcome(&req("::ffff:198.51.100.1", "/").decide(&p, now)).0,
            refused(1009),
            "mapped v6"
        );
        if db == "flat.mmdb" {
            assert_eq!(
                outcome(&req("2001:db8:1::1", "/").decide(&p, now)).0,
                refused(1009)
            );
        }
        assert_eq!(
            outcome(&req("100.64.0.1", "/").decide(&p, now)),
            (Verdict::Proxy, None)
        );
    }
}

#[test]
fn access_allow_skips_blocks_and_custom_rules_but_not_legal() {
    let dir = write_dbs();
    let p = compile(&access_policy("flat.mmdb"), &dir);
    let now = Instant::now();
    // 192.0.2.10 is inside the blocked /24 and ASN 64500, but allowed.
    let d = req("192.0.2.10", "/admin").decide(&p, now);
    assert_eq!(outcome(&d), (Verdict::Proxy, Some("office")));
    assert_eq!(
        outcome(&req("192.0.2.10", "/pirated").decide(&p, now)),
        (refused(1026), Some("dmca-1"))
    );
    assert_eq!(
        outcome(&req("100.64.0.1", "/admin").decide(&p, now)),
        (refused(1020), Some("no-admin"))
    );
}

#[test]
fn client_address_from_trusted_proxies_only() {
    let dir = write_dbs();
    let text = format!(
        r#"
[client_ip]
trusted_proxies = ["10.0.0.0/8"]

[[access_rule]]
id = "bad-ips"
action = "block"
ip = ["192.0.2.0/24"]
{ZONE}"#
    );
    let p = compile(&text, &dir);
    let now = Instant::now();
    let via_proxy = req("10.0.0.1", "/").header("x-forwarded-for", "192.0.2.5, 10.0.0.2");
    let d = via_proxy.decide(&p, now);
    assert_eq!(d.client_ip, "192.0.2.5".parse::<IpAddr>().unwrap());
    assert_eq!(d.verdict, refused(1006));
    let spoofed = req("100.64.0.1", "/").header("x-forwarded-for", "192.0.2.5");
    let d = spoofed.decide(&p, now);
    assert_eq!(
        (d.client_ip, d.verdict),
        ("100.64.0.1".parse().unwrap(), Verdict::Proxy)
    );
    let clean = req("10.0.0.1", "/").header("x-forwarded-for", "203.0.113.1, 192.0.2.5");
    assert_eq!(
        clean.decide(&p, now).verdict,
        refused(1006),
        "rightmost untrusted hop is the client"
    );
}

// === browser signature and hotlink ===

#[test]
fn browser_signature() {
    let text = format!(
        r#"
[browser_check]
id = "bic"
block_user_agents = ["(?i)sqlmap", "^curl/"]
{ZONE}"#
    );
    let p = compile(&text, Path::new("."));
    let now = Instant::now();
    assert_eq!(
        outcome(&req("1.2.3.4", "/").without("user-agent").decide(&p, now)),
        (refused(1010), Some("bic"))
    );
    assert_eq!(
        req("1.2.3.4", "/")
            .header("user-agent", "  ")
            .decide(&p, now)
            .verdict,
        refused(1010)
    );
    assert_eq!(
        req("1.2.3.4", "/")
            .header("user-agent", "SQLMap/1.5")
            .decide(&p, now)
            .verdict,
        refused(1010)
    );
    assert_eq!(
        req("1.2.3.4", "/")
            .header("user-agent", "curl/8.0")
            .decide(&p, now)
            .verdict,
        refused(1010)
    );
    assert_eq!(req("1.2.3.4", "/").decide(&p, now).verdict, Verdict::Proxy);
    // A second User-Agent line is seen too (the lines are joined with ", ").
    let mut two = req("1.2.3.4", "/");
    two.headers
        .append("user-agent", "sqlmap/1.7".parse().unwrap());
    assert_eq!(two.decide(&p, now).verdict, refused(1010));

    let lenient = format!("[browser_check]\nblock_empty_user_agent = false\n{ZONE}");
    let p = compile(&lenient, Path::new("."));
    assert_eq!(
        req("1.2.3.4", "/")
            .without("user-agent")
            .decide(&p, now)
            .verdict,
        Verdict::Proxy
    );
}

#[test]
fn hotlink_protection() {
    let text = format!(
        r#"
[hotlink]
extensions = ["png", ".JPG"]
allowed_referers = ["*.partner.net"]
{ZONE}"#
    );
    let p = compile(&text, Path::new("."));
    let now = Instant::now();
    let img = |referer: Option<&str>, uri: &'static str| {
        let r = req("1.2.3.4", uri);
        let r = match referer {
            Some(v) => r.header("referer", v),
            None => r,
        };
        r.decide(&p, now)
    };
    assert_eq!(
        outcome(&img(Some("https://evil.org/page"), "/a/cat.png")),
        (refused(1011), Some("hotlink"))
    );
    assert_eq!(
        img(Some("https://evil.org/"), "/cat.JPG?x=1").verdict,
        refused(1011)
    );
    assert_eq!(img(Some("garbage"), "/cat.png").verdict, refused(1011));
    assert_eq!(
        img(Some("https://www.example.com/blog"), "/cat.png").verdict,
        Verdict::Proxy
    );
    assert_eq!(
        img(Some("http://EXAMPLE.com:8080/"), "/cat.png").verdict,
        Verdict::Proxy
    );
    assert_eq!(
        img(Some("https://cdn.partner.net/"), "/cat.png").verdict,
        Verdict::Proxy
    );
    assert_eq!(
        img(None, "/cat.png").verdict,
        Verdict::Proxy,
        "no Referer is not hotlinking"
    );
    assert_eq!(
        img(Some("https://evil.org/"), "/page.html").verdict,
        Verdict::Proxy
    );
    assert_eq!(
        img(Some("https://evil.org/"), "/dir.png/file").verdict,
        Verdict::Proxy
    );
    // The extension is read as the origin reads it: decoded, without `;params`.
    for uri in [
        "/x%2epng",
        "/x%2EPNG",
        "/x.png;jsessionid=1",
        "/a/x.jpg;v=2?q",
        "/x.p%6eg",
    ] {
        assert_eq!(
            img(Some("https://evil.org/"), uri).verdict,
            refused(1011),
            "{uri}"
        );
    }
}

// === custom rules ===

#[test]
fn custom_rules_first_match_log_and_allow() {
    let text = format!(
        r#"
[[custom_rule]]
id = "log-wp"
action = "log"
expression = 'http.request.uri.path contains "wp"'

[[custom_rule]]
id = "allow-health"
action = "allow"
expression = 'http.request.uri.path eq "/wp-health"'

[[custom_rule]]
id = "wp"
description = "WordPress probes"
action = "block"
expression = 'http.request.uri.path matches "^/wp-(admin|login|health)" and not ip.src in {{10.0.0.0/8 192.168.0.0/16}}'

[[custom_rule]]
id = "never-reached"
action = "block"
expression = 'http.request.uri.path contains "/wp-"'

[[rate_limit]]
id = "strict"
period = "10s"
requests_per_period = 1
{ZONE}"#
    );
    let p = compile(&text, Path::new("."));
    let now = Instant::now();
    let d = req("1.2.3.4", "/wp-login.php").decide(&p, now);
    assert_eq!(outcome(&d), (refused(1020), Some("wp")));
    assert_eq!(
        d.logged.iter().map(|s| &**s).collect::<Vec<_>>(),
        ["log-wp"]
    );
    let d = req("10.1.1.1", "/wp-login.php").decide(&p, now);
    assert_eq!(outcome(&d), (refused(1020), Some("never-reached")));
    // allow skips the remaining custom rules *and* the rate limit.
    for _ in 0..3 {
        let d = req("1.2.3.5", "/wp-health").decide(&p, now);
        assert_eq!(outcome(&d), (Verdict::Proxy, Some("allow-health")));
    }
    let d = req("1.2.3.6", "/").decide(&p, now);
    assert!(
        d.logged.is_empty() && d.logged.capacity() == 0,
        "no allocation when nothing logs"
    );
}

// === rate limits ===

const RATE: &str = r#"
[[rate_limit]]
id = "api"
expression = 'starts_with(http.request.uri.path, "/api/")'
characteristics = ["ip.src", 'http.request.headers["x-api-key"]']
period = "10s"
requests_per_period = 2
mitigation_timeout = "30s"
"#;

#[test]
fn host_characteristic_and_field_drop_the_port_of_ip_literals() {
    let text = r#"
[[rate_limit]]
id = "per-host"
expression = 'http.host eq "192.0.2.1" or http.host eq "[2001:db8::1]"'
characteristics = ["http.host"]
period = "10s"
requests_per_period = 1
mitigation_timeout = "30s"

[[zone]]
name = "direct"
hosts = ["192.0.2.1", "2001:db8::1"]
origin = "127.0.0.1:8000"
"#;
    let p = compile(text, Path::new("."));
    let t0 = Instant::now();
    let at = |host: &'static str| {
        let mut r = req("1.2.3.4", "/");
        r.host = host;
        r
    };
    // The rule's expression matches with the port present, and both ports share one key.
    assert_eq!(at("192.0.2.1:8080").decide(&p, t0).verdict, Verdict::Proxy);
    assert_eq!(
        at("192.0.2.1:9090").decide(&p, t0).verdict,
        Verdict::Refuse {
            code: Code::RATE_LIMITED,
            retry_after: Some(30)
        }
    );
    assert_eq!(
        at("[2001:db8::1]:443").decide(&p, t0).verdict,
        Verdict::Proxy
    );
    assert_eq!(
        at("[2001:db8::1]").decide(&p, t0).verdict,
        Verdict::Refuse {
            code: Code::RATE_LIMITED,
            retry_after: Some(30)
        }
    );
}

#[test]
fn rate_limit_retry_after_comes_from_the_limiter() {
    let p = compile(&format!("{RATE}{ZONE}"), Path::new("."));
    let t0 = Instant::now();
    let r = req("1.2.3.4", "/api/x").header("x-api-key", "k1");
    assert_eq!(r.decide(&p, t0).verdict, Verdict::Proxy);
    assert_eq!(
        r.decide(&p, t0 + Duration::from_secs(1)).verdict,
        Verdict::Proxy
    );
    let d = r.decide(&p, t0 + Duration::from_secs(2));
    assert_eq!(
        outcome(&d),
        (
            Verdict::Refuse {
                code: Code::RATE_LIMITED,
                retry_after: Some(30)
            },
            Some("api")
        )
    );
    let d = r.decide(&p, t0 + Duration::from_millis(12_500));
    assert_eq!(
        d.verdict,
        Verdict::Refuse {
            code: Code::RATE_LIMITED,
            retry_after: Some(20)
        },
        "ceil(19.5)"
    );
    assert_eq!(
        r.decide(&p, t0 + Duration::from_secs(32)).verdict,
        Verdict::Proxy
    );
    // Another key, or a path the rule does not match, is not limited.
    let other = req("1.2.3.4", "/api/x").header("x-api-key", "k2");
    assert_eq!(
        other.decide(&p, t0 + Duration::from_secs(2)).verdict,
        Verdict::Proxy
    );
    assert_eq!(
        req("1.2.3.4", "/home").decide(&p, t0).verdict,
        Verdict::Proxy
    );
    assert_eq!(p.rate_limit_keys(), 2);
}

#[test]
fn rate_state_survives_reload_when_the_rule_is_unchanged() {
    let text = format!("{RATE}{ZONE}");
    let old = compile(&text, Path::new("."));
    let t0 = Instant::now();
    let r = req("1.2.3.4", "/api/x");
    r.decide(&old, t0);
    r.decide(&old, t0);
    let same = CompiledPolicy::from_toml(&text, "t", Path::new("."), Some(&old)).unwrap();
    assert_eq!(same.rate_limit_keys(), 1);
    assert_eq!(
        r.decide(&same, t0).verdict,
        Verdict::Refuse {
            code: Code::RATE_LIMITED,
            retry_after: Some(30)
        }
    );

    let changed = text.replace("requests_per_period = 2", "requests_per_period = 3");
    let fresh = CompiledPolicy::from_toml(&changed, "t", Path::new("."), Some(&same)).unwrap();
    assert_eq!(fresh.rate_limit_keys(), 0);
    assert_eq!(r.decide(&fresh, t0).verdict, Verdict::Proxy);
}

#[test]
fn each_rate_limit_rule_reports_its_own_keys() {
    let text = format!(
        "{RATE}\n[[rate_limit]]\nid = \"all\"\nperiod = \"10s\"\nrequests_per_period = 100\n{ZONE}"
    );
    let p = compile(&text, Path::new("."));
    let t0 = Instant::now();
    req("1.2.3.4", "/api/x").decide(&p, t0);
    req("1.2.3.5", "/home").decide(&p, t0);
    let states = p.rate_limit_states();
    let by_rule: Vec<(&str, usize)> = states.iter().map(|s| (&*s.rule, s.keys)).collect();
    // "api" counts the /api/ request only; "all" counts both clients.
    assert_eq!(by_rule, [("api", 1), ("all", 2)]);
    assert_eq!(
        states.iter().map(|s| s.keys).sum::<usize>(),
        p.rate_limit_keys()
    );
}

// === the rules as the operator's metrics list them ===

#[test]
fn the_rules_are_listed_with_their_phase_and_action_in_the_order_they_run() {
    let dir = write_dbs();
    let text = format!(
        "[browser_check]\n{RATE}{}",
        access_policy(&dir.join("flat.mmdb").display().to_string())
    )
    .replace(
        "[[custom_rule]]",
        "[hotlink]\nextensions = [\"png\"]\n\n[[custom_rule]]\nid = \"note\"\naction = \"log\"\nexpression = 'http.request.method eq \"GET\"'\n\n[[custom_rule]]",
    );
    let p = compile(&text, &dir);
    let rules = p.rules();
    let listed: Vec<String> = rules
        .iter()
        .map(|r| format!("{} {} {}", r.phase, r.action, r.id))
        .collect();
    assert_eq!(
        listed,
        [
            "access_rules allow office",
            "access_rules block bad-ips",
            "access_rules block bad-asn",
            "access_rules block embargo",
            "browser_check block browser-check",
            "hotlink block hotlink",
            "legal_rules block dmca-1",
            "custom_rules log note",
            "custom_rules block no-admin",
            "rate_limits rate_limit api",
        ]
    );
    // Every phase named is one of the decision's phases.
    for rule in p.rules() {
        assert!(signpost_policy::PHASES.contains(&rule.phase), "{rule:?}");
    }
}

#[test]
fn the_policy_hash_is_the_sha256_of_its_text() {
    let text = format!("{RATE}{ZONE}");
    let p = compile(&text, Path::new("."));
    use sha2::Digest;
    let expected: String = sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(p.sha256(), expected);
    let other = compile(ZONE, Path::new("."));
    assert_ne!(other.sha256(), p.sha256());
}

// === phase order ===

#[test]
fn phases_run_in_documented_order() {
    let dir = write_dbs();
    let text = format!(
        r#"
[geo]
country_db = "flat.mmdb"

[[access_rule]]
id = "embargo"
action = "block"
country = ["KP"]

[browser_check]
id = "bic"

[hotlink]
extensions = ["png"]

[[legal_rule]]
id = "legal"
expression = 'ends_with(http.request.uri.path, ".png") and ip.src.country eq "SE"'

[[custom_rule]]
id = "waf"
action = "block"
expression = 'http.request.uri.path contains "x"'

[[rate_limit]]
id = "rl"
period = "1m"
requests_per_period = 1
{ZONE}"#
    );
    let p = compile(&text, &dir);
    let now = Instant::now();
    // Each request trips everything from its phase on; the earliest phase decides.
    let all = req("198.51.100.1", "/x.png")
        .without("user-agent")
        .header("referer", "https://evil.org/");
    assert_eq!(
        outcome(&all.decide(&p, now)),
        (refused(1009), Some("embargo"))
    );
    let all = req("203.0.113.1", "/x.png")
        .without("user-agent")
        .header("referer", "https://evil.org/");
    assert_eq!(outcome(&all.decide(&p, now)), (refused(1010), Some("bic")));
    let all = req("203.0.113.1", "/x.png").header("referer", "https://evil.org/");
    assert_eq!(
        outcome(&all.decide(&p, now)),
        (refused(1011), Some("hotlink"))
    );
    let all = req("203.0.113.1", "/x.png");
    assert_eq!(
        outcome(&all.decide(&p, now)),
        (refused(1026), Some("legal"))
    );
    let all = req("203.0.113.2", "/x");
    assert_eq!(outcome(&all.decide(&p, now)), (refused(1020), Some("waf")));
    let r = req("203.0.113.3", "/");
    assert_eq!(r.decide(&p, now).verdict, Verdict::Proxy);
    assert_eq!(outcome(&r.decide(&p, now)).1, Some("rl"));
    let mut unknown = req("203.0.113.3", "/x");
    unknown.host = "nowhere.org";
    assert_eq!(outcome(&unknown.decide(&p, now)), (refused(1001), None));
}

// === databases ===

#[test]
fn tls_listener_files_are_checked_when_compiling() {
    let dir = temp_dir();
    std::fs::create_dir_all(dir.join("certs")).unwrap();
    std::fs::write(
        dir.join("certs/edge.pem"),
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("certs/edge.key"),
        "-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n",
    )
    .unwrap();
    let text = format!(
        r#"
[[listener]]
addr = "[::]:8443"
tls = {{ cert = "certs/edge.pem", key = "certs/edge.key" }}
{ZONE}"#
    );
    let p = compile(&text, &dir);
    let tls = p.listeners()[0].tls.as_ref().expect("a TLS listener");
    assert_eq!(tls.cert, dir.join("certs/edge.pem"));
    assert_eq!(tls.key, dir.join("certs/edge.key"));

    // A missing key is reported at its value, with the line.
    std::fs::remove_file(dir.join("certs/edge.key")).unwrap();
    let err = CompiledPolicy::from_toml(&text, "test.toml", &dir, None).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("test.toml:4:40: cannot read TLS private key `certs/edge.key`"),
        "{msg}"
    );
    // Key and certificate swapped: neither holds the block it should.
    let swapped = text.replace("edge.key", "edge.pem");
    std::fs::write(
        dir.join("certs/edge.key"),
        "-----BEGIN PRIVATE KEY-----\nMC4\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let swapped = swapped.replacen("certs/edge.pem", "certs/edge.key", 1);
    let err = CompiledPolicy::from_toml(&swapped, "test.toml", &dir, None).unwrap_err();
    assert_eq!(err.problems().len(), 2, "{err}");
}

#[test]
fn missing_database_names_the_path_and_the_line() {
    let text = format!(
        "[geo]\ncountry_db = \"nope/country.mmdb\"\n\n[[access_rule]]\nid = \"x\"\naction = \"block\"\ncountry = [\"KP\"]\n{ZONE}"
    );
    let e = CompiledPolicy::from_toml(&text, "p.toml", Path::new("/nonexistent"), None)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("p.toml:2:14: cannot open `/nonexistent/nope/country.mmdb`"),
        "{e}"
    );

    let text = format!(
        "[[custom_rule]]\nid = \"x\"\naction = \"block\"\nexpression = 'ip.src.asnum eq 1'\n{ZONE}"
    );
    let e = CompiledPolicy::from_toml(&text, "p.toml", Path::new("."), None)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("p.toml:4:14: this rule needs the client's AS number"),
        "{e}"
    );
}

/// The real databases in `../shared/data/geo`, when that directory exists. Without it the tests
/// on the real files are skipped, loudly, except under `SIGNPOST_NO_SKIP=1` (`.ci/run` sets it),
/// where a missing directory fails them: CI must never pass without having read the real files.
fn shared_geo() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/geo");
    if dir.join("maxmind-test/GeoIP2-Country-Test.mmdb").exists() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("SIGNPOST_NO_SKIP").is_none(),
        "SIGNPOST_NO_SKIP is set but {} is missing",
        dir.display()
    );
    eprintln!("skipped: ../shared/data/geo not present (SIGNPOST_NO_SKIP=1 makes this fail)");
    None
}

#[test]
fn real_maxmind_test_databases() {
    let Some(dir) = shared_geo() else { return };
    let text = format!(
        r#"
[geo]
country_db = "maxmind-test/GeoIP2-Country-Test.mmdb"
asn_db = "maxmind-test/GeoLite2-ASN-Test.mmdb"

[[custom_rule]]
id = "gb"
action = "block"
expression = 'ip.src.country eq "GB"'

[[custom_rule]]
id = "se"
action = "block"
expression = 'ip.src.country eq "SE"'

[[custom_rule]]
id = "as1221"
action = "block"
expression = 'ip.src.asnum eq 1221'

[[custom_rule]]
id = "as7018"
action = "block"
expression = 'ip.src.asnum eq 7018'
{ZONE}"#
    );
    let p = compile(&text, &dir);
    let now = Instant::now();
    for (ip, rule) in [
        ("81.2.69.142", "gb"),
        ("2.125.160.216", "gb"),
        ("89.160.20.112", "se"),
        ("1.128.0.1", "as1221"),
        ("12.81.92.1", "as7018"),
    ] {
        assert_eq!(outcome(&req(ip, "/").decide(&p, now)).1, Some(rule), "{ip}");
    }
    assert_eq!(
        req("127.0.0.1", "/").decide(&p, now).verdict,
        Verdict::Proxy
    );
}

#[test]
fn real_ip_location_databases() {
    let Some(dir) = shared_geo() else { return };
    let text = format!(
        r#"
[geo]
country_db = "country.mmdb"
asn_db = "asn.mmdb"

[[access_rule]]
id = "google-asn"
action = "block"
asn = [15169]

[[access_rule]]
id = "au"
action = "block"
country = ["AU"]
{ZONE}"#
    );
    let p = compile(&text, &dir);
    let now = Instant::now();
    assert_eq!(
        outcome(&req("8.8.8.8", "/").decide(&p, now)),
        (refused(1005), Some("google-asn"))
    );
    assert_eq!(
        outcome(&req("::ffff:8.8.4.4", "/").decide(&p, now)),
        (refused(1005), Some("google-asn"))
    );
    assert_eq!(
        outcome(&req("1.1.1.1", "/").decide(&p, now)),
        (refused(1009), Some("au"))
    );
    assert_eq!(
        req("10.0.0.1", "/").decide(&p, now).verdict,
        Verdict::Proxy,
        "private: no record"
    );
}

// === robustness ===

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

    /// Whatever a client sends, `decide` answers (no panic), using the shipped example policy.
    #[test]
    fn decide_never_panics(
        host in ".{0,80}",
        uri in ".{0,120}",
        xff in "[0-9a-f.:, \\[\\]]{0,60}",
        ua in "[ -~]{0,60}",
        referer in "[ -~]{0,60}",
        peer in proptest::prelude::any::<std::net::IpAddr>(),
    ) {
        use std::sync::OnceLock;
        static POLICY: OnceLock<CompiledPolicy> = OnceLock::new();
        let p = POLICY.get_or_init(|| {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/example.toml");
            CompiledPolicy::load(&path, None).unwrap()
        });
        let mut headers = http::HeaderMap::new();
        for (k, v) in [("x-forwarded-for", &xff), ("user-agent", &ua), ("referer", &referer)] {
            if let Ok(v) = http::HeaderValue::from_str(v) {
                headers.insert(k, v);
            }
        }
        let facts = RequestFacts { peer, host: &host, method: "GET", uri: &uri, tls: false, sni: None, headers: &headers };
        let _ = p.decide(&facts, Instant::now());
    }
}

#[test]
fn a_million_ipv6_addresses_do_not_free_a_new_abuser() {
    let p = compile(
        &format!(
            r#"
[[rate_limit]]
id = "per-ip"
period = "1m"
requests_per_period = 5
{ZONE}"#
        ),
        Path::new("."),
    );
    let t0 = Instant::now();
    let base: u128 = "2001:db8::".parse::<std::net::Ipv6Addr>().unwrap().into();
    let mut r = req("2001:db8::1", "/");
    for i in 0..1_000_000u128 {
        r.peer = IpAddr::V6((base + (i << 64) + 7).into());
        let d = r.decide(&p, t0 + Duration::from_micros(i as u64));
        assert_eq!(d.verdict, Verdict::Proxy, "flood request {i}");
    }
    // The default max_keys bounds memory.
    assert!(p.rate_limit_keys() <= signpost_policy::DEFAULT_MAX_KEYS + 16);
    let (evicted, sketched) = p.rate_limit_pressure();
    assert!(evicted >= 1_000_000 - 100_016, "{evicted}");
    assert_eq!(sketched, 0);
    // A new address, first seen after the flood: counted from its first request.
    let abuser = req("2001:db8:ffff::66", "/");
    let t1 = t0 + Duration::from_secs(2);
    for n in 0..5 {
        assert_eq!(abuser.decide(&p, t1).verdict, Verdict::Proxy, "request {n}");
    }
    let d = abuser.decide(&p, t1);
    assert_eq!(
        d.verdict,
        Verdict::Refuse {
            code: Code::new(1015),
            retry_after: Some(60)
        }
    );
    assert_eq!(d.rule_id.as_deref(), Some("per-ip"));
}

// === fleet scope ===

const FLEET: &str = r#"
[redis]
url = "redis://127.0.0.1:6379/2"
timeout = "3ms"
key_prefix = "edge:"

[[rate_limit]]
id = "login"
scope = "fleet"
period = "10s"
requests_per_period = 2
mitigation_timeout = "30s"

[[rate_limit]]
id = "local"
requests_per_period = 100
period = "1m"
"#;

#[test]
fn fleet_rules_hand_the_edge_a_shared_key_and_cache_refusals() {
    let p = compile(&format!("{FLEET}{ZONE}"), Path::new("."));
    let redis = p.redis().unwrap();
    assert_eq!(redis.timeout, Duration::from_millis(3));
    assert_eq!(redis.on_error, signpost_policy::OnError::Local);
    let t0 = Instant::now();
    let a = req("192.0.2.1", "/").decide(&p, t0);
    assert_eq!(a.verdict, Verdict::Proxy);
    assert_eq!(a.fleet.len(), 1);
    let check = &a.fleet[0];
    assert_eq!(&**check.rule_id(), "login");
    assert!(check.key().starts_with("edge:rl:"), "{}", check.key());
    assert_eq!(
        (check.period_ms(), check.limit(), check.mitigation_ms()),
        (10_000, 2, 30_000)
    );
    // The same client gives the same key in another process: no per-process seed.
    let again = compile(&format!("{FLEET}{ZONE}"), Path::new("."));
    let b = req("192.0.2.1", "/").decide(&again, t0);
    assert_eq!(b.fleet[0].key(), check.key());
    assert_ne!(
        req("192.0.2.2", "/").decide(&p, t0).fleet[0].key(),
        check.key()
    );
    // Redis allowed it; then refused it for 29.5 s: the next request is refused locally.
    assert_eq!(check.shared(true, 0, t0), Verdict::Proxy);
    let refused = Verdict::Refuse {
        code: Code::new(1015),
        retry_after: Some(30),
    };
    assert_eq!(check.shared(false, 29_500, t0), refused);
    let c = req("192.0.2.1", "/").decide(&p, t0 + Duration::from_secs(1));
    assert!(c.fleet.is_empty(), "no Redis call for a refused key");
    assert_eq!(
        c.verdict,
        Verdict::Refuse {
            code: Code::new(1015),
            retry_after: Some(29)
        }
    );
    assert_eq!(c.rule_id.as_deref(), Some("login"));
    // After the retry time, Redis is asked again.
    let d = req("192.0.2.1", "/").decide(&p, t0 + Duration::from_secs(30));
    assert_eq!(d.fleet.len(), 1);
}

#[test]
fn fleet_fallback_counts_locally_allows_or_refuses() {
    use signpost_policy::OnError;
    let p = compile(&format!("{FLEET}{ZONE}"), Path::new("."));
    let t0 = Instant::now();
    let check = req("192.0.2.9", "/").decide(&p, t0).fleet[0].clone();
    assert_eq!(check.fallback(OnError::Local, t0), Verdict::Proxy);
    assert_eq!(check.fallback(OnError::Local, t0), Verdict::Proxy);
    assert_eq!(
        check.fallback(OnError::Local, t0),
        Verdict::Refuse {
            code: Code::new(1015),
            retry_after: Some(30)
        }
    );
    assert_eq!(check.fallback(OnError::Allow, t0), Verdict::Proxy);
    assert_eq!(
        check.fallback(OnError::Refuse, t0),
        Verdict::Refuse {
            code: Code::new(1015),
            retry_after: Some(1)
        }
    );
}

/// Three fleet rules that all count every request, in this order.
const FLEET_THREE: &str = r#"
[redis]
url = "redis://127.0.0.1:6379/2"

[[rate_limit]]
id = "first"
scope = "fleet"
period = "10s"
requests_per_period = 5

[[rate_limit]]
id = "second"
scope = "fleet"
period = "10s"
requests_per_period = 5

[[rate_limit]]
id = "third"
scope = "fleet"
period = "10s"
requests_per_period = 5
"#;

fn limited(retry_after: u32) -> Verdict {
    Verdict::Refuse {
        code: Code::new(1015),
        retry_after: Some(retry_after),
    }
}

/// Drives the fleet step with one scripted verdict per check, as the edge does with Redis's
/// answers; returns the ids of the rules asked about, in order.
fn count_with(decision: &mut Decision, answers: &[Verdict]) -> Vec<String> {
    let mut asked = Vec::new();
    let mut answers = answers.iter();
    let mut count = decision.count_in_fleet();
    while let Some(check) = count.next_check() {
        asked.push(check.rule_id().to_string());
        count.answer(*answers.next().expect("a check past the scripted answers"));
    }
    asked
}

#[test]
fn fleet_checks_are_counted_in_file_order_while_nothing_refused() {
    let p = compile(&format!("{FLEET_THREE}{ZONE}"), Path::new("."));
    let t0 = Instant::now();
    let mut d = req("192.0.2.1", "/").decide(&p, t0);
    let all = [Verdict::Proxy; 3];
    assert_eq!(count_with(&mut d, &all), ["first", "second", "third"]);
    assert_eq!((d.verdict, d.rule_id.as_deref()), (Verdict::Proxy, None));
    assert!(d.fleet.is_empty(), "the checks were taken out");
    // Nothing left to count: the step is final at once.
    assert!(d.count_in_fleet().next_check().is_none());
}

#[test]
fn the_first_fleet_refusal_decides_and_stops_the_count() {
    let p = compile(&format!("{FLEET_THREE}{ZONE}"), Path::new("."));
    let t0 = Instant::now();
    let mut d = req("192.0.2.1", "/").decide(&p, t0);
    let answers = [Verdict::Proxy, limited(7), limited(9)];
    assert_eq!(count_with(&mut d, &answers), ["first", "second"]);
    assert_eq!(d.verdict, limited(7));
    assert_eq!(d.rule_id.as_deref(), Some("second"));
}

#[test]
fn a_refused_decision_asks_redis_nothing() {
    let p = compile(&format!("{FLEET_THREE}{ZONE}"), Path::new("."));
    let mut d = req("192.0.2.1", "/").decide(&p, Instant::now());
    assert_eq!(d.fleet.len(), 3);
    d.verdict = refused(1020);
    d.rule_id = Some("custom".into());
    assert_eq!(count_with(&mut d, &[]), Vec::<String>::new());
    assert_eq!(d.verdict, refused(1020));
    assert_eq!(d.rule_id.as_deref(), Some("custom"));
}

#[test]
fn a_fleet_fallback_decides_as_an_answer_would() {
    use signpost_policy::OnError;
    let p = compile(&format!("{FLEET_THREE}{ZONE}"), Path::new("."));
    let t0 = Instant::now();
    let mut d = req("192.0.2.1", "/").decide(&p, t0);
    let mut asked = Vec::new();
    let mut count = d.count_in_fleet();
    while let Some(check) = count.next_check() {
        asked.push(check.rule_id().to_string());
        // Redis cannot answer: the first rule lets it through, the second refuses (fail closed).
        let on_error = if asked.len() == 1 {
            OnError::Allow
        } else {
            OnError::Refuse
        };
        let verdict = check.fallback(on_error, t0);
        count.answer(verdict);
    }
    assert_eq!(asked, ["first", "second"]);
    assert_eq!(d.verdict, limited(1));
    assert_eq!(d.rule_id.as_deref(), Some("second"));
}

#[test]
fn a_fleet_check_left_unanswered_decides_nothing() {
    let p = compile(&format!("{FLEET_THREE}{ZONE}"), Path::new("."));
    let mut d = req("192.0.2.1", "/").decide(&p, Instant::now());
    let mut count = d.count_in_fleet();
    assert_eq!(&**count.next_check().unwrap().rule_id(), "first");
    assert_eq!(&**count.next_check().unwrap().rule_id(), "second");
    count.answer(limited(3));
    assert!(count.next_check().is_none());
    // An answer with no check asked for is ignored.
    count.answer(limited(4));
    assert_eq!(
        (d.verdict, d.rule_id.as_deref()),
        (limited(3), Some("second"))
    );
}

#[test]
fn redis_section_errors_name_file_line_col() {
    let text = r#"[redis]
url = "http://127.0.0.1:6379"
db = -1
timeout = "1m"
key_prefix = "a b"
on_error = "panic"

[[rate_limit]]
id = "x"
scope = "everywhere"
period = "1m"
requests_per_period = 1
"#;
    let e = CompiledPolicy::from_toml(&format!("{text}{ZONE}"), "t.toml", Path::new("."), None)
        .unwrap_err()
        .to_string();
    for expected in [
        "t.toml:2:7: `http://127.0.0.1:6379` is not a redis:// or rediss:// URL",
        "t.toml:3:6: db must be between 0 and 65535",
        "t.toml:4:11: timeout must be between 1ms and 10s",
        "t.toml:5:14: key_prefix must be at most 64 bytes",
        "t.toml:6:12: unknown on_error `panic`",
        "t.toml:10:9: unknown scope `everywhere`",
    ] {
        assert!(e.contains(expected), "missing {expected:?} in:\n{e}");
    }
    let no_redis =
        "[[rate_limit]]\nid = \"x\"\nscope = \"fleet\"\nperiod = \"1m\"\nrequests_per_period = 1\n";
    let e = CompiledPolicy::from_toml(&format!("{no_redis}{ZONE}"), "t.toml", Path::new("."), None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("t.toml:3:9: a fleet-scope rule needs a `[redis]` section"),
        "{e}"
    );
    for (url, why) in [
        ("redis://", "the URL names no host"),
        ("redis://h:0", "the port must be a number"),
        ("redis://h:6379/x", "the path must be a database number"),
    ] {
        let t = format!("[redis]\nurl = \"{url}\"\n{ZONE}");
        let e = CompiledPolicy::from_toml(&t, "t.toml", Path::new("."), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(why), "{url}: {e}");
    }
    for url in [
        "redis://:pw@[::1]:6379/1",
        "rediss://user:pw@redis.internal",
    ] {
        let t = format!("[redis]\nurl = \"{url}\"\n{ZONE}");
        let p = compile(&t, Path::new("."));
        assert!(
            !format!("{:?}", p.redis()).contains("pw"),
            "password redacted"
        );
    }
}

// === rate limits that count answers ===

const COUNTING: &str = r#"
[[rate_limit]]
id = "not-found"
expression = 'starts_with(http.request.uri.path, "/api/")'
counting_expression = 'http.response.code eq 404'
period = "10s"
requests_per_period = 2
"#;

impl Req {
    fn facts(&self) -> RequestFacts<'_> {
        RequestFacts {
            peer: self.peer,
            host: self.host,
            method: self.method,
            uri: self.uri,
            tls: false,
            sni: None,
            headers: &self.headers,
        }
    }

    /// Decides the request, then counts its answer with status `code` as the edge does.
    fn answered(&self, p: &CompiledPolicy, code: u16, now: Instant) -> Decision {
        let d = self.decide(p, now);
        let checks = p.count_answers(
            &d.answers,
            &self.facts(),
            d.client_ip,
            None,
            signpost_policy::ResponseFacts { code, edge_code: 0 },
            now,
        );
        assert!(checks.is_empty(), "instance scope asks Redis nothing");
        d
    }
}

#[test]
fn a_limit_counting_answers_trips_only_on_matching_answers() {
    let p = compile(&format!("{COUNTING}{ZONE}"), Path::new("."));
    let t0 = Instant::now();
    let api = req("192.0.2.9", "/api/x");
    // Any number of 200s: never counted.
    for _ in 0..10 {
        let d = api.answered(&p, 200, t0);
        assert_eq!(d.verdict, Verdict::Proxy);
        assert_eq!(d.answers.len(), 1, "the answer is handed to the edge");
    }
    // Two 404s are counted; the request after them is refused for the rest of the window.
    assert_eq!(api.answered(&p, 404, t0).verdict, Verdict::Proxy);
    assert_eq!(api.answered(&p, 404, t0).verdict, Verdict::Proxy);
    let d = api.decide(&p, t0 + Duration::from_secs(4));
    assert_eq!(
        (d.verdict, d.rule_id.as_deref()),
        (
            Verdict::Refuse {
                code: Code::RATE_LIMITED,
                retry_after: Some(6)
            },
            Some("not-found")
        )
    );
    assert!(
        d.answers.is_empty(),
        "a refused request's answer is not counted"
    );
    // Requests the match expression leaves out are neither checked nor counted.
    let other = req("192.0.2.9", "/page").decide(&p, t0);
    assert_eq!(other.verdict, Verdict::Proxy);
    assert!(other.answers.is_empty());
    // Another client is not affected; after the window the client is served again.
    assert_eq!(
        req("192.0.2.10", "/api/x").decide(&p, t0).verdict,
        Verdict::Proxy
    );
    assert_eq!(
        api.decide(&p, t0 + Duration::from_secs(10)).verdict,
        Verdict::Proxy
    );
}

#[test]
fn a_mitigation_timeout_holds_after_the_counted_answers_stop() {
    let text = format!("{}mitigation_timeout = \"1m\"\n{ZONE}", COUNTING);
    let p = compile(&text, Path::new("."));
    let t0 = Instant::now();
    let api = req("192.0.2.9", "/api/x");
    api.answered(&p, 404, t0);
    api.answered(&p, 404, t0);
    // Refused for a minute from the answer that reached the limit, well after the window.
    for later in [1, 20, 59] {
        let d = api.decide(&p, t0 + Duration::from_secs(later));
        assert_eq!(
            d.verdict,
            Verdict::Refuse {
                code: Code::RATE_LIMITED,
                retry_after: Some(60 - later as u32)
            },
            "{later} s after"
        );
    }
    assert_eq!(
        api.decide(&p, t0 + Duration::from_secs(60)).verdict,
        Verdict::Proxy
    );
}

#[test]
fn a_fleet_limit_counting_answers_checks_requests_and_counts_answers_in_redis() {
    let text = r#"
[redis]
url = "redis://127.0.0.1:6379"

[[rate_limit]]
id = "not-found"
scope = "fleet"
counting_expression = 'http.response.code eq 404'
period = "10s"
requests_per_period = 3
"#;
    let p = compile(&format!("{text}{ZONE}"), Path::new("."));
    let t0 = Instant::now();
    let r = req("192.0.2.9", "/x");
    let d = r.decide(&p, t0);
    assert_eq!(d.fleet.len(), 1);
    assert!(!d.fleet[0].counts(), "the request is only checked");
    // Redis's scripts take one less than the rule's limit: the third answer trips it.
    assert_eq!(d.fleet[0].limit(), 2);
    let ok = |code| signpost_policy::ResponseFacts { code, edge_code: 0 };
    let none = p.count_answers(&d.answers, &r.facts(), d.client_ip, None, ok(200), t0);
    assert!(none.is_empty(), "a 200 is not counted");
    let counted = p.count_answers(&d.answers, &r.facts(), d.client_ip, None, ok(404), t0);
    assert_eq!(counted.len(), 1);
    assert!(counted[0].counts());
    assert_eq!(
        counted[0].key(),
        d.fleet[0].key(),
        "one key for the check and the count"
    );
}

#[test]
fn new_settings_are_checked_at_their_place() {
    let text = r#"[[zone]]
name = "a"
hosts = ["a.example"]
origin = "127.0.0.1:1"
[[zone.divert]]
name = "maze"
origin = "nope:99999"
[[zone.divert]]
name = "bad name"
origin = "127.0.0.1:2"
[[custom_rule]]
id = "d1"
action = "divert"
divert = "mazr"
expression = 'ip.src eq 192.0.2.1'
[[custom_rule]]
id = "d2"
action = "divert"
expression = 'ip.src eq 192.0.2.1'
[[custom_rule]]
id = "d3"
action = "block"
divert = "maze"
expression = 'ip.src eq 192.0.2.1'
[[rate_limit]]
id = "r"
expression = 'http.response.code eq 404'
counting_expression = 'http.response.code eq 404 and nope'
period = "1m"
requests_per_period = 1
"#;
    let e = CompiledPolicy::from_toml(text, "policy.toml", Path::new("."), None)
        .expect_err("must be refused")
        .to_string();
    for want in [
        "policy.toml:7:10: ",
        "policy.toml:9:8: `bad name` is not a divert name",
        "policy.toml:14:10: no zone declares a divert named `mazr`",
        "did you mean \"maze\"?",
        "policy.toml:18:10: ",
        "a divert rule names where it sends requests",
        "policy.toml:23:10: `divert` goes with `action = \"divert\"` only",
        "policy.toml:27:15: `http.response.code` is only available in error rules",
        "policy.toml:28:",
    ] {
        assert!(e.contains(want), "{want:?} not in:\n{e}");
    }
}
