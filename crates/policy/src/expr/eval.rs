//! Evaluation of compiled filters against one request.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::net::IpAddr;

use super::compile::{Field, Filter, Node, Ord6, Val};
use crate::decision::RequestFacts;
use crate::geo::{AsnDb, Country, CountryDb};

/// What filters read about one request. Country, ASN and the full URI are looked up at most
/// once, and only if a rule asks.
///
/// Every text field is what the request sent, decoded lossily: each run of valid UTF-8 is kept
/// as it is and each byte that is not UTF-8 reads as U+FFFD, so that no rule can be blinded by
/// an invalid byte next to the text it looks for.
pub(crate) struct Cx<'r> {
    pub facts: &'r RequestFacts<'r>,
    pub client_ip: IpAddr,
    /// `http.host`: the host name in lower case, without a port or a trailing dot.
    pub host: Cow<'r, str>,
    /// `http.request.uri.path`, worked out at its first use (a policy without rules that read
    /// the path never pays for it): see [`Cx::path`].
    path: OnceCell<Cow<'r, str>>,
    country_db: Option<&'r CountryDb>,
    asn_db: Option<&'r AsnDb>,
    country: OnceCell<Option<Country>>,
    asn: OnceCell<Option<u32>>,
    /// `http.request.uri` when normalising changed the path.
    uri: OnceCell<String>,
    full_uri: OnceCell<String>,
    /// The answer an error rule is asked about; `None` in the request phases, whose rules
    /// cannot read it (refused when the policy loads).
    pub response: Option<ResponseFacts>,
    /// Who the request is: set by the identify phase when the policy identifies requests.
    pub identity: crate::identity::Identity,
}

/// The answer an error rule matches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseFacts {
    /// `http.response.code`: the status the client would get.
    pub code: u16,
    /// `cf.response.1xxx_code`: the edge's catalog code (1015, 522, ...), 0 when the origin
    /// made the error.
    pub edge_code: u16,
}

impl<'r> Cx<'r> {
    pub(crate) fn new(
        facts: &'r RequestFacts<'r>,
        client_ip: IpAddr,
        country_db: Option<&'r CountryDb>,
        asn_db: Option<&'r AsnDb>,
    ) -> Self {
        let host = crate::host::normalize_host(facts.host);
        Cx::with_host(facts, host, client_ip, country_db, asn_db)
    }

    /// [`Cx::new`] with `http.host` already worked out (the policy parses the Host once).
    pub(crate) fn with_host(
        facts: &'r RequestFacts<'r>,
        host: Cow<'r, str>,
        client_ip: IpAddr,
        country_db: Option<&'r CountryDb>,
        asn_db: Option<&'r AsnDb>,
    ) -> Self {
        Cx {
            facts,
            client_ip,
            host,
            path: OnceCell::new(),
            country_db,
            asn_db,
            country: OnceCell::new(),
            asn: OnceCell::new(),
            uri: OnceCell::new(),
            full_uri: OnceCell::new(),
            response: None,
            identity: crate::identity::Identity::default(),
        }
    }

    /// Takes `country` and `asn`, when given, as the client's instead of what the databases
    /// say: a trace's assumption ("what if this client came from there").
    pub(crate) fn assume_geo(&self, country: Option<Country>, asn: Option<u32>) {
        if country.is_some() {
            let _ = self.country.set(country);
        }
        if asn.is_some() {
            let _ = self.asn.set(asn);
        }
    }

    /// The path exactly as sent.
    pub(crate) fn raw_path(&self) -> &'r str {
        self.path_and_query().0
    }

    /// The query as sent, without the `?`.
    pub(crate) fn query(&self) -> &'r str {
        self.path_and_query().1
    }

    fn path_and_query(&self) -> (&'r str, &'r str) {
        self.facts
            .uri
            .split_once('?')
            .unwrap_or((self.facts.uri, ""))
    }

    /// `http.request.uri.path`: normalised as the origin will resolve it (see `crate::path`).
    pub(crate) fn path(&self) -> &str {
        self.normalized_path()
    }

    fn normalized_path(&self) -> &Cow<'r, str> {
        self.path
            .get_or_init(|| crate::path::normalized_path(self.raw_path()))
    }

    /// `http.request.uri`: the normalised path and the query as sent.
    pub(crate) fn uri(&self) -> &str {
        match self.normalized_path() {
            Cow::Borrowed(_) => self.facts.uri,
            Cow::Owned(path) => self.uri.get_or_init(|| {
                let query = self
                    .facts
                    .uri
                    .find('?')
                    .map_or("", |i| &self.facts.uri[i..]);
                format!("{path}{query}")
            }),
        }
    }

    /// The client's country, from the country database.
    pub(crate) fn country(&self) -> Option<Country> {
        *self.country.get_or_init(|| self.lookup_country())
    }

    fn lookup_country(&self) -> Option<Country> {
        self.country_db.and_then(|db| db.lookup(self.client_ip))
    }

    /// The client's autonomous system number, from the ASN database.
    pub(crate) fn asn(&self) -> Option<u32> {
        *self
            .asn
            .get_or_init(|| self.asn_db.and_then(|db| db.lookup(self.client_ip)))
    }

    /// A header as text: repeated lines joined with ", " (RFC 9110 §5.3). Missing headers read
    /// as empty. Borrowed when there is one line; allocates only to join several.
    pub(crate) fn header(&self, name: impl http::header::AsHeaderName) -> Cow<'r, str> {
        self.header_joined(name, ", ")
    }

    /// The Cookie header: repeated lines (HTTP/2 sends one per cookie) joined with "; ".
    pub(crate) fn cookie(&self) -> Cow<'r, str> {
        self.header_joined(http::header::COOKIE, "; ")
    }

    /// All lines of a header joined with `sep`. Every line counts, whatever bytes it holds:
    /// bytes that are not UTF-8 read as U+FFFD and the valid text around them is kept.
    fn header_joined(&self, name: impl http::header::AsHeaderName, sep: &str) -> Cow<'r, str> {
        let headers: &'r http::HeaderMap = self.facts.headers;
        let mut values = headers
            .get_all(name)
            .iter()
            .map(|v| crate::lossy_utf8(v.as_bytes()));
        let Some(first) = values.next() else {
            return Cow::Borrowed("");
        };
        let Some(second) = values.next() else {
            return first;
        };
        let mut joined = String::with_capacity(first.len() + sep.len() + second.len());
        joined.push_str(&first);
        for v in std::iter::once(second).chain(values) {
            joined.push_str(sep);
            joined.push_str(&v);
        }
        Cow::Owned(joined)
    }
}

/// A value during evaluation.
#[derive(Debug, Clone, PartialEq)]
enum V<'a> {
    Str(Cow<'a, str>),
    Int(i64),
    Bool(bool),
    Ip(IpAddr),
}

impl V<'_> {
    fn as_str(&self) -> &str {
        match self {
            V::Str(s) => s,
            _ => "",
        }
    }
}

impl Filter {
    /// Whether the request matches.
    pub(crate) fn matches(&self, cx: &Cx<'_>) -> bool {
        node(&self.root, cx)
    }
}

fn node(n: &Node, cx: &Cx<'_>) -> bool {
    match n {
        Node::And(a, b) => node(a, cx) && node(b, cx),
        Node::Or(a, b) => node(a, cx) || node(b, cx),
        Node::Xor(a, b) => node(a, cx) != node(b, cx),
        Node::Not(a) => !node(a, cx),
        Node::Truthy(v) => matches!(val(v, cx), V::Bool(true)),
        Node::Cmp(op @ (Ord6::Eq | Ord6::Ne), a, b) => {
            // Equality compares lengths first; most comparisons fail there without a memcmp.
            let equal = match (val(a, cx), val(b, cx)) {
                (V::Str(x), V::Str(y)) => str_eq(&x, &y),
                (x, y) => x == y,
            };
            equal == (*op == Ord6::Eq)
        }
        Node::Cmp(op, a, b) => {
            let (a, b) = (val(a, cx), val(b, cx));
            let ord = match (&a, &b) {
                (V::Str(x), V::Str(y)) => x.as_ref().cmp(y.as_ref()),
                (V::Int(x), V::Int(y)) => x.cmp(y),
                (V::Bool(x), V::Bool(y)) => x.cmp(y),
                (V::Ip(x), V::Ip(y)) => x.cmp(y),
                // Types are checked at compile time; a mismatch cannot match.
                _ => return false,
            };
            match op {
                Ord6::Eq => ord.is_eq(),
                Ord6::Ne => ord.is_ne(),
                Ord6::Lt => ord.is_lt(),
                Ord6::Le => ord.is_le(),
                Ord6::Gt => ord.is_gt(),
                Ord6::Ge => ord.is_ge(),
            }
        }
        Node::Contains(a, b) => val(a, cx).as_str().contains(val(b, cx).as_str()),
        Node::Matches(a, re) => re.is_match(val(a, cx).as_str()),
        Node::InStr(a, set) => set.contains(val(a, cx).as_str()),
        Node::InInt(a, set) => matches!(val(a, cx), V::Int(n) if set.contains(&n)),
        Node::InIp(a, table) => matches!(val(a, cx), V::Ip(ip) if table.contains(ip)),
    }
}

/// String equality that settles most cases on the length and first byte without calling memcmp.
#[inline]
fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len()
        && (a.is_empty() || (a[0] == b[0] && a[a.len() - 1] == b[b.len() - 1] && a == b))
}

fn val<'a>(v: &'a Val, cx: &'a Cx<'_>) -> V<'a> {
    match v {
        Val::Str(s) => V::Str(Cow::Borrowed(s)),
        Val::Int(n) => V::Int(*n),
        Val::Ip(ip) => V::Ip(*ip),
        Val::Field(f) => field(f, cx),
        Val::Lower(a) => V::Str(match val(a, cx) {
            V::Str(s) if s.bytes().any(|b| b.is_ascii_uppercase()) || !s.is_ascii() => {
                Cow::Owned(s.to_lowercase())
            }
            V::Str(s) => s,
            _ => Cow::Borrowed(""),
        }),
        Val::Upper(a) => V::Str(match val(a, cx) {
            V::Str(s) if s.bytes().any(|b| b.is_ascii_lowercase()) || !s.is_ascii() => {
                Cow::Owned(s.to_uppercase())
            }
            V::Str(s) => s,
            _ => Cow::Borrowed(""),
        }),
        Val::Len(a) => V::Int(i64::try_from(val(a, cx).as_str().len()).unwrap_or(i64::MAX)),
        Val::StartsWith(a, b) => V::Bool(val(a, cx).as_str().starts_with(val(b, cx).as_str())),
        Val::EndsWith(a, b) => V::Bool(val(a, cx).as_str().ends_with(val(b, cx).as_str())),
        Val::UrlDecode(a, options) => V::Str(match val(a, cx) {
            V::Str(s) => super::decode::url_decode(s, *options),
            _ => Cow::Borrowed(""),
        }),
        Val::DecodeBase64(a) => V::Str(super::decode::base64(val(a, cx).as_str())),
        Val::RemoveBytes(a, set) => V::Str(match val(a, cx) {
            V::Str(s) => super::decode::remove_chars(s, set),
            _ => Cow::Borrowed(""),
        }),
    }
}

fn field<'a>(f: &'a Field, cx: &'a Cx<'_>) -> V<'a> {
    match f {
        Field::IpSrc => V::Ip(cx.client_ip),
        Field::Asn => V::Int(cx.asn().map_or(0, i64::from)),
        Field::Ssl => V::Bool(cx.facts.tls),
        Field::ResponseCode => V::Int(cx.response.map_or(0, |r| i64::from(r.code))),
        Field::EdgeCode => V::Int(cx.response.map_or(0, |r| i64::from(r.edge_code))),
        Field::VerifiedBot => V::Bool(cx.identity.verified_bot().is_some()),
        Field::SignedAgent => V::Bool(cx.identity.signed()),
        Field::BotClaimFailed => V::Bool(cx.identity.claim_failed()),
        _ => V::Str(field_str(f, cx)),
    }
}

/// A string field's value; non-string fields read as empty. Borrowed except for a header sent
/// on several lines, whose lines are joined.
pub(crate) fn field_str<'a>(f: &'a Field, cx: &'a Cx<'_>) -> Cow<'a, str> {
    Cow::Borrowed(match f {
        Field::Host => &cx.host,
        Field::Method => cx.facts.method,
        Field::Uri => cx.uri(),
        Field::RawUri => cx.facts.uri,
        Field::Path => cx.path(),
        Field::RawPath => cx.raw_path(),
        Field::Query => cx.query(),
        Field::FullUri => cx.full_uri.get_or_init(|| {
            // The authority as sent (with its port), in lower case like `http.host`.
            let scheme = if cx.facts.tls { "https" } else { "http" };
            let authority = cx.facts.host.trim().to_ascii_lowercase();
            format!("{scheme}://{authority}{}", cx.uri())
        }),
        Field::UserAgent => return cx.header(http::header::USER_AGENT),
        Field::Referer => return cx.header(http::header::REFERER),
        Field::Cookie => return cx.cookie(),
        Field::Header(name) => return cx.header(name),
        Field::Country => {
            // Borrowed from the cached code: no allocation per comparison.
            let cached: &'a Option<Country> = cx.country.get_or_init(|| cx.lookup_country());
            cached
                .as_ref()
                .and_then(|c| std::str::from_utf8(c).ok())
                .unwrap_or("")
        }
        Field::BotCategory => cx.identity.verified_bot().map_or("", |b| &*b.category),
        Field::BotSignature => cx.identity.signature.outcome.as_str(),
        Field::BotSignatureAgent => {
            if cx.identity.signed() {
                cx.identity.signature.agent.as_deref().unwrap_or("")
            } else {
                ""
            }
        }
        Field::BotName => cx.identity.verified_bot().map_or("", |b| &*b.name),
        Field::BotClaimed => cx.identity.bot.as_ref().map_or("", |b| &*b.name),
        Field::BotBehaviors => cx
            .identity
            .verified_bot()
            .map_or("", |b| b.behaviors.as_str()),
        Field::IpSrc
        | Field::Asn
        | Field::Ssl
        | Field::ResponseCode
        | Field::EdgeCode
        | Field::VerifiedBot
        | Field::SignedAgent
        | Field::BotClaimFailed => "",
    })
}

/// A field's value as the rules see it, written out for a trace: text as decoded, `ip.src` in
/// its canonical form, the AS number (0 when unknown), the country code ("" when unknown).
pub(crate) fn field_text(f: &Field, cx: &Cx<'_>) -> String {
    match field(f, cx) {
        V::Str(s) => s.into_owned(),
        V::Int(n) => n.to_string(),
        V::Bool(b) => b.to_string(),
        V::Ip(ip) => ip.to_string(),
    }
}
