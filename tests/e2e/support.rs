//! Shared helpers: start the real `signpost` binary, real origins on loopback, real clients.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// A port nobody listens on right now, and that no other test of this process was given.
///
/// Taken from outside the kernel's ephemeral range: the port is only bound later (by the edge
/// the test starts), and in between the kernel could give the same port to a listener bound to
/// port 0 (every test origin is) or to an outgoing connection, so that one test's clients would
/// talk to another test's server (seen once as an origin receiving another test's 6,000
/// requests). Ports are handed out in order from an offset of the process id, so that test
/// processes running side by side start far apart, and each is checked free by binding it.
pub fn free_port() -> u16 {
    static NEXT: std::sync::Mutex<Option<u32>> = std::sync::Mutex::new(None);
    let (low, high) = outside_ephemeral_range();
    let span = high - low;
    let mut next = NEXT.lock().unwrap_or_else(|e| e.into_inner());
    let mut offset = next.unwrap_or(std::process::id().wrapping_mul(97) % span);
    for _ in 0..span {
        let port = u16::try_from(low + offset % span).expect("a port");
        offset = (offset + 1) % span;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            *next = Some(offset);
            return port;
        }
    }
    panic!("no free port in {low}..{high}");
}

/// The ports this machine's kernel never picks on its own: below its ephemeral range (from
/// `/proc/sys/net/ipv4/ip_local_port_range`; Linux's default is 32768-60999), or above it.
fn outside_ephemeral_range() -> (u32, u32) {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok();
    let (first, last) = range
        .as_deref()
        .and_then(|r| {
            let mut it = r.split_whitespace().map(|n| n.parse::<u32>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999));
    if first >= 12_000 {
        (10_000, first)
    } else if last <= 63_000 {
        (last + 1, 65_536)
    } else {
        // The whole range is ephemeral: the check by binding is all there is.
        (10_000, 65_536)
    }
}

/// A scratch directory removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "signpost-e2e-{}-{}-{}",
            std::process::id(),
            name,
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `signpost run`, killed when dropped. Its output goes to a log file that failing
/// tests print.
pub struct Edge {
    child: Child,
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub config: PathBuf,
    log: PathBuf,
    pub command: String,
    _scratch: Scratch,
}

/// The policy text for a single catch-all zone pointing at `origin`; `extra` is appended inside
/// the zone table (timeouts) and `top` before it.
pub fn policy(
    listen: SocketAddr,
    admin: SocketAddr,
    origin: &str,
    top: &str,
    zone_extra: &str,
) -> String {
    format!(
        r#"listen = ["{listen}"]
admin = "{admin}"
{top}

[[zone]]
name = "test"
hosts = ["example.com", "*.example.com", "localhost"]
origin = "{origin}"
{zone_extra}
"#
    )
}

impl Edge {
    /// Starts the binary with the policy built by `make_policy(listen, admin)`, waits until its
    /// listener accepts connections.
    pub fn start(
        name: &str,
        make_policy: impl FnOnce(SocketAddr, SocketAddr) -> String,
        args: &[&str],
    ) -> Edge {
        let scratch = Scratch::new(name);
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let config = scratch.write("policy.toml", &make_policy(addr, admin));
        Edge::start_with_file(scratch, config, addr, admin, args)
    }

    pub fn start_with_file(
        scratch: Scratch,
        config: PathBuf,
        addr: SocketAddr,
        admin: SocketAddr,
        args: &[&str],
    ) -> Edge {
        let log = scratch.0.join("signpost.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let bin = env!("CARGO_BIN_EXE_signpost");
        let mut cmd = Command::new(bin);
        cmd.arg("run").arg("--config").arg(&config).args(args);
        if !args.contains(&"--grace-period") {
            cmd.arg("--grace-period").arg("1");
        }
        cmd.stdout(Stdio::from(log_file.try_clone().unwrap()))
            .stderr(Stdio::from(log_file));
        let command = format!("{bin} run --config {} {}", config.display(), args.join(" "));
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {command}: {e}"));
        let mut edge = Edge {
            child,
            addr,
            admin,
            config,
            log,
            command,
            _scratch: scratch,
        };
        edge.wait_listening();
        edge
    }

    fn wait_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "{} exited early with {status}\n--- log ---\n{}",
                    self.command,
                    self.log()
                );
            }
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(100)).is_ok() {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "{} did not listen on {} in time\n--- log ---\n{}",
            self.command,
            self.addr,
            self.log()
        );
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://example.com:{}{path}", self.addr.port())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{sig} failed");
    }

    /// Waits for the process to exit on its own.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("--- {} ---\n{}", self.command, self.log());
        }
    }
}

/// The usual setup: an echo origin, and an edge in front of it whose policy is
/// [`policy`]`(.., top, zone_extra)`, started with `args`.
pub fn echo_edge(name: &str, top: &str, zone_extra: &str, args: &[&str]) -> (EchoOrigin, Edge) {
    let origin = EchoOrigin::start();
    let o = origin.addr.to_string();
    let edge = Edge::start(name, |l, a| policy(l, a, &o, top, zone_extra), args);
    (origin, edge)
}

/// A blocking HTTP client that sends every request for `example.com` (and its subdomains used
/// by tests) to the edge under test.
pub fn client(edge: &Edge) -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .resolve("example.com", edge.addr)
        .resolve("www.example.com", edge.addr)
        .resolve("docs.example.com", edge.addr)
        .resolve("blog.example.com", edge.addr)
        .resolve("unknown.test", edge.addr)
        .resolve("plain.test", edge.addr)
        .timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A request's header lines as an origin received them, in order, names in lower case.
pub fn header_lines(request: &tiny_http::Request) -> Vec<(String, String)> {
    request
        .headers()
        .iter()
        .map(|h| {
            (
                h.field.as_str().as_str().to_ascii_lowercase(),
                h.value.as_str().to_string(),
            )
        })
        .collect()
}

/// An origin on loopback that answers every request with a JSON echo of what it received:
/// `{"method", "path", "headers": {name: value}, "lines": [[name, value]], "body"}` (`lines`
/// every header line in order), status from `?status=NNN`, after `?delay_ms=N`. Each request is
/// answered on its own thread, so slow ones do not queue others.
pub struct EchoOrigin {
    pub addr: SocketAddr,
    /// Requests the origin has received, so tests can assert that a refused one never arrived.
    received: Arc<AtomicUsize>,
    server: Arc<tiny_http::Server>,
    thread: Option<thread::JoinHandle<()>>,
}

impl EchoOrigin {
    pub fn start() -> EchoOrigin {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let addr = server.server_addr().to_ip().unwrap();
        let worker = server.clone();
        let received = Arc::new(AtomicUsize::new(0));
        let counter = received.clone();
        let thread = thread::spawn(move || {
            for mut request in worker.incoming_requests() {
                counter.fetch_add(1, Ordering::SeqCst);
                thread::spawn(move || {
                    let mut body = String::new();
                    let _ = request.as_reader().read_to_string(&mut body);
                    let lines = header_lines(&request);
                    // One value per name (the last line's); `lines` has them all, in order.
                    let headers: serde_json::Map<String, serde_json::Value> = lines
                        .iter()
                        .map(|(name, value)| (name.clone(), value.as_str().into()))
                        .collect();
                    let url = request.url().to_string();
                    if let Some(ms) = url
                        .split("delay_ms=")
                        .nth(1)
                        .and_then(|s| s.split('&').next())
                        .and_then(|s| s.parse().ok())
                    {
                        thread::sleep(Duration::from_millis(ms));
                    }
                    let status = url
                        .split("status=")
                        .nth(1)
                        .and_then(|s| s.get(..3))
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(200u16);
                    let echo = serde_json::json!({
                        "method": request.method().as_str(),
                        "path": url,
                        "headers": headers,
                        "lines": lines,
                        "body": body,
                    });
                    let response = tiny_http::Response::from_string(echo.to_string())
                        .with_status_code(status)
                        .with_header(
                            "content-type: application/json"
                                .parse::<tiny_http::Header>()
                                .unwrap(),
                        )
                        .with_header("x-origin: echo".parse::<tiny_http::Header>().unwrap());
                    let _ = request.respond(response);
                });
            }
        });
        EchoOrigin {
            addr,
            received,
            server,
            thread: Some(thread),
        }
    }

    /// How many requests reached the origin so far.
    pub fn received(&self) -> usize {
        self.received.load(Ordering::SeqCst)
    }
}

impl Drop for EchoOrigin {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An origin that accepts connections and then misbehaves in a chosen way, for the 52x tests.
pub struct BadOrigin {
    pub addr: SocketAddr,
}

#[derive(Clone, Copy)]
pub enum Misbehaviour {
    /// Reads the request and never answers (524).
    NeverAnswers,
    /// Closes the connection as soon as it is accepted (520).
    ClosesAtOnce,
    /// Answers with bytes that are not HTTP (520).
    Garbage,
}

impl BadOrigin {
    pub fn start(how: Misbehaviour) -> BadOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                match how {
                    Misbehaviour::NeverAnswers => held.push(stream),
                    Misbehaviour::ClosesAtOnce => drop(stream),
                    Misbehaviour::Garbage => {
                        let mut buf = [0u8; 4096];
                        let _ = stream.read(&mut buf);
                        let _ = stream.write_all(b"\x00\x01 this is not http\r\n\r\n");
                    }
                }
            }
        });
        BadOrigin { addr }
    }
}

/// One HTTP/1.1 response read off a raw connection, parsed with httparse.
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `request` bytes on `stream` and reads exactly one response (Content-Length framed; a
/// response to HEAD has no body whatever its Content-Length says).
pub fn raw_exchange(stream: &mut TcpStream, request: &[u8]) -> RawResponse {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    read_response(stream, &mut Vec::new(), request.starts_with(b"HEAD "))
}

/// Reads `n` Content-Length framed responses off one connection, in order (several may arrive
/// in one read), and checks that nothing follows the last.
pub fn read_responses(stream: &mut TcpStream, n: usize) -> Vec<RawResponse> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = Vec::new();
    let out = (0..n)
        .map(|_| read_response(stream, &mut buf, false))
        .collect();
    assert!(buf.is_empty(), "bytes after the last response");
    out
}

/// Reads one Content-Length framed response, starting with the bytes already in `buf` and
/// leaving there whatever arrived after it.
fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>, head: bool) -> RawResponse {
    let mut chunk = [0u8; 8192];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(head_len) =
            parsed.parse(buf).expect("a valid HTTP response")
        {
            let headers: Vec<(String, String)> = parsed
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_string(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect();
            let length: usize = headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .map(|(_, v)| v.parse().unwrap())
                .expect("a Content-Length");
            let length = if head { 0 } else { length };
            if buf.len() >= head_len + length {
                let response = RawResponse {
                    status: parsed.code.unwrap(),
                    headers,
                    body: buf[head_len..head_len + length].to_vec(),
                };
                buf.drain(..head_len + length);
                return response;
            }
        }
        let n = stream.read(&mut chunk).expect("reading a response");
        assert!(
            n > 0,
            "connection closed before a full response; got {:?}",
            String::from_utf8_lossy(buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Whether a test's outside requirement (`what`: a program, a package) is present. Where it is
/// not, the test says so loudly and skips, unless `SIGNPOST_NO_SKIP` is set (`.ci/run` sets it,
/// and installs every requirement), which makes the absence a failure.
pub fn required(present: bool, what: &str) -> bool {
    if !present {
        assert!(
            std::env::var_os("SIGNPOST_NO_SKIP").is_none(),
            "SIGNPOST_NO_SKIP is set but {what} is not installed"
        );
        eprintln!("skipped: {what} is not installed (SIGNPOST_NO_SKIP=1 makes this fail)");
    }
    present
}

/// Whether python3 with PyYAML, the YAML parser agents use, is installed ([`required`]).
pub fn pyyaml_required() -> bool {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import yaml"])
        .status();
    required(probe.is_ok_and(|s| s.success()), "python3 with PyYAML")
}

/// Runs `python3 -c script` with `input` on its standard input and reads its standard output as
/// JSON; `Err` with what it wrote to standard error when it fails.
pub fn python_json(script: &str, input: &str) -> Result<serde_json::Value, String> {
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// Splits a Markdown problem into its YAML frontmatter (parsed) and the prose after it.
pub fn frontmatter(markdown: &str) -> (serde_norway::Value, String) {
    let rest = markdown
        .strip_prefix("---\n")
        .unwrap_or_else(|| panic!("no frontmatter in {markdown:?}"));
    let (yaml, prose) = rest
        .split_once("\n---\n")
        .unwrap_or_else(|| panic!("unterminated frontmatter in {markdown:?}"));
    let value: serde_norway::Value = serde_norway::from_str(yaml)
        .unwrap_or_else(|e| panic!("frontmatter is not YAML ({e}): {yaml}"));
    (value, prose.to_string())
}

/// Country and ASN databases in MaxMind's formats, written with mmdb-writer into `dir`, placing
/// the addresses the tests use where MaxMind's public test databases place them: 81.2.69.142 in GB,
/// 89.160.20.112 in SE, 1.128.0.1 in AS1221. Returns the country and ASN database paths.
pub fn geo_databases(dir: &Path) -> (PathBuf, PathBuf) {
    use mmdb_writer::{Value, Writer};
    let net = |s: &str| s.parse::<ipnet::IpNet>().unwrap();
    let mut country = Writer::new("GeoIP2-Country");
    for (block, code) in [("81.2.69.0/24", "GB"), ("89.160.20.0/24", "SE")] {
        let record = Value::map([("country", Value::map([("iso_code", Value::from(code))]))]);
        country.insert_value(net(block), record).unwrap();
    }
    let mut asn = Writer::new("GeoLite2-ASN");
    asn.insert_value(
        net("1.128.0.0/16"),
        Value::map([("autonomous_system_number", Value::from(1221_u32))]),
    )
    .unwrap();
    let (country_path, asn_path) = (dir.join("country.mmdb"), dir.join("asn.mmdb"));
    std::fs::write(&country_path, country.to_bytes().unwrap()).unwrap();
    std::fs::write(&asn_path, asn.to_bytes().unwrap()).unwrap();
    (country_path, asn_path)
}

pub fn repo_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// A GET on the edge's admin listener: status and body.
pub fn admin_get(edge: &Edge, path: &str) -> (u16, String) {
    let response = reqwest::blocking::get(format!("http://{}{path}", edge.admin)).unwrap();
    (response.status().as_u16(), response.text().unwrap())
}

/// The value of one sample of `/metrics`, parsed as Prometheus text, whose labels include `labels`.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape =
        prometheus_parse::Scrape::parse(lines).expect("/metrics parses as Prometheus text");
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
        .reduce(|a, b| a + b)
}
