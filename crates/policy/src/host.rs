//! Host routing: normalising the request's Host and finding the zone that serves it.

use std::collections::HashMap;
use std::net::IpAddr;

/// The host tables hash with foldhash, a fraction of SipHash's cost per lookup. Its weaker
/// flooding resistance does not matter here: the tables hold only the policy's own names and a
/// request can only look them up, never add to them, so no client can lengthen a probe chain.
type HostMap = HashMap<String, usize, foldhash::fast::RandomState>;

/// Longest host name we look up; DNS names are at most 253 characters.
const MAX_HOST: usize = 255;

/// What a Host header names once its port and trailing dot are gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostName<'a> {
    /// A DNS name, as received (case not yet folded).
    Name(&'a str),
    /// An IPv4 or bracketed IPv6 literal.
    Ip(IpAddr),
}

/// Strips a `:port` suffix, IPv6 brackets and a trailing dot. Never allocates.
pub(crate) fn parse_host(host: &str) -> HostName<'_> {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        // "[v6]" or "[v6]:port"
        let inner = rest.split(']').next().unwrap_or("");
        if let Ok(ip) = inner.parse::<IpAddr>() {
            return HostName::Ip(ip);
        }
        return HostName::Name(host);
    }
    // One pass over a short string: how many colons, and where the last one is (every request
    // comes through here).
    let (mut colons, mut last_colon) = (0usize, None);
    for (i, b) in host.bytes().enumerate() {
        if b == b':' {
            colons += 1;
            last_colon = Some(i);
        }
    }
    // A bare IPv6 literal has several colons; it is not valid in Host but is still direct IP access.
    if colons > 1 {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return HostName::Ip(ip);
        }
        return HostName::Name(host);
    }
    let name = match last_colon {
        Some(i) if host[i + 1..].bytes().all(|b| b.is_ascii_digit()) => &host[..i],
        _ => host,
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    // An IPv4 literal begins with a digit; names seldom do, and skip the parse.
    if name.as_bytes().first().is_some_and(u8::is_ascii_digit)
        && let Ok(ip) = name.parse::<std::net::Ipv4Addr>()
    {
        return HostName::Ip(IpAddr::V4(ip));
    }
    HostName::Name(name)
}

/// The part of `host` that `http.host` shows, given what [`parse_host`] made of it.
fn shown_host<'a>(host: &'a str, name: &HostName<'a>) -> &'a str {
    match name {
        HostName::Name(name) => name,
        HostName::Ip(IpAddr::V4(_)) => {
            let t = host.trim();
            let name = t.rsplit_once(':').map_or(t, |(name, _)| name);
            name.strip_suffix('.').unwrap_or(name)
        }
        HostName::Ip(IpAddr::V6(_)) => {
            let t = host.trim();
            match t.find(']') {
                Some(end) if t.starts_with('[') => &t[..=end],
                // A bare IPv6 literal (not valid in Host) cannot carry a port.
                _ => t,
            }
        }
    }
}

/// A request's Host taken apart once: what it names (for routing, 1001 and 1003) and the form
/// rules and the TLS Host/SNI check (1013) compare. Every phase reads this one, so the Host is
/// parsed once per request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ParsedHost<'a> {
    pub(crate) name: HostName<'a>,
    /// The Host as `http.host` shows it: without a `:port` or trailing dot, case as received.
    /// An IPv6 literal keeps its brackets (`[2001:db8::1]:443` → `[2001:db8::1]`).
    pub(crate) shown: &'a str,
}

impl<'a> ParsedHost<'a> {
    pub(crate) fn new(host: &'a str) -> ParsedHost<'a> {
        let name = parse_host(host);
        ParsedHost {
            name,
            shown: shown_host(host, &name),
        }
    }

    /// `http.host`: [`ParsedHost::shown`] in lower case.
    pub(crate) fn normalized(&self) -> std::borrow::Cow<'a, str> {
        lower_case(self.shown)
    }
}

/// The Host as `http.host` shows it and rules compare it: without a `:port` or a trailing dot (an IPv6
/// literal keeps its brackets), in lower case.
/// Host names are case-insensitive (RFC 9110 §4.2.3), so `BLOCKED.test` must meet the rules
/// written for `blocked.test`. Borrowed unless the client sent an upper-case letter.
pub fn normalize_host(host: &str) -> std::borrow::Cow<'_, str> {
    ParsedHost::new(host).normalized()
}

/// Borrowed unless `host` holds an upper-case letter or a non-ASCII character.
fn lower_case(host: &str) -> std::borrow::Cow<'_, str> {
    if host
        .bytes()
        .any(|b| b.is_ascii_uppercase() || !b.is_ascii())
    {
        // Full Unicode folding for the rare raw non-ASCII name, so `Ö` cannot dodge `ö` either.
        std::borrow::Cow::Owned(host.to_lowercase())
    } else {
        std::borrow::Cow::Borrowed(host)
    }
}

/// Maps host patterns to zone indexes: exact names, `*.suffix` wildcards and the catch-all `*`.
///
/// Precedence: an exact name wins over any wildcard, a longer wildcard suffix over a shorter one,
/// and `*` is the last resort. `*` matches names only, never IP literals, so that direct IP
/// access (1003) keeps working under a catch-all zone; list an address explicitly to serve it.
#[derive(Debug, Default, Clone)]
pub(crate) struct HostTable {
    exact: HostMap,
    /// Keyed by the suffix without the `*.`, e.g. `example.com` for `*.example.com`.
    wildcard: HostMap,
    catch_all: Option<usize>,
}

/// A host pattern as accepted in a zone's `hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HostPattern {
    Exact(String),
    Wildcard(String),
    CatchAll,
}

impl HostPattern {
    /// Checks and lower-cases one pattern; the error is the reason it is not valid.
    pub(crate) fn parse(pattern: &str) -> Result<HostPattern, String> {
        let p = pattern.trim().to_ascii_lowercase();
        if p == "*" {
            return Ok(HostPattern::CatchAll);
        }
        let (wild, name) = match p.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, p.as_str()),
        };
        let name = name.strip_suffix('.').unwrap_or(name);
        if let (false, HostName::Ip(ip)) = (wild, parse_host(name)) {
            return Ok(HostPattern::Exact(ip_key(ip)));
        }
        if name.is_empty() || name.len() > 253 {
            return Err("a host name must have 1 to 253 characters".into());
        }
        for label in name.split('.') {
            let ok = !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !label.starts_with('-')
                && !label.ends_with('-');
            if !ok {
                return Err(format!(
                    "`{label}` is not a valid host label (letters, digits, `-` and `_`, at most 63; `*` only as `*.name` or alone)"
                ));
            }
        }
        Ok(if wild {
            HostPattern::Wildcard(name.to_owned())
        } else {
            HostPattern::Exact(name.to_owned())
        })
    }
}

/// How an IP literal is written as a key in the exact table.
fn ip_key(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

impl HostTable {
    /// Adds a pattern; returns the zone that already claimed it, if any.
    pub(crate) fn insert(&mut self, pattern: &HostPattern, zone: usize) -> Option<usize> {
        match pattern {
            HostPattern::Exact(n) => insert_new(&mut self.exact, n, zone),
            HostPattern::Wildcard(n) => insert_new(&mut self.wildcard, n, zone),
            HostPattern::CatchAll => match self.catch_all {
                Some(prev) => Some(prev),
                None => {
                    self.catch_all = Some(zone);
                    None
                }
            },
        }
    }

    /// Finds the zone for a Host value (case-insensitive, port and trailing dot ignored).
    pub(crate) fn lookup(&self, host: &str) -> Option<usize> {
        self.lookup_name(parse_host(host))
    }

    /// [`HostTable::lookup`] for a Host already parsed.
    pub(crate) fn lookup_name(&self, name: HostName<'_>) -> Option<usize> {
        match name {
            HostName::Ip(ip) => {
                if self.exact.is_empty() {
                    return None;
                }
                let mut buf = [0u8; 64];
                let key = write_ip_key(ip, &mut buf)?;
                self.exact.get(key).copied()
            }
            HostName::Name(name) => {
                if name.is_empty() || name.len() > MAX_HOST {
                    return None;
                }
                let mut buf = [0u8; MAX_HOST];
                let lower = lowercase_into(name, &mut buf)?;
                if let Some(&z) = self.exact.get(lower) {
                    return Some(z);
                }
                if !self.wildcard.is_empty() {
                    // Try each parent suffix, longest first: a.b.example.com → b.example.com → ...
                    let mut rest = lower;
                    while let Some((_, parent)) = rest.split_once('.') {
                        if let Some(&z) = self.wildcard.get(parent) {
                            return Some(z);
                        }
                        rest = parent;
                    }
                }
                self.catch_all
            }
        }
    }
}

fn insert_new(map: &mut HostMap, key: &str, zone: usize) -> Option<usize> {
    match map.get(key) {
        Some(&prev) => Some(prev),
        None => {
            map.insert(key.to_owned(), zone);
            None
        }
    }
}

/// ASCII-lowercases into a stack buffer so lookups need no allocation.
fn lowercase_into<'b>(s: &str, buf: &'b mut [u8]) -> Option<&'b str> {
    let out = buf.get_mut(..s.len())?;
    out.copy_from_slice(s.as_bytes());
    out.make_ascii_lowercase();
    std::str::from_utf8(out).ok()
}

fn write_ip_key(ip: IpAddr, buf: &mut [u8; 64]) -> Option<&str> {
    use std::io::Write;
    let mut cursor = std::io::Cursor::new(&mut buf[..]);
    match ip {
        IpAddr::V4(v4) => write!(cursor, "{v4}").ok()?,
        IpAddr::V6(v6) => write!(cursor, "[{v6}]").ok()?,
    }
    let n = usize::try_from(cursor.position()).ok()?;
    std::str::from_utf8(&buf[..n]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(patterns: &[(&str, usize)]) -> HostTable {
        let mut t = HostTable::default();
        for (p, z) in patterns {
            assert_eq!(t.insert(&HostPattern::parse(p).unwrap(), *z), None);
        }
        t
    }

    #[test]
    fn host_without_port_forms() {
        let host_without_port = |host| ParsedHost::new(host).shown;
        assert_eq!(host_without_port("Example.com:8080"), "Example.com");
        assert_eq!(host_without_port("192.0.2.1:8080"), "192.0.2.1");
        assert_eq!(host_without_port("192.0.2.1"), "192.0.2.1");
        assert_eq!(host_without_port("192.0.2.1.:80"), "192.0.2.1");
        assert_eq!(host_without_port("[2001:db8::1]:443"), "[2001:db8::1]");
        assert_eq!(host_without_port("[2001:db8::1]"), "[2001:db8::1]");
        assert_eq!(host_without_port("2001:db8::1"), "2001:db8::1");
        assert_eq!(host_without_port("[junk"), "[junk");
    }

    #[test]
    fn parse_host_forms() {
        assert_eq!(
            parse_host("Example.com:8080"),
            HostName::Name("Example.com")
        );
        assert_eq!(parse_host("example.com."), HostName::Name("example.com"));
        assert_eq!(
            parse_host("1.2.3.4:80"),
            HostName::Ip("1.2.3.4".parse().unwrap())
        );
        assert_eq!(
            parse_host("[::1]:8443"),
            HostName::Ip("::1".parse().unwrap())
        );
        assert_eq!(parse_host("[::1]"), HostName::Ip("::1".parse().unwrap()));
        assert_eq!(parse_host("::1"), HostName::Ip("::1".parse().unwrap()));
        assert_eq!(parse_host("[junk"), HostName::Name("[junk"));
        assert_eq!(parse_host(""), HostName::Name(""));
    }

    #[test]
    fn precedence_exact_wildcard_catch_all() {
        let t = table(&[
            ("example.com", 0),
            ("*.example.com", 1),
            ("*.api.example.com", 2),
            ("*", 3),
        ]);
        assert_eq!(t.lookup("EXAMPLE.com:443"), Some(0));
        assert_eq!(t.lookup("www.example.com."), Some(1));
        assert_eq!(t.lookup("a.b.example.com"), Some(1));
        assert_eq!(t.lookup("v1.api.example.com"), Some(2));
        assert_eq!(t.lookup("other.org"), Some(3));
        assert_eq!(
            t.lookup("127.0.0.1:8080"),
            None,
            "`*` does not serve IP literals"
        );
    }

    #[test]
    fn ip_literals_listed_explicitly() {
        let t = table(&[("127.0.0.1", 0), ("[::1]", 1)]);
        assert_eq!(t.lookup("127.0.0.1:8080"), Some(0));
        assert_eq!(t.lookup("[::1]:80"), Some(1));
        assert_eq!(t.lookup("[::2]"), None);
    }

    #[test]
    fn bad_patterns() {
        assert!(HostPattern::parse("exa mple.com").is_err());
        assert!(HostPattern::parse("a.*.com").is_err());
        assert!(HostPattern::parse("").is_err());
        assert!(HostPattern::parse("-a.com").is_err());
    }

    #[test]
    fn overlong_host_is_no_zone() {
        let t = table(&[("*", 0)]);
        assert_eq!(t.lookup(&"a".repeat(300)), None);
        assert_eq!(t.lookup(""), None, "a missing Host is served by no zone");
    }

    /// The parse as it was before it was made one pass, kept to check the new one against.
    fn parse_host_reference(host: &str) -> HostName<'_> {
        let host = host.trim();
        if let Some(rest) = host.strip_prefix('[') {
            let inner = rest.split(']').next().unwrap_or("");
            if let Ok(ip) = inner.parse::<IpAddr>() {
                return HostName::Ip(ip);
            }
            return HostName::Name(host);
        }
        if host.bytes().filter(|&b| b == b':').count() > 1 {
            if let Ok(ip) = host.parse::<IpAddr>() {
                return HostName::Ip(ip);
            }
            return HostName::Name(host);
        }
        let name = match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        };
        let name = name.strip_suffix('.').unwrap_or(name);
        match name.parse::<std::net::Ipv4Addr>() {
            Ok(ip) => HostName::Ip(IpAddr::V4(ip)),
            Err(_) => HostName::Name(name),
        }
    }

    proptest::proptest! {
        #[test]
        fn parse_host_matches_the_reference(
            host in "[ \\t0-9a-fA-F.:\\[\\]xX%-]{0,24}|\\PC{0,24}"
        ) {
            proptest::prop_assert_eq!(parse_host(&host), parse_host_reference(&host));
        }
    }
}
