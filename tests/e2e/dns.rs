//! A real DNS server for tests: Debian's `dnsmasq` on a loopback port, answering only the
//! records a test gives it (no upstream servers, no hosts file).
//!
//! Self-contained on purpose: the edge crate's unit tests of reverse DNS include this file too
//! (`#[path]`), where the e2e `support` module does not exist.

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One record the server answers.
#[derive(Clone, Debug)]
pub enum DnsRecord {
    /// A PTR record: the reverse name of `ip` points to `name`, and nothing else.
    Ptr { ip: IpAddr, name: String },
    /// An A or AAAA record of `name` (no PTR comes with it).
    Address { name: String, ip: IpAddr },
}

/// A running `dnsmasq`, killed when dropped.
pub struct Dnsmasq {
    child: Child,
    pub addr: SocketAddr,
}

impl Dnsmasq {
    /// What the server logged so far (`--log-queries` writes every query to stderr); only
    /// complete once the server is stopped, so this stops it.
    pub fn stop_and_log(mut self) -> String {
        let _ = self.child.kill();
        let mut log = String::new();
        if let Some(mut stderr) = self.child.stderr.take() {
            use std::io::Read;
            let _ = stderr.read_to_string(&mut log);
        }
        log
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The program, where Debian's `dnsmasq-base` puts it (not always on a user's `PATH`).
fn program() -> Option<&'static str> {
    ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq", "/sbin/dnsmasq"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
}

/// Starts `dnsmasq` on 127.0.0.1 answering `records` with the given TTL, every other name
/// NXDOMAIN. `None` (said loudly) when `dnsmasq` is not installed, unless `SIGNPOST_NO_SKIP`
/// is set (`.ci/run` sets it and installs `dnsmasq-base`): then its absence fails the test, as
/// for the other outside programs the tests start.
pub fn start_dnsmasq(records: &[DnsRecord], ttl_secs: u32) -> Option<Dnsmasq> {
    let Some(program) = program() else {
        assert!(
            std::env::var_os("SIGNPOST_NO_SKIP").is_none(),
            "SIGNPOST_NO_SKIP is set but dnsmasq is not installed (apt-get install dnsmasq-base)"
        );
        eprintln!("skipped: dnsmasq is not installed (SIGNPOST_NO_SKIP=1 makes this fail)");
        return None;
    };
    // A free port can be taken by someone else between the check and dnsmasq's bind: try again
    // on another one when dnsmasq exits at start.
    for _ in 0..5 {
        let port = free_udp_and_tcp_port();
        let mut cmd = Command::new(program);
        cmd.args([
            "--no-daemon",
            "--conf-file=/dev/null",
            "--no-resolv",
            "--no-hosts",
            "--no-negcache",
            "--log-queries",
            "--log-facility=-",
            "--pid-file=",
            "--bind-interfaces",
            "--listen-address=127.0.0.1",
            // Names and reverse zones with no record here are answered NXDOMAIN, not REFUSED
            // for want of an upstream server.
            "--local=/#/",
        ])
        .arg(format!("--port={port}"))
        .arg(format!("--local-ttl={ttl_secs}"));
        // As root dnsmasq drops to `nobody`, which is fine; as another user it stays itself.
        for record in records {
            cmd.arg(match record {
                DnsRecord::Ptr { ip, name } => format!("--ptr-record={},{name}", reverse_name(*ip)),
                DnsRecord::Address { name, ip } => format!("--address=/{name}/{ip}"),
            });
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start dnsmasq");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().expect("dnsmasq status") {
                eprintln!("dnsmasq exited at start ({status}); trying another port");
                break;
            }
            // dnsmasq opens its TCP and UDP sockets together: a TCP connection means ready.
            if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return Some(Dnsmasq { child, addr });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("dnsmasq did not start on any of 5 ports");
}

/// A UDP socket and a TCP listener on one loopback port that never answer: a name server that
/// is there but silent (the resolver's queries time out). Keep both alive for the test.
pub fn silent_dns_server() -> (SocketAddr, UdpSocket, TcpListener) {
    for _ in 0..20 {
        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
        let addr = udp.local_addr().expect("udp addr");
        if let Ok(tcp) = TcpListener::bind(addr) {
            return (addr, udp, tcp);
        }
    }
    panic!("no port free for both UDP and TCP");
}

/// A port free for both UDP and TCP on 127.0.0.1 right now.
fn free_udp_and_tcp_port() -> u16 {
    let (addr, _udp, _tcp) = silent_dns_server();
    addr.port()
}

/// The reverse-lookup name of an address (`4.3.2.1.in-addr.arpa`, nibbles under `ip6.arpa`).
pub fn reverse_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            format!("{d}.{c}.{b}.{a}.in-addr.arpa")
        }
        IpAddr::V6(v6) => {
            let mut name = String::new();
            for byte in v6.octets().iter().rev() {
                name.push_str(&format!("{:x}.{:x}.", byte & 0xf, byte >> 4));
            }
            name + "ip6.arpa"
        }
    }
}
