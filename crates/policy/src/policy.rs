//! `Policy`: the policy once every value has been checked, and the checks that build it.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_spanned::Spanned;

use crate::error::{Diagnostics, ProblemKind, did_you_mean};
use crate::file::PolicyFile;
use crate::host::HostPattern;
pub use crate::tls::TlsFiles;
use crate::tls::tls_files;
use crate::units::{duration, size, size_text};

/// The admin listener address when the policy names none.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:9901";
/// The listener when the policy names none.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
/// Default time to establish the origin connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time to wait for the origin's response (Cloudflare's 100 s).
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(100);
/// Default time to send the request to the origin.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Default idle keep-alive timeout between requests on one client connection (nginx's
/// `keepalive_timeout` is 75 s; Envoy's HTTP connection manager `idle_timeout` is 1 h).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default deadline for a whole request header, from its first byte (nginx's
/// `client_header_timeout` is 60 s but per read; Envoy's `request_headers_timeout` is off by
/// default and 10 s in its edge best practices).
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default deadline for body progress: no byte of the body for this long, or less than
/// `body_min_rate` on average after it, is a 408 (nginx's `client_body_timeout` is 60 s per read;
/// Envoy's `stream_idle_timeout` is 5 min).
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default minimum average body rate, in bytes per second, enforced once `body_timeout` has
/// passed: a body trickled slower than this is cut.
pub const DEFAULT_BODY_MIN_RATE: u64 = 1024;
/// Default cap on concurrent connections from one client address (IPv6 grouped by /64).
pub const DEFAULT_MAX_PER_CLIENT: u32 = 256;
/// Default deadline for a TLS handshake, from the connection's acceptance. A real client finishes
/// a TLS 1.3 handshake in two round trips, under 2 s even on a lossy mobile link at 500 ms RTT;
/// 10 s leaves five times that, while a connection that says nothing is held a sixth of
/// Pingora's fixed 60 s (nginx's `ssl_handshake_timeout` is 60 s; Envoy's
/// `transport_socket_connect_timeout` is off by default, 15 s in its edge guide).
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default deadline for a client to take response bytes: a response none of whose bytes the
/// client takes for this long is ended (nginx's `send_timeout` is 60 s between two writes;
/// Envoy's `stream_idle_timeout` is 5 min).
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(60);
/// Default cap on the requests one client address has in flight to origins, HTTP/1 connections
/// and HTTP/2 streams together: the same as `max_per_client`, so an HTTP/1 client keeps every
/// request it could have before, and an HTTP/2 client gets no more.
pub const DEFAULT_MAX_IN_FLIGHT_PER_CLIENT: u32 = 256;
/// Default number of requests one HTTP/2 connection may carry before the edge sends GOAWAY and
/// the client reconnects (nginx's `keepalive_requests`, 1,000; Envoy's
/// `max_requests_per_connection` is off).
pub const DEFAULT_H2_MAX_REQUESTS_PER_CONNECTION: u32 = 1000;
/// Default request body limit of a zone (Cloudflare's Free and Pro plans: 100 MB).
pub const DEFAULT_MAX_BODY_SIZE: u64 = 100 * 1000 * 1000;

/// Deadlines and limits on client connections, from `[connections]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connections {
    /// How long a keep-alive connection may sit idle between requests.
    pub idle_timeout: Duration,
    /// The deadline for a whole request header, from its first byte.
    pub header_timeout: Duration,
    /// The longest wait for any body byte, and the grace period of `body_min_rate`.
    pub body_timeout: Duration,
    /// The slowest average body rate accepted after `body_timeout`, in bytes per second.
    pub body_min_rate: u64,
    /// Concurrent connections one client address (IPv6: one /64) may hold, counted from
    /// acceptance, so that connections still in their TLS handshake count too.
    pub max_per_client: u32,
    /// The deadline for a TLS handshake, from the connection's acceptance.
    pub tls_handshake_timeout: Duration,
    /// The longest a response may wait for its client to take bytes.
    pub send_timeout: Duration,
    /// Requests one client address may have in flight to origins, over every protocol.
    pub max_in_flight_per_client: u32,
    /// Requests one HTTP/2 connection may carry before the edge asks the client to reconnect.
    pub h2_max_requests_per_connection: u32,
}

impl Default for Connections {
    fn default() -> Self {
        Connections {
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            body_min_rate: DEFAULT_BODY_MIN_RATE,
            max_per_client: DEFAULT_MAX_PER_CLIENT,
            tls_handshake_timeout: DEFAULT_TLS_HANDSHAKE_TIMEOUT,
            send_timeout: DEFAULT_SEND_TIMEOUT,
            max_in_flight_per_client: DEFAULT_MAX_IN_FLIGHT_PER_CLIENT,
            h2_max_requests_per_connection: DEFAULT_H2_MAX_REQUESTS_PER_CONNECTION,
        }
    }
}

/// A socket the edge accepts client connections on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// `ip:port`, IPv6 in brackets: `"0.0.0.0:8080"`, `"[::]:8443"`.
    pub addr: String,
    /// Certificate and key when the listener speaks TLS.
    pub tls: Option<TlsFiles>,
}

/// How error responses are branded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrandingConfig {
    /// Template for the problem `type` URI; `{code}` is replaced by the error code.
    pub type_uri_template: Option<String>,
    /// A line added to the bottom of every error page.
    pub footer: Option<String>,
}

impl BrandingConfig {
    /// The branding the problem renderers take: what the policy sets, the renderers' defaults
    /// for the rest.
    pub fn to_problem_branding(&self) -> signpost_problem::Branding {
        let mut branding = signpost_problem::Branding::default();
        if let Some(template) = &self.type_uri_template {
            branding.type_uri_template = Some(template.clone());
        }
        if let Some(footer) = &self.footer {
            branding.footer = footer.clone();
        }
        branding
    }
}

/// Where a zone's requests go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// Host name or IP address of the origin (IPv6 without brackets).
    pub host: String,
    /// The host's address when it is an IP literal: connecting needs no lookup.
    pub ip: Option<std::net::IpAddr>,
    /// Port (default 80, or 443 for `https://`).
    pub port: u16,
    /// Whether to speak TLS to the origin.
    pub tls: bool,
    /// The SNI name to send when `tls`: `origin_sni`, else the origin host.
    pub sni: String,
    /// Whether to verify the origin's certificate (`origin_verify_cert`, default true).
    pub verify_cert: bool,
}

/// Most `[[zone.divert]]` entries in one zone.
pub const MAX_DIVERTS: usize = 16;

/// One `[[zone.divert]]`: a name custom rules use, and the origin it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divert {
    /// The name a custom rule's `divert` gives; shared, so that metric labels cost no allocation.
    pub name: std::sync::Arc<str>,
    /// Where diverted requests go, with the zone's timeouts.
    pub origin: Origin,
}

/// Names one zone of a compiled policy: what a [`Decision`](crate::Decision) routes a request to.
/// [`CompiledPolicy::zone`](crate::CompiledPolicy::zone) gives the zone; [`index`](Self::index)
/// is its place in [`CompiledPolicy::zones`](crate::CompiledPolicy::zones), so that a user can
/// keep what it holds per zone (metrics, say) in a vector in the same order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ZoneId(pub(crate) usize);

impl ZoneId {
    /// The zone's place in [`CompiledPolicy::zones`](crate::CompiledPolicy::zones).
    pub fn index(self) -> usize {
        self.0
    }
}

/// A set of host names served by one origin, with its timeouts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    /// The zone's name, unique in the policy; shared, so that metric labels cost no allocation.
    pub name: std::sync::Arc<str>,
    /// Host patterns as written (lower-cased): `example.com`, `*.example.com`, `*`.
    pub hosts: Vec<String>,
    /// Where to forward.
    pub origin: Origin,
    /// Time to establish the origin connection.
    pub connect_timeout: Duration,
    /// Time to wait for the origin's response.
    pub read_timeout: Duration,
    /// Time to send the request to the origin.
    pub write_timeout: Duration,
    /// The largest request body accepted, in bytes (`max_body_size`); larger is 413.
    pub max_body_size: u64,
    /// Whether TRACE and TRACK are forwarded (`allow_trace`, default false: 405).
    pub allow_trace: bool,
    /// The language of the edge's error pages for people (`language`); `None` (the default)
    /// follows each request's `Accept-Language`.
    pub language: Option<signpost_problem::Language>,
    /// `[zone.markdown]`: origin HTML converted to Markdown for agents.
    pub markdown: crate::markdown::MarkdownConfig,
    /// `[zone.origin_errors] structured`: an origin's 4xx or 5xx whose body is not structured
    /// is answered as a problem to a client that asked for JSON or Markdown (default false).
    pub origin_errors_structured: bool,
    /// `[zone.crawl]`: crawl control; `None` when the zone has none (every crawler allowed).
    pub crawl: Option<crate::crawl::CrawlConfig>,
    /// `[zone.robots]`: the managed robots.txt.
    pub robots: crate::robots::RobotsConfig,
    /// `[zone.tls]`: the zone's own certificate, the redirect to HTTPS and HSTS.
    pub tls: crate::tls::ZoneTls,
    /// `[[zone.divert]]`: the other origins custom rules may divert requests to (a tarpit, a
    /// maze), at most [`MAX_DIVERTS`] per zone.
    pub diverts: Vec<Divert>,
    /// `[zone.challenge]`: how the zone challenges (the defaults when it has none).
    pub challenge: crate::challenge::ChallengeConfig,
    pub(crate) patterns: Vec<(HostPattern, std::ops::Range<usize>)>,
}

/// The validated policy: every value checked, nothing compiled or loaded yet.
#[derive(Debug)]
pub(crate) struct Policy {
    pub listeners: Vec<Listener>,
    pub admin: Option<String>,
    pub admin_trace: bool,
    pub branding: BrandingConfig,
    pub connections: Connections,
    pub zones: Vec<Zone>,
}

/// Parses policy text into its raw form, reporting TOML and schema errors with their place.
pub(crate) fn parse(d: &mut Diagnostics<'_>) -> Option<PolicyFile> {
    match toml::from_str::<PolicyFile>(d.text()) {
        Ok(file) => Some(file),
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            let (kind, message, hint) = explain_toml_error(e.message());
            d.at_with_hint(kind, span, message, hint);
            None
        }
    }
}

/// Rewrites serde's messages into ours, adding a "did you mean" for unknown keys.
fn explain_toml_error(message: &str) -> (ProblemKind, String, Option<String>) {
    let message = message.trim();
    // serde: "unknown field `lisen`, expected one of `listen`, `listener`" (or "expected `x`").
    if let Some((name, tail)) = message
        .strip_prefix("unknown field `")
        .and_then(|rest| rest.split_once('`'))
    {
        {
            let expected: Vec<&str> = tail.split('`').skip(1).step_by(2).collect();
            let hint = match did_you_mean(name, expected.iter().copied()) {
                Some(best) => Some(format!("did you mean `{best}`?")),
                None if expected.is_empty() => None,
                None => Some(format!(
                    "expected one of {}",
                    expected
                        .iter()
                        .map(|e| format!("`{e}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            };
            return (
                ProblemKind::UnknownKey,
                format!("unknown key `{name}`"),
                hint,
            );
        }
    }
    let first_line = message.lines().next().unwrap_or(message);
    (ProblemKind::Syntax, first_line.to_owned(), None)
}

fn span<T>(s: &Spanned<T>) -> std::ops::Range<usize> {
    s.span()
}

/// Checks every value of the raw policy and collects all problems into `d`.
pub(crate) fn validate(file: &PolicyFile, d: &mut Diagnostics<'_>, base_dir: &Path) -> Policy {
    let listeners = validate_listeners(file, d, base_dir);

    let admin = match &file.admin {
        Some(a) => {
            let v = a.get_ref().trim();
            if v.is_empty() || v == "off" {
                // "off" disables the admin listener.
                None
            } else {
                match v.parse::<SocketAddr>() {
                    Ok(sa) => Some(sa.to_string()),
                    Err(_) => {
                        d.at(
                            ProblemKind::Invalid,
                            span(a),
                            format!("`{v}` is not an `ip:port` address (or \"off\")"),
                        );
                        None
                    }
                }
            }
        }
        None => Some(DEFAULT_ADMIN.to_owned()),
    };

    let mut branding = BrandingConfig::default();
    if let Some(errors) = &file.errors {
        branding.footer = errors.footer.clone();
        if let Some(t) = &errors.type_uri_template {
            let v = t.get_ref();
            if !(v.starts_with("https://") || v.starts_with("http://")) {
                d.at(
                    ProblemKind::Invalid,
                    span(t),
                    "`type_uri_template` must be an http(s) URI",
                );
            }
            branding.type_uri_template = Some(v.clone());
        }
    }

    let connections = validate_connections(file, d);
    let zones = validate_zones(file, d, base_dir);

    Policy {
        listeners,
        admin,
        admin_trace: file.admin_trace.unwrap_or(false),
        branding,
        connections,
        zones,
    }
}

fn validate_listeners(
    file: &PolicyFile,
    d: &mut Diagnostics<'_>,
    base_dir: &Path,
) -> Vec<Listener> {
    let mut out: Vec<Listener> = Vec::new();
    let check_addr = |d: &mut Diagnostics<'_>, a: &Spanned<String>| -> Option<String> {
        match a.get_ref().trim().parse::<SocketAddr>() {
            Ok(sa) => Some(sa.to_string()),
            Err(_) => {
                d.at(
                    ProblemKind::Invalid,
                    span(a),
                    format!(
                        "`{}` is not an `ip:port` address (IPv6 in brackets: \"[::]:8443\")",
                        a.get_ref()
                    ),
                );
                None
            }
        }
    };
    if let Some(listen) = &file.listen {
        for a in listen.get_ref() {
            if let Some(addr) = check_addr(d, a) {
                out.push(Listener { addr, tls: None });
            }
        }
    }
    for l in &file.listener {
        let l = l.get_ref();
        if let Some(addr) = check_addr(d, &l.addr) {
            let tls = l.tls.as_ref().map(|t| {
                let t = t.get_ref();
                tls_files(d, &t.cert, &t.key, base_dir)
            });
            out.push(Listener { addr, tls });
        }
    }
    if file.listen.is_none() && file.listener.is_empty() {
        out.push(Listener {
            addr: DEFAULT_LISTEN.to_owned(),
            tls: None,
        });
    }
    // Two listeners on one socket would fail at bind time; say so here, with a place.
    let mut seen = std::collections::HashSet::new();
    for l in &out {
        if !seen.insert(l.addr.clone()) {
            let at = file
                .listen
                .as_ref()
                .map(span)
                .or_else(|| file.listener.first().map(span))
                .unwrap_or(0..0);
            d.at(
                ProblemKind::Invalid,
                at,
                format!("address `{}` is listed twice", l.addr),
            );
        }
    }
    out
}

fn validate_zones(file: &PolicyFile, d: &mut Diagnostics<'_>, base_dir: &Path) -> Vec<Zone> {
    let mut zones = Vec::new();
    let mut names = std::collections::HashSet::new();
    for z in &file.zone {
        let z = z.get_ref();
        let name = z.name.get_ref().trim().to_owned();
        if name.is_empty() {
            d.at(ProblemKind::Invalid, span(&z.name), "a zone needs a name");
        } else if !names.insert(name.clone()) {
            d.at(
                ProblemKind::Invalid,
                span(&z.name),
                format!("zone name `{name}` is used twice"),
            );
        }
        let mut hosts = Vec::new();
        let mut patterns = Vec::new();
        if z.hosts.get_ref().is_empty() {
            d.at(
                ProblemKind::Invalid,
                span(&z.hosts),
                "a zone needs at least one host (\"*\" serves every name)",
            );
        }
        for h in z.hosts.get_ref() {
            match HostPattern::parse(h.get_ref()) {
                Ok(p) => {
                    hosts.push(h.get_ref().trim().to_ascii_lowercase());
                    patterns.push((p, span(h)));
                }
                Err(why) => d.at(
                    ProblemKind::Invalid,
                    span(h),
                    format!("invalid host `{}`: {why}", h.get_ref()),
                ),
            }
        }
        let origin = match parse_origin(z.origin.get_ref()) {
            Ok(mut o) => {
                if let Some(sni) = &z.origin_sni {
                    o.sni = sni.get_ref().clone();
                }
                if let Some(v) = z.origin_verify_cert {
                    o.verify_cert = v;
                }
                Some(o)
            }
            Err(why) => {
                d.at(ProblemKind::Invalid, span(&z.origin), why);
                None
            }
        };
        let connect_timeout = duration(d, z.connect_timeout.as_ref(), DEFAULT_CONNECT_TIMEOUT);
        let read_timeout = duration(d, z.read_timeout.as_ref(), DEFAULT_READ_TIMEOUT);
        let write_timeout = duration(d, z.write_timeout.as_ref(), DEFAULT_WRITE_TIMEOUT);
        let max_body_size = z
            .max_body_size
            .as_ref()
            .map_or(DEFAULT_MAX_BODY_SIZE, |v| size(d, v, DEFAULT_MAX_BODY_SIZE));
        let language = z.language.as_ref().and_then(|l| {
            let found = signpost_problem::Language::from_tag(l.get_ref().trim());
            if found.is_none() {
                let shipped: Vec<&str> = signpost_problem::Language::ALL
                    .iter()
                    .map(|l| l.tag())
                    .collect();
                d.at(
                    ProblemKind::Invalid,
                    span(l),
                    format!(
                        "`{}` is not a language of the error pages; write one of \"{}\", or leave `language` out to follow each request's Accept-Language",
                        l.get_ref(),
                        shipped.join("\", \"")
                    ),
                );
            }
            found
        });
        let markdown = crate::markdown::compile(d, z.markdown.as_ref());
        let crawl = crate::crawl::compile(d, z.crawl.as_ref());
        let robots = crate::robots::compile(d, z.robots.as_ref());
        let tls = crate::tls::compile(d, z.tls.as_ref(), base_dir);
        let diverts = validate_diverts(&z.divert, d);
        let crawl_free = crawl.as_ref().map_or(&[][..], |c| &c.free_paths[..]);
        let challenge = crate::challenge::compile(d, z.challenge.as_ref(), crawl_free);
        if let Some(origin) = origin {
            zones.push(Zone {
                name: name.into(),
                hosts,
                origin,
                connect_timeout,
                read_timeout,
                write_timeout,
                max_body_size,
                allow_trace: z.allow_trace.unwrap_or(false),
                language,
                markdown,
                origin_errors_structured: z
                    .origin_errors
                    .as_ref()
                    .and_then(|o| o.structured)
                    .unwrap_or(false),
                crawl,
                robots,
                tls,
                diverts,
                challenge,
                patterns,
            });
        }
    }
    zones
}

/// Checks a zone's `[[zone.divert]]` entries: unique names, origins as a zone's `origin` is
/// written, at most [`MAX_DIVERTS`].
fn validate_diverts(
    entries: &[Spanned<crate::file::DivertFile>],
    d: &mut Diagnostics<'_>,
) -> Vec<Divert> {
    let mut diverts: Vec<Divert> = Vec::new();
    if let Some(extra) = entries.get(MAX_DIVERTS) {
        d.at(
            ProblemKind::Invalid,
            span(extra),
            format!("a zone declares at most {MAX_DIVERTS} diverts"),
        );
    }
    for entry in entries.iter().take(MAX_DIVERTS) {
        let v = entry.get_ref();
        let name = v.name.get_ref().trim();
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            d.at_with_hint(
                ProblemKind::Invalid,
                span(&v.name),
                format!("`{name}` is not a divert name"),
                Some(
                    "a divert name is 1 to 64 letters, digits, `-`, `_` or `.`, e.g. \"maze\""
                        .into(),
                ),
            );
            continue;
        }
        if diverts.iter().any(|d| &*d.name == name) {
            d.at(
                ProblemKind::Invalid,
                span(&v.name),
                format!("divert `{name}` is declared twice in this zone"),
            );
            continue;
        }
        match parse_origin(v.origin.get_ref()) {
            Ok(mut origin) => {
                if let Some(sni) = &v.origin_sni {
                    origin.sni = sni.get_ref().clone();
                }
                if let Some(verify) = v.origin_verify_cert {
                    origin.verify_cert = verify;
                }
                diverts.push(Divert {
                    name: name.into(),
                    origin,
                });
            }
            Err(why) => d.at(ProblemKind::Invalid, span(&v.origin), why),
        }
    }
    diverts
}

fn validate_connections(file: &PolicyFile, d: &mut Diagnostics<'_>) -> Connections {
    let defaults = Connections::default();
    let Some(c) = &file.connections else {
        return defaults;
    };
    let mut count = |name: &str, value: Option<&Spanned<i64>>, default: u32| match value {
        None => default,
        Some(v) => match u32::try_from(*v.get_ref()) {
            Ok(n) if n > 0 => n,
            _ => {
                d.at(
                    ProblemKind::Invalid,
                    span(v),
                    format!("`{name}` must be a whole number from 1 to 4294967295"),
                );
                default
            }
        },
    };
    let max_per_client = count(
        "max_per_client",
        c.max_per_client.as_ref(),
        defaults.max_per_client,
    );
    let max_in_flight_per_client = count(
        "max_in_flight_per_client",
        c.max_in_flight_per_client.as_ref(),
        defaults.max_in_flight_per_client,
    );
    let h2_max_requests_per_connection = count(
        "h2_max_requests_per_connection",
        c.h2_max_requests_per_connection.as_ref(),
        defaults.h2_max_requests_per_connection,
    );
    let body_min_rate = match &c.body_min_rate {
        None => defaults.body_min_rate,
        Some(v) => {
            let text = v.get_ref().trim();
            match text.strip_suffix("/s") {
                Some(amount) => size_text(amount).unwrap_or_else(|why| {
                    d.at(ProblemKind::Invalid, span(v), why);
                    defaults.body_min_rate
                }),
                None => {
                    d.at(
                        ProblemKind::Invalid,
                        span(v),
                        format!("`{text}` is not a rate; write e.g. \"1KiB/s\""),
                    );
                    defaults.body_min_rate
                }
            }
        }
    };
    Connections {
        idle_timeout: duration(d, c.idle_timeout.as_ref(), defaults.idle_timeout),
        header_timeout: duration(d, c.header_timeout.as_ref(), defaults.header_timeout),
        body_timeout: duration(d, c.body_timeout.as_ref(), defaults.body_timeout),
        body_min_rate,
        max_per_client,
        tls_handshake_timeout: duration(
            d,
            c.tls_handshake_timeout.as_ref(),
            defaults.tls_handshake_timeout,
        ),
        send_timeout: duration(d, c.send_timeout.as_ref(), defaults.send_timeout),
        max_in_flight_per_client,
        h2_max_requests_per_connection,
    }
}

impl std::fmt::Display for Origin {
    /// `http://host:port` or `https://host:port`, as the policy can write it back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        if self.host.contains(':') {
            write!(f, "{scheme}://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{scheme}://{}:{}", self.host, self.port)
        }
    }
}

impl std::str::FromStr for Origin {
    type Err = String;

    /// Parses an origin as the policy writes it (see [`parse_origin`]); the edge's `--origin`
    /// uses the same parser.
    fn from_str(s: &str) -> Result<Origin, String> {
        parse_origin(s)
    }
}

/// Parses `host:port`, `http://host[:port]` or `https://host[:port]`.
pub(crate) fn parse_origin(s: &str) -> Result<Origin, String> {
    let s = s.trim();
    let (tls, rest) = if let Some(r) = s.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = s.strip_prefix("http://") {
        (false, r)
    } else if s.contains("://") {
        return Err(format!(
            "origin `{s}` has an unsupported scheme; use http:// or https://"
        ));
    } else {
        (false, s)
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') || rest.contains('?') {
        return Err(format!("origin `{s}` must not have a path"));
    }
    let default_port = if tls { 443 } else { 80 };
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (inner, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("origin `{s}` has an unclosed `[`"))?;
        inner
            .parse::<std::net::Ipv6Addr>()
            .map_err(|_| format!("origin `{s}`: `{inner}` is not an IPv6 address"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => parse_port(p, s)?,
            None if after.is_empty() => default_port,
            None => return Err(format!("origin `{s}` has junk after `]`")),
        };
        (inner.to_owned(), port)
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), parse_port(p, s)?),
            None => (rest.to_owned(), default_port),
        }
    };
    if host.is_empty() {
        return Err(format!("origin `{s}` has no host"));
    }
    let ip = host.parse::<std::net::IpAddr>().ok();
    if ip.is_none() {
        HostPattern::parse(&host)
            .ok()
            .filter(|p| matches!(p, HostPattern::Exact(_)))
            .ok_or_else(|| format!("origin `{s}`: `{host}` is not a host name or IP address"))?;
    }
    Ok(Origin {
        sni: host.clone(),
        host,
        ip,
        port,
        tls,
        verify_cert: true,
    })
}

fn parse_port(p: &str, whole: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(port) if port != 0 => Ok(port),
        _ => Err(format!("origin `{whole}`: `{p}` is not a port (1-65535)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        let o = parse_origin("127.0.0.1:8000").unwrap();
        assert_eq!((o.host.as_str(), o.port, o.tls), ("127.0.0.1", 8000, false));
        let o = parse_origin("https://origin.example.com").unwrap();
        assert_eq!(
            (o.host.as_str(), o.port, o.tls),
            ("origin.example.com", 443, true)
        );
        assert_eq!(o.sni, "origin.example.com");
        let o = parse_origin("http://[::1]:9000").unwrap();
        assert_eq!((o.host.as_str(), o.port), ("::1", 9000));
        assert!(parse_origin("ftp://x").is_err());
        assert!(parse_origin("x:0").is_err());
        assert!(parse_origin("x:99999").is_err());
        assert!(parse_origin("http://x/path").is_err());
        assert!(parse_origin("").is_err());
    }

    #[test]
    fn unknown_field_message_gets_a_hint() {
        let (kind, msg, hint) = explain_toml_error(
            "unknown field `lisen`, expected one of `listen`, `listener`, `admin`",
        );
        assert_eq!(kind, ProblemKind::UnknownKey);
        assert_eq!(msg, "unknown key `lisen`");
        assert_eq!(hint.as_deref(), Some("did you mean `listen`?"));
    }
}
