//! The certificates the TLS listeners serve: reloaded on SIGHUP and with `--watch` while
//! established connections go on, kept when a new one cannot be loaded, chosen by SNI per zone,
//! and their expiry in `/metrics`; the zone's redirect to HTTPS and its HSTS header.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

/// A self-signed certificate for `names`, expiring at the start of `year`.
struct TestCert {
    cert_pem: String,
    key_pem: String,
    der: Vec<u8>,
    not_after: i64,
}

impl TestCert {
    fn new(names: &[&str], year: i32) -> TestCert {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.not_after = rcgen::date_time_ymd(year, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        TestCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().to_vec(),
            not_after: params.not_after.unix_timestamp(),
        }
    }

    fn ca(&self) -> reqwest::Certificate {
        reqwest::Certificate::from_pem(self.cert_pem.as_bytes()).unwrap()
    }

    /// Writes the pair as `<name>.pem` and `<name>.key`, each replaced whole by a rename, as
    /// certbot and cert-manager do.
    fn write(&self, dir: &std::path::Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.pem"));
        let key = dir.join(format!("{name}.key"));
        replace(&cert, &self.cert_pem);
        replace(&key, &self.key_pem);
        (cert, key)
    }
}

fn replace(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// An HTTPS client trusting `cas`, sending the names to the edge, reporting the peer's certificate.
fn https_client(addr: SocketAddr, cas: &[&TestCert], names: &[&str]) -> reqwest::blocking::Client {
    let mut builder = reqwest::blocking::Client::builder()
        .tls_certs_only(cas.iter().map(|c| c.ca()))
        .tls_info(true)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30));
    for name in names {
        builder = builder.resolve(name, addr);
    }
    builder.build().unwrap()
}

/// GETs `url`: its status, HTTP version and the certificate the edge served.
fn get(client: &reqwest::blocking::Client, url: &str) -> (u16, reqwest::Version, Vec<u8>) {
    let response = client.get(url).send().unwrap();
    let served = response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .expect("the TLS info names the peer's certificate")
        .to_vec();
    (response.status().as_u16(), response.version(), served)
}

/// Polls `/metrics` until the sample named with `labels` is `want`.
fn wait_for_metric(edge: &Edge, name: &str, labels: &[(&str, &str)], want: f64) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (_, text) = admin_get(edge, "/metrics");
        let got = metric(&text, name, labels);
        if got == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}{labels:?} is {got:?}, not {want}\n{text}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// An edge whose TLS listener serves `listener_cert`, with the zone `test` on example.com and
/// `zone_extra` inside it; `top` before it.
fn start(
    name: &str,
    listener_cert: &TestCert,
    top: &str,
    zone_extra: &str,
    args: &[&str],
) -> (EchoOrigin, Edge) {
    let origin = EchoOrigin::start();
    let scratch = Scratch::new(name);
    let (cert, key) = listener_cert.write(&scratch.0, "listener");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let text = format!(
        r#"admin = "{admin}"
{top}

[[listener]]
addr = "{addr}"
tls = {{ cert = "{}", key = "{}" }}

[[zone]]
name = "test"
hosts = ["example.com"]
origin = "{}"
{zone_extra}
"#,
        cert.display(),
        key.display(),
        origin.addr
    );
    let config = scratch.write("policy.toml", &text);
    let edge = Edge::start_with_file(scratch, config, addr, admin, args);
    (origin, edge)
}

const NOT_AFTER: &str = "signpost_tls_certificate_not_after_seconds";

#[test]
fn swapped_files_and_sighup_serve_the_new_certificate_while_an_open_h2_connection_goes_on() {
    let old = TestCert::new(&["example.com"], 2031);
    let new = TestCert::new(&["example.com"], 2032);
    let (_origin, edge) = start("cert-reload", &old, "", "", &[]);
    let listener_label = format!("listener {}", edge.addr);
    let label = [("cert", listener_label.as_str())];
    wait_for_metric(&edge, NOT_AFTER, &label, old.not_after as f64);
    let url = format!("https://example.com:{}/", edge.addr.port());

    let held = https_client(edge.addr, &[&old, &new], &["example.com"]);
    let (status, version, served) = get(&held, &url);
    assert_eq!((status, version), (200, reqwest::Version::HTTP_2));
    assert_eq!(served, old.der, "the first certificate serves");

    new.write(edge.config.parent().unwrap(), "listener");
    edge.signal("HUP");
    wait_for_metric(&edge, NOT_AFTER, &label, new.not_after as f64);

    // A new connection gets the new certificate.
    let fresh = https_client(edge.addr, &[&old, &new], &["example.com"]);
    let (status, _, served) = get(&fresh, &url);
    assert_eq!(status, 200);
    assert_eq!(
        served, new.der,
        "a new connection is served the new certificate"
    );
    // The HTTP/2 connection opened before the reload still carries requests: its certificate
    // is the one its handshake agreed on, so this request went over it, not a new one.
    for _ in 0..3 {
        let (status, version, served) = get(&held, &url);
        assert_eq!((status, version), (200, reqwest::Version::HTTP_2));
        assert_eq!(
            served, old.der,
            "the request went over the established connection"
        );
    }
    assert!(
        edge.log().contains("certificates reloaded"),
        "{}",
        edge.log()
    );
}

#[test]
fn a_certificate_that_cannot_be_loaded_keeps_the_old_one_serving_and_the_log_says_why() {
    let good = TestCert::new(&["example.com"], 2031);
    let other = TestCert::new(&["example.com"], 2033);
    // --watch: the files are looked at without a SIGHUP.
    let (_origin, edge) = start("cert-broken", &good, "", "", &["--watch"]);
    let listener_label = format!("listener {}", edge.addr);
    let label = [("cert", listener_label.as_str())];
    let url = format!("https://example.com:{}/", edge.addr.port());
    let dir = edge.config.parent().unwrap().to_path_buf();

    // A key that is not the certificate's: loaded files, no servable pair.
    replace(&dir.join("listener.key"), &other.key_pem);
    wait_for_metric(
        &edge,
        "signpost_tls_certificate_load_failures_total",
        &label,
        1.0,
    );
    let log = edge.log();
    let line = log
        .lines()
        .find(|l| l.contains("certificate not loaded, the previous one keeps serving"))
        .unwrap_or_else(|| panic!("no failure logged:\n{log}"));
    assert!(
        line.contains("key=") && line.contains("listener.key"),
        "{line}"
    );
    assert!(
        line.contains("cannot serve the certificate") && line.contains("KeyMismatch"),
        "the reason is logged: {line}"
    );
    let client = https_client(edge.addr, &[&good, &other], &["example.com"]);
    let (status, _, served) = get(&client, &url);
    assert_eq!(status, 200);
    assert_eq!(served, good.der, "the old certificate still serves");
    wait_for_metric(&edge, NOT_AFTER, &label, good.not_after as f64);

    // A certificate file that is not PEM at all, then SIGHUP: the policy itself is refused (its
    // check reads the file), the certificates are read again, and the old one still serves.
    replace(&dir.join("listener.pem"), "not a certificate\n");
    edge.signal("HUP");
    wait_for_metric(
        &edge,
        "signpost_policy_reloads_total",
        &[("outcome", "rejected")],
        1.0,
    );
    let log = edge.log();
    assert!(log.contains("holds no PEM"), "{log}");
    let fresh = https_client(edge.addr, &[&good, &other], &["example.com"]);
    assert_eq!(get(&fresh, &url).2, good.der);

    // Mended: the pair loads again and serves.
    other.write(&dir, "listener");
    edge.signal("HUP");
    wait_for_metric(&edge, NOT_AFTER, &label, other.not_after as f64);
    let fresh = https_client(edge.addr, &[&good, &other], &["example.com"]);
    assert_eq!(get(&fresh, &url).2, other.der);
}

#[test]
fn sni_picks_the_zone_certificate_and_the_listener_one_serves_the_rest() {
    let default = TestCert::new(&["example.com", "plain.test"], 2031);
    let shop = TestCert::new(&["shop.test", "a.shop.test"], 2034);
    let files = Scratch::new("cert-sni-files");
    let (shop_cert, shop_key) = shop.write(&files.0, "shop");
    let zones = format!(
        r#"
[[zone]]
name = "shop"
hosts = ["shop.test", "*.shop.test"]
origin = "127.0.0.1:9"
[zone.tls]
cert = "{}"
key = "{}"

[[zone]]
name = "plain"
hosts = ["plain.test"]
origin = "127.0.0.1:9"
"#,
        shop_cert.display(),
        shop_key.display()
    );
    let (_origin, edge) = start("cert-sni", &default, "", &zones, &[]);
    let names = ["example.com", "shop.test", "a.shop.test", "plain.test"];
    let client = https_client(edge.addr, &[&default, &shop], &names);
    let port = edge.addr.port();
    let served = |host: &str| {
        get(
            &client,
            &format!("https://{host}:{port}/cdn-cgi/error/1015"),
        )
        .2
    };
    assert_eq!(served("shop.test"), shop.der);
    assert_eq!(
        served("a.shop.test"),
        shop.der,
        "a wildcard host of the zone"
    );
    assert_eq!(served("plain.test"), default.der, "a zone without its own");
    assert_eq!(served("example.com"), default.der);
    let (_, text) = admin_get(&edge, "/metrics");
    assert_eq!(
        metric(&text, NOT_AFTER, &[("cert", "zone shop")]),
        Some(shop.not_after as f64)
    );
    let listener_label = format!("listener {}", edge.addr);
    assert_eq!(
        metric(&text, NOT_AFTER, &[("cert", listener_label.as_str())]),
        Some(default.not_after as f64)
    );
}

#[test]
fn plain_http_is_redirected_but_acme_challenges_and_https_answers_carry_hsts() {
    let cert = TestCert::new(&["example.com"], 2031);
    let plain: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let top = format!("listen = [\"{plain}\"]");
    // https_port is filled in once the TLS listener's port is known: the edge's own port.
    let tls_port = free_port();
    let origin = EchoOrigin::start();
    let scratch = Scratch::new("https-redirect");
    let (cert_path, key_path) = cert.write(&scratch.0, "listener");
    let addr: SocketAddr = format!("127.0.0.1:{tls_port}").parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let text = format!(
        r#"admin = "{admin}"
{top}

[[listener]]
addr = "{addr}"
tls = {{ cert = "{}", key = "{}" }}

[[zone]]
name = "test"
hosts = ["example.com"]
origin = "{}"
[zone.tls]
redirect_https = true
https_port = {tls_port}
[zone.tls.hsts]
max_age = "365d"
include_subdomains = true
preload = true
"#,
        cert_path.display(),
        key_path.display(),
        origin.addr
    );
    let config = scratch.write("policy.toml", &text);
    let edge = Edge::start_with_file(scratch, config, addr, admin, &[]);
    // Both listeners start together; the plain one is waited for too.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(plain).is_err() {
        assert!(Instant::now() < deadline, "{}", edge.log());
        thread::sleep(Duration::from_millis(20));
    }
    let http = reqwest::blocking::Client::builder()
        .resolve("example.com", plain)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let base = format!("http://example.com:{}", plain.port());

    let get = http.get(format!("{base}/a/b?c=1")).send().unwrap();
    assert_eq!(get.status().as_u16(), 301);
    assert_eq!(
        get.headers()["location"],
        format!("https://example.com:{tls_port}/a/b?c=1").as_str()
    );
    assert!(get.headers().get("strict-transport-security").is_none());
    let post = http
        .post(format!("{base}/form"))
        .body("x=1")
        .send()
        .unwrap();
    assert_eq!(post.status().as_u16(), 308, "the method and body are kept");
    assert_eq!(
        post.headers()["location"],
        format!("https://example.com:{tls_port}/form").as_str()
    );
    // ACME's HTTP-01 path reaches the origin over plain HTTP, without HSTS.
    let acme = http
        .get(format!("{base}/.well-known/acme-challenge/token"))
        .send()
        .unwrap();
    assert_eq!(acme.status().as_u16(), 200);
    assert!(acme.headers().get("strict-transport-security").is_none());
    let echo: serde_json::Value = acme.json().unwrap();
    assert_eq!(echo["path"], "/.well-known/acme-challenge/token");

    // Over HTTPS: proxied, with the zone's HSTS, on the origin's answers and the edge's own.
    let https = https_client(edge.addr, &[&cert], &["example.com"]);
    let want = "max-age=31536000; includeSubDomains; preload";
    let proxied = https
        .get(format!("https://example.com:{tls_port}/a"))
        .send()
        .unwrap();
    assert_eq!(proxied.status().as_u16(), 200);
    assert_eq!(proxied.headers()["strict-transport-security"], want);
    let refused = https
        .request(
            reqwest::Method::TRACE,
            format!("https://example.com:{tls_port}/a"),
        )
        .send()
        .unwrap();
    assert_eq!(refused.status().as_u16(), 405);
    assert_eq!(refused.headers()["strict-transport-security"], want);
}
