//! The request fields an expression can read, each declared once in the table below: its names
//! in the Rules language, its type, what reading it needs, whether the filter index may key on
//! it, and how its value is read from a request. The type checker, the evaluator, the index and
//! traces all read this table; nothing else lists the fields.

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;

use http::header::{self, HeaderName};

use super::cx::Cx;

/// `http.request.headers["name"]`: the one field read with an argument, the header's name.
pub(crate) const HEADERS: &str = "http.request.headers";

/// The type of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    Str,
    Int,
    Bool,
    Ip,
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Ty::Str => "String",
            Ty::Int => "Integer",
            Ty::Bool => "Boolean",
            Ty::Ip => "IP address",
        })
    }
}

/// A value during evaluation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum V<'a> {
    Str(Cow<'a, str>),
    Int(i64),
    Bool(bool),
    Ip(IpAddr),
}

impl V<'_> {
    /// The text of a String value; any other value reads as empty.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            V::Str(s) => s,
            _ => "",
        }
    }
}

/// What reading a field needs beyond the request itself: what the policy must load or do for
/// an expression that reads it, worked out when the expression is compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Needs {
    /// The request's own facts.
    Request,
    /// The client's country: a country database.
    Country,
    /// The client's AS number: an ASN database.
    Asn,
    /// Who the request is: the policy identifies requests.
    Identity,
    /// The answer the client would get: only error rules, which run after there is one.
    Response,
}

/// Declares the fields: the [`Field`] enum, the [`NAMES`] list, and each of `Field`'s
/// properties as one `match` (so that reading a field per request is a jump, as if written by
/// hand, and nothing is looked up in a table).
macro_rules! fields {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident {
            names: [$name:literal $(, $alias:literal)*],
            ty: $ty:ident,
            needs: $needs:ident,
            index_key: $key:literal,
            header: $header:expr,
            read: |$cx:ident| $read:expr $(,)?
        }
    ),* $(,)?) => {
        /// A request field an expression can read.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub(crate) enum Field {
            $( $(#[doc = $doc])* $variant, )*
            /// `http.request.headers["name"]`: one request header, by its name in lower case.
            Header(HeaderName),
        }

        /// Every name of every field, in the order `docs/policy.md` lists them: for messages
        /// and suggestions. A field's first name is how traces and messages write it; the
        /// others are other spellings Cloudflare accepts.
        pub(crate) const NAMES: &[&str] = &[$( $name, $($alias,)* )* HEADERS];

        impl Field {
            /// The field `name` names (`http.request.headers` is read with a header's name, as
            /// [`Field::Header`]).
            pub(crate) fn by_name(name: &str) -> Option<Field> {
                Some(match name {
                    $( $name $(| $alias)* => Field::$variant, )*
                    _ => return None,
                })
            }

            /// The field's name in the Rules language, as a trace shows it.
            pub(crate) fn name(&self) -> Cow<'static, str> {
                match self {
                    $( Field::$variant => Cow::Borrowed($name), )*
                    Field::Header(name) => {
                        Cow::Owned(format!("{HEADERS}[\"{}\"]", name.as_str()))
                    }
                }
            }

            /// The type of its value.
            pub(crate) fn ty(&self) -> Ty {
                match self {
                    $( Field::$variant => Ty::$ty, )*
                    Field::Header(_) => Ty::Str,
                }
            }

            /// What reading it needs.
            pub(crate) fn needs(&self) -> Needs {
                match self {
                    $( Field::$variant => Needs::$needs, )*
                    Field::Header(_) => Needs::Request,
                }
            }

            /// Whether the filter index may key on it: a String read without a lookup or an
            /// allocation.
            pub(crate) fn index_key(&self) -> bool {
                match self {
                    $( Field::$variant => $key, )*
                    Field::Header(_) => true,
                }
            }

            /// The request header it reads, when it reads exactly one.
            pub(crate) fn header(&self) -> Option<HeaderName> {
                match self {
                    $( Field::$variant => $header, )*
                    Field::Header(name) => Some(name.clone()),
                }
            }

            /// Its value for one request.
            #[inline]
            pub(crate) fn read<'a>(&'a self, cx: &'a Cx<'_>) -> V<'a> {
                match self {
                    $( Field::$variant => {
                        let $cx = cx;
                        $read
                    } )*
                    Field::Header(name) => V::Str(cx.header(name)),
                }
            }
        }
    };
}

fields! {
    /// `http.host`: the Host in lower case, without the port or trailing dot.
    Host {
        names: ["http.host"],
        ty: Str,
        needs: Request,
        index_key: true,
        header: None,
        read: |cx| V::Str(Cow::Borrowed(&cx.host)),
    },
    /// `http.request.method`.
    Method {
        names: ["http.request.method"],
        ty: Str,
        needs: Request,
        index_key: true,
        header: None,
        read: |cx| V::Str(Cow::Borrowed(cx.facts.method)),
    },
    /// `http.request.uri`: the normalised path and the query as sent.
    Uri {
        names: ["http.request.uri"],
        ty: Str,
        needs: Request,
        index_key: true,
        header: None,
        read: |cx| V::Str(Cow::Borrowed(cx.uri())),
    },
    /// `http.request.uri.path`: the path, normalised.
    Path {
        names: ["http.request.uri.path"],
        ty: Str,
        needs: Request,
        index_key: true,
        header: None,
        read: |cx| V::Str(Cow::Borrowed(cx.path())),
    },
    /// `http.request.uri.query`: the query as sent, without the `?`.
    Query {
        names: ["http.request.uri.query"],
        ty: Str,
        needs: Request,
        index_key: true,
        header: None,
        read: |cx| V::Str(Cow::Borrowed(cx.query())),
    },
    /// `http.request.full_uri`: built at its first use, so never an index key.
    FullUri {
        names: ["http.request.full_uri"],
        ty: Str,
        needs: Request,
        index_key: false,
        header: None,
        read: |cx| V::Str(Cow::Borrowed(cx.full_uri())),
    },
    /// `raw.http.request.uri`: the URI as sent, before normalisation.
    RawUri {
        names: ["raw.http.request.uri"],
        ty: Str,
        needs: Request,
        index_key: true,
        header: None,
        read: |cx| V::Str(Cow::Borrowed(cx.facts.uri)),
    },
    /// `raw.http.request.uri.path`: the path as sent, before normalisation.
    RawPath {
        names: ["raw.http.request.uri.path"],
        ty: Str,
        needs: Request,
        index_key: true,
        header: None,
        read: |cx| V::Str(Cow::Borrowed(cx.raw_path())),
    },
    /// `http.user_agent`.
    UserAgent {
        names: ["http.user_agent"],
        ty: Str,
        needs: Request,
        index_key: true,
        header: Some(header::USER_AGENT),
        read: |cx| V::Str(cx.header(header::USER_AGENT)),
    },
    /// `http.referer`.
    Referer {
        names: ["http.referer"],
        ty: Str,
        needs: Request,
        index_key: true,
        header: Some(header::REFERER),
        read: |cx| V::Str(cx.header(header::REFERER)),
    },
    /// `http.cookie`: every Cookie line, joined with `"; "`.
    Cookie {
        names: ["http.cookie"],
        ty: Str,
        needs: Request,
        index_key: true,
        header: Some(header::COOKIE),
        read: |cx| V::Str(cx.cookie()),
    },
    /// `ip.src`: the client's address.
    IpSrc {
        names: ["ip.src"],
        ty: Ip,
        needs: Request,
        index_key: false,
        header: None,
        read: |cx| V::Ip(cx.client_ip),
    },
    /// `ip.src.country`: the client's country code, `""` when unknown. A database lookup, so
    /// never an index key.
    Country {
        names: ["ip.src.country", "ip.geoip.country"],
        ty: Str,
        needs: Country,
        index_key: false,
        header: None,
        read: |cx| V::Str(Cow::Borrowed(cx.country_code())),
    },
    /// `ip.src.asnum`: the client's AS number, 0 when unknown.
    Asn {
        names: ["ip.src.asnum", "ip.geoip.asnum"],
        ty: Int,
        needs: Asn,
        index_key: false,
        header: None,
        read: |cx| V::Int(cx.asn().map_or(0, i64::from)),
    },
    /// `ssl`: the client connection is TLS.
    Ssl {
        names: ["ssl"],
        ty: Bool,
        needs: Request,
        index_key: false,
        header: None,
        read: |cx| V::Bool(cx.facts.tls),
    },
    /// `http.response.code`: the status the client would get (the edge's or the origin's).
    ResponseCode {
        names: ["http.response.code"],
        ty: Int,
        needs: Response,
        index_key: false,
        header: None,
        read: |cx| V::Int(cx.response.map_or(0, |r| i64::from(r.code))),
    },
    /// `cf.response.1xxx_code`: the edge's own catalog code, 0 when the origin made the error.
    EdgeCode {
        names: ["cf.response.1xxx_code"],
        ty: Int,
        needs: Response,
        index_key: false,
        header: None,
        read: |cx| V::Int(cx.response.map_or(0, |r| i64::from(r.edge_code))),
    },
    /// `cf.bot_management.verified_bot`: the request proved it is a known bot.
    VerifiedBot {
        names: ["cf.bot_management.verified_bot", "cf.client.bot"],
        ty: Bool,
        needs: Identity,
        index_key: false,
        header: None,
        read: |cx| V::Bool(cx.identity.verified_bot().is_some()),
    },
    /// `cf.verified_bot_category`: the verified bot's category, `""` otherwise.
    BotCategory {
        names: ["cf.verified_bot_category"],
        ty: Str,
        needs: Identity,
        index_key: false,
        header: None,
        read: |cx| V::Str(Cow::Borrowed(
            cx.identity.verified_bot().map_or("", |b| &*b.category),
        )),
    },
    /// `cf.bot_management.signed_agent`: the Web Bot Auth signature verified.
    SignedAgent {
        names: ["cf.bot_management.signed_agent"],
        ty: Bool,
        needs: Identity,
        index_key: false,
        header: None,
        read: |cx| V::Bool(cx.identity.signed()),
    },
    /// `signpost.bot.signature`: `verified`, `invalid`, `unverified` or `absent`.
    BotSignature {
        names: ["signpost.bot.signature"],
        ty: Str,
        needs: Identity,
        index_key: false,
        header: None,
        read: |cx| V::Str(Cow::Borrowed(cx.identity.signature.outcome.as_str())),
    },
    /// `signpost.bot.signature_agent`: the key directory of a verified signature, `""`
    /// otherwise.
    BotSignatureAgent {
        names: ["signpost.bot.signature_agent"],
        ty: Str,
        needs: Identity,
        index_key: false,
        header: None,
        read: |cx| V::Str(Cow::Borrowed(if cx.identity.signed() {
            cx.identity.signature.agent.as_deref().unwrap_or("")
        } else {
            ""
        })),
    },
    /// `signpost.bot.name`: the verified bot's name, `""` otherwise.
    BotName {
        names: ["signpost.bot.name"],
        ty: Str,
        needs: Identity,
        index_key: false,
        header: None,
        read: |cx| V::Str(Cow::Borrowed(cx.identity.verified_bot().map_or("", |b| &*b.name))),
    },
    /// `signpost.bot.claimed`: the known bot the request is or claims to be, verified or not.
    BotClaimed {
        names: ["signpost.bot.claimed"],
        ty: Str,
        needs: Identity,
        index_key: false,
        header: None,
        read: |cx| V::Str(Cow::Borrowed(cx.identity.bot.as_ref().map_or("", |b| &*b.name))),
    },
    /// `signpost.bot.behaviors`: the verified bot's behaviors, e.g. `"search training"`.
    BotBehaviors {
        names: ["signpost.bot.behaviors"],
        ty: Str,
        needs: Identity,
        index_key: false,
        header: None,
        read: |cx| V::Str(Cow::Borrowed(
            cx.identity.verified_bot().map_or("", |b| b.behaviors.as_str()),
        )),
    },
    /// `signpost.bot.claim_failed`: the request claimed a known bot and failed every check.
    BotClaimFailed {
        names: ["signpost.bot.claim_failed"],
        ty: Bool,
        needs: Identity,
        index_key: false,
        header: None,
        read: |cx| V::Bool(cx.identity.claim_failed()),
    },
}

impl Field {
    /// A String field's value; any other field reads as empty. Borrowed except for a header
    /// sent on several lines, whose lines are joined.
    #[inline]
    pub(crate) fn read_str<'a>(&'a self, cx: &'a Cx<'_>) -> Cow<'a, str> {
        match self.read(cx) {
            V::Str(s) => s,
            _ => Cow::Borrowed(""),
        }
    }

    /// Its value as the rules see it, written out for a trace: text as decoded, `ip.src` in its
    /// canonical form, the AS number (0 when unknown), the country code (`""` when unknown).
    pub(crate) fn text(&self, cx: &Cx<'_>) -> String {
        match self.read(cx) {
            V::Str(s) => s.into_owned(),
            V::Int(n) => n.to_string(),
            V::Bool(b) => b.to_string(),
            V::Ip(ip) => ip.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documentation's field tables (`| field | type | value |`) list exactly these fields,
    /// each with its type and every one of its spellings.
    #[test]
    fn docs_list_every_field_with_its_type() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/policy.md");
        let docs = std::fs::read_to_string(path).expect("docs/policy.md");
        let mut documented: Vec<(String, String)> = Vec::new();
        for line in docs.lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let [_, names, ty, ..] = cells[..] else {
                continue;
            };
            if !["String", "Integer", "Boolean", "IP address"].contains(&ty)
                || !names.starts_with('`')
            {
                continue;
            }
            for name in names.split('`').skip(1).step_by(2) {
                let name = name.strip_suffix("[\"name\"]").unwrap_or(name);
                documented.push((name.to_owned(), ty.to_owned()));
            }
        }
        let declared: Vec<(String, String)> = NAMES
            .iter()
            .map(|&name| {
                let ty = match Field::by_name(name) {
                    Some(field) => field.ty(),
                    None => Field::Header(http::header::ACCEPT).ty(),
                };
                (name.to_owned(), ty.to_string())
            })
            .collect();
        for field in &declared {
            assert!(
                documented.contains(field),
                "{field:?} is not in docs/policy.md's field tables"
            );
        }
        for field in &documented {
            assert!(
                declared.contains(field),
                "docs/policy.md lists {field:?}, which is not a field"
            );
        }
    }

    /// Every name but `http.request.headers` (read with a header's name) finds its field, and
    /// a field is written by the first of its names.
    #[test]
    fn names_find_their_fields() {
        for &name in NAMES {
            match Field::by_name(name) {
                Some(field) => assert!(NAMES.contains(&&*field.name()), "{name}"),
                None => assert_eq!(name, HEADERS),
            }
        }
        assert_eq!(Field::by_name("ip.geoip.asnum"), Some(Field::Asn));
        assert_eq!(Field::Asn.name(), "ip.src.asnum");
        let header = Field::Header(http::header::HeaderName::from_static("x-api-key"));
        assert_eq!(header.name(), "http.request.headers[\"x-api-key\"]");
    }
}
