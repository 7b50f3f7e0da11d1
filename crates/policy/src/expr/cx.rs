//! What the rules read about one request ([`Cx`]): the request's facts, with the values that
//! cost something (the normalised path, the full URI, the country and the AS number) worked out
//! at their first use and kept; and the answer an error rule is asked about ([`ResponseFacts`]).

use std::borrow::Cow;
use std::cell::OnceCell;
use std::net::IpAddr;

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

    /// The client's country code as text, `""` when unknown: borrowed from the cached code, so
    /// that comparing it allocates nothing.
    pub(crate) fn country_code(&self) -> &str {
        let cached: &Option<Country> = self.country.get_or_init(|| self.lookup_country());
        cached
            .as_ref()
            .and_then(|c| std::str::from_utf8(c).ok())
            .unwrap_or("")
    }

    /// `http.request.full_uri`: the scheme, the authority as sent (with its port) in lower case
    /// like `http.host`, and [`Cx::uri`]; built at its first use.
    pub(crate) fn full_uri(&self) -> &str {
        self.full_uri.get_or_init(|| {
            let scheme = if self.facts.tls { "https" } else { "http" };
            let authority = self.facts.host.trim().to_ascii_lowercase();
            format!("{scheme}://{authority}{}", self.uri())
        })
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
