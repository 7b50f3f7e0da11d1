//! The error catalog: every code the edge answers with, compiled in from `catalog.toml`.

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};

use crate::Code;

/// The stable class of an error, which maps to one action for an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Category {
    /// Intentional block (IP, ASN, country, browser signature, firewall rule): do not retry.
    AccessDenied,
    /// Request rate or plan limit exceeded: back off.
    RateLimit,
    /// DNS resolution failure: do not retry, report.
    Dns,
    /// Zone, host routing or origin configuration error: report to the site owner.
    Config,
    /// Client TLS version, cipher or SNI mismatch: fix the client.
    Tls,
    /// DMCA or regulatory block: do not retry.
    Legal,
    /// Edge compute runtime error: the site owner must fix it.
    Worker,
    /// Invalid URL or header rewrite output: the site owner must fix the rule.
    Rewrite,
    /// Edge snippet error: the site owner must fix it.
    Snippet,
    /// Unsupported method, protocol or feature: change the request.
    Unsupported,
    /// 5xx: the origin is unreachable, down, slow or misbehaving: retry with backoff.
    Origin,
    /// 5xx: the edge's own internal error: retry.
    Cloudflare,
    /// 5xx: TLS between edge and origin failed: the site owner must fix it.
    Ssl,
    /// 4xx answered by the origin itself: the request cannot succeed as sent; change it.
    Client,
    /// A challenge stands before the page: authenticate (sign with Web Bot Auth, or be a
    /// verified bot) and retry; a browser solves it itself. Not a reason to stop.
    Challenge,
}

impl Category {
    /// The wire name, e.g. `access_denied`.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::AccessDenied => "access_denied",
            Category::RateLimit => "rate_limit",
            Category::Dns => "dns",
            Category::Config => "config",
            Category::Tls => "tls",
            Category::Legal => "legal",
            Category::Worker => "worker",
            Category::Rewrite => "rewrite",
            Category::Snippet => "snippet",
            Category::Unsupported => "unsupported",
            Category::Origin => "origin",
            Category::Cloudflare => "cloudflare",
            Category::Ssl => "ssl",
            Category::Client => "client",
            Category::Challenge => "challenge",
        }
    }
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One error code and everything the edge says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CatalogEntry {
    /// The error code: 1015, 522, ...
    pub code: Code,
    /// The HTTP status of the response.
    pub status: u16,
    /// The short title, e.g. `You are being rate limited` (printable ASCII, so it can double as
    /// the HTTP reason phrase); see [`CatalogEntry::wire_title`].
    pub title: String,
    /// Stable snake_case cause for programs to match on.
    pub error_name: String,
    /// Stable category.
    pub error_category: Category,
    /// What happened, and which party is responsible.
    pub detail: String,
    /// Whether the same request can succeed later.
    pub retryable: bool,
    /// Default seconds to wait; `Some` exactly when `retryable`.
    pub retry_after: Option<u32>,
    /// Whether the site owner must act.
    pub owner_action_required: bool,
    /// Guidance for an agent, in Markdown, with `{retry_after}` placeholders; see
    /// [`CatalogEntry::guidance`] for the text to send.
    pub what_you_should_do: String,
    /// The code whose vendor doc page documents this one, `None` when there is none.
    pub doc_page: Option<u16>,
    /// True for signpost's own entries, which are not vendor codes.
    pub signpost_own: bool,
    /// Fields whose value is this project's choice rather than a documented fact.
    pub inferred: Vec<String>,
    /// True for the entries that describe an origin's own error (see [`origin_entry`]): the
    /// body says `cloudflare_error: false` and `source: origin`.
    pub from_origin: bool,
    wire_title: String,
}

impl CatalogEntry {
    /// The title on the wire: `Error 1015: You are being rate limited`.
    pub fn wire_title(&self) -> &str {
        &self.wire_title
    }

    /// The guidance with its placeholders filled in for a wait of `retry_after` seconds (the
    /// entry's default when `None`), so that the text agrees with the `Retry-After` header.
    pub fn guidance(&self, retry_after: Option<u32>) -> String {
        let wait = retry_after.or(self.retry_after).unwrap_or(0);
        self.what_you_should_do
            .replace("{retry_after_x2}", &wait.saturating_mul(2).to_string())
            .replace("{retry_after_x4}", &wait.saturating_mul(4).to_string())
            .replace("{retry_after}", &wait.to_string())
    }
}

/// The raw shape of `catalog.toml`: kept dumb, checked in [`build`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    error: Vec<RawEntry>,
    #[serde(default)]
    origin_error: Vec<RawOriginEntry>,
}

/// An origin status the catalog describes (`[[origin_error]]`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOriginEntry {
    status: u16,
    title: String,
    error_name: String,
    detail: String,
    retryable: bool,
    retry_after: Option<u32>,
    what_you_should_do: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    code: u16,
    status: u16,
    title: String,
    error_name: String,
    error_category: Category,
    detail: String,
    retryable: bool,
    retry_after: Option<u32>,
    owner_action_required: bool,
    what_you_should_do: String,
    doc_page: Option<u16>,
    #[serde(default)]
    no_doc_page: bool,
    #[serde(default)]
    signpost: bool,
    #[serde(default)]
    inferred: Vec<String>,
}

const CATALOG_TOML: &str = include_str!("../catalog.toml");

/// Fields that `inferred` may name.
const INFERABLE: &[&str] = &[
    "status",
    "title",
    "error_name",
    "error_category",
    "retry_after",
    "owner_action_required",
];

/// Parses and validates the catalog, reporting every problem found.
fn build(text: &str) -> Result<Vec<CatalogEntry>, Vec<String>> {
    let file: CatalogFile = toml::from_str(text).map_err(|e| vec![e.to_string()])?;
    let mut errors = Vec::new();
    let mut entries = Vec::with_capacity(file.error.len());
    for raw in file.error {
        let code = raw.code;
        let mut bad = |msg: String| errors.push(format!("error {code}: {msg}"));
        if raw.retryable != raw.retry_after.is_some() {
            bad("retry_after must be present exactly when retryable".into());
        }
        if !(400..=599).contains(&raw.status) {
            bad(format!("status {} is not a 4xx or 5xx", raw.status));
        }
        if (500..600).contains(&code) && !raw.signpost && raw.status != code {
            bad("a 5xx code must have its own HTTP status".into());
        }
        if raw.no_doc_page && raw.doc_page.is_some() {
            bad("doc_page and no_doc_page exclude each other".into());
        }
        let name_ok = !raw.error_name.is_empty()
            && raw
                .error_name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !name_ok {
            bad(format!("error_name {:?} is not snake_case", raw.error_name));
        }
        if !raw.what_you_should_do.starts_with("**") {
            bad("what_you_should_do must open with a bold instruction".into());
        }
        let leftover = raw
            .what_you_should_do
            .replace("{retry_after_x2}", "")
            .replace("{retry_after_x4}", "")
            .replace("{retry_after}", "");
        if leftover.contains('{') || leftover.contains('}') {
            bad("what_you_should_do has an unknown placeholder".into());
        }
        if !raw.retryable && leftover != raw.what_you_should_do {
            bad("only retryable entries may use {retry_after} placeholders".into());
        }
        for field in &raw.inferred {
            if !INFERABLE.contains(&field.as_str()) {
                bad(format!("unknown inferred field {field:?}"));
            }
        }
        // The edge may also send the title as the HTTP reason phrase, which allows only
        // visible ASCII and spaces.
        if !raw.title.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
            bad("title must be printable ASCII (it doubles as a reason phrase)".into());
        }
        for (field, value) in [("title", &raw.title), ("detail", &raw.detail)] {
            if value.is_empty() || value.contains(['\n', '\r']) {
                bad(format!("{field} must be one non-empty line"));
            }
        }
        let doc_page = if raw.no_doc_page {
            None
        } else {
            Some(raw.doc_page.unwrap_or(code))
        };
        entries.push(CatalogEntry {
            wire_title: format!("Error {code}: {}", raw.title),
            code: Code::new(code),
            status: raw.status,
            title: raw.title,
            error_name: raw.error_name,
            error_category: raw.error_category,
            detail: raw.detail,
            retryable: raw.retryable,
            retry_after: raw.retry_after,
            owner_action_required: raw.owner_action_required,
            what_you_should_do: raw.what_you_should_do,
            doc_page,
            signpost_own: raw.signpost,
            inferred: raw.inferred,
            from_origin: false,
        });
    }
    entries.sort_by_key(|e| e.code);
    for pair in entries.windows(2) {
        if pair[0].code == pair[1].code {
            errors.push(format!("error {}: listed twice", pair[0].code));
        }
    }
    match entries.iter().find(|e| e.code == Code::NOT_FOUND) {
        Some(e) if e.signpost_own && e.status == 404 => {}
        _ => errors.push(format!(
            "signpost's own {} entry is missing",
            Code::NOT_FOUND
        )),
    }
    if errors.is_empty() {
        Ok(entries)
    } else {
        Err(errors)
    }
}

static CATALOG: LazyLock<Vec<CatalogEntry>> = LazyLock::new(|| {
    // The data is compiled in and `catalog_is_valid` checks it, so this cannot fail at run time.
    build(CATALOG_TOML).unwrap_or_else(|errors| panic!("invalid catalog.toml: {errors:#?}"))
});

/// One entry per status from 400 to 599 for errors the origin answered: the catalog's
/// `[[origin_error]]` entry for the status, or the generic entry of its class.
fn build_origin(text: &str) -> Result<Vec<CatalogEntry>, Vec<String>> {
    let file: CatalogFile = toml::from_str(text).map_err(|e| vec![e.to_string()])?;
    let mut errors = Vec::new();
    let mut given: Vec<Option<RawOriginEntry>> = (400..=599).map(|_| None).collect();
    for raw in file.origin_error {
        let status = raw.status;
        let mut bad = |msg: String| errors.push(format!("origin_error {status}: {msg}"));
        if !(400..=599).contains(&status) {
            bad("status is not a 4xx or 5xx".into());
            continue;
        }
        if raw.retryable != raw.retry_after.is_some() {
            bad("retry_after must be present exactly when retryable".into());
        }
        if !raw.what_you_should_do.starts_with("**") {
            bad("what_you_should_do must open with a bold instruction".into());
        }
        if !raw.title.bytes().all(|b| b == b' ' || b.is_ascii_graphic()) {
            bad("title must be printable ASCII".into());
        }
        let slot = &mut given[usize::from(status - 400)];
        if slot.is_some() {
            bad("listed twice".into());
        }
        *slot = Some(raw);
    }
    let entries = given
        .into_iter()
        .zip(400u16..=599)
        .map(|(raw, status)| {
            let server = status >= 500;
            let raw = raw.unwrap_or_else(|| RawOriginEntry {
                status,
                title: if server { "Server error" } else { "Client error" }.into(),
                error_name: if server {
                    "origin_server_error"
                } else {
                    "origin_client_error"
                }
                .into(),
                detail: if server {
                    format!("The site's origin server answered {status}: it failed to handle the request.")
                } else {
                    format!("The site's origin server answered {status}: it will not serve the request as sent.")
                },
                retryable: false,
                retry_after: None,
                what_you_should_do: if server {
                    "**Do not retry at once.** The origin failed on this request; report the ray ID to the site owner if it persists."
                } else {
                    "**Do not retry as-is.** Change the request, then send it again."
                }
                .into(),
            });
            CatalogEntry {
                wire_title: format!("Error {status}: {}", raw.title),
                code: Code::new(status),
                status,
                title: raw.title,
                error_name: raw.error_name,
                error_category: if server {
                    Category::Origin
                } else {
                    Category::Client
                },
                detail: raw.detail,
                retryable: raw.retryable,
                retry_after: raw.retry_after,
                // A server error at the origin is the site's to fix; a client error is the
                // client's.
                owner_action_required: server,
                what_you_should_do: raw.what_you_should_do,
                doc_page: None,
                signpost_own: false,
                inferred: Vec::new(),
                from_origin: true,
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(entries)
    } else {
        Err(errors)
    }
}

static ORIGIN: LazyLock<Vec<CatalogEntry>> = LazyLock::new(|| {
    // Compiled in and checked by `origin_entries_are_valid`, so this cannot fail at run time.
    build_origin(CATALOG_TOML).unwrap_or_else(|errors| panic!("invalid catalog.toml: {errors:#?}"))
});

/// The entry for an error the origin answered with `status`, `None` outside 400-599.
pub fn origin_entry(status: u16) -> Option<&'static CatalogEntry> {
    ORIGIN.get(usize::from(status.checked_sub(400)?))
}

/// Every entry, sorted by code.
pub fn catalog() -> &'static [CatalogEntry] {
    &CATALOG
}

/// The entry for `code`, if the catalog has one.
pub fn lookup(code: Code) -> Option<&'static CatalogEntry> {
    let entries = catalog();
    entries
        .binary_search_by_key(&code, |e| e.code)
        .ok()
        .map(|i| &entries[i])
}

/// The entry that answers `/cdn-cgi/error/<segment>`: the code's entry, or signpost's own 404
/// entry for anything that is not plain ASCII digits naming a catalog code (`""`, `"abc"`,
/// `"+1015"`, `" 1015"`, `"99999999999"`).
pub fn lookup_path_code(segment: &str) -> &'static CatalogEntry {
    // `u16::from_str` alone would accept a leading `+` and zeros; codes are at most 5 digits.
    let code = if !segment.starts_with('0')
        && (1..=5).contains(&segment.len())
        && segment.bytes().all(|b| b.is_ascii_digit())
    {
        segment.parse::<u16>().ok()
    } else {
        None
    };
    code.map(Code::new)
        .and_then(lookup)
        .unwrap_or_else(not_found)
}

/// signpost's own entry for an unknown error code (HTTP 404).
pub fn not_found() -> &'static CatalogEntry {
    // `build` guarantees the entry exists.
    let entries = catalog();
    let i = entries
        .binary_search_by_key(&Code::NOT_FOUND, |e| e.code)
        .unwrap_or(0);
    &entries[i]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_is_valid() {
        if let Err(errors) = build(CATALOG_TOML) {
            panic!("catalog.toml is invalid:\n{}", errors.join("\n"));
        }
    }

    #[test]
    fn origin_entries_are_valid() {
        if let Err(errors) = build_origin(CATALOG_TOML) {
            panic!(
                "catalog.toml's origin errors are invalid:\n{}",
                errors.join("\n")
            );
        }
        for status in 400..=599 {
            let e = origin_entry(status).expect("every 4xx and 5xx");
            assert_eq!((e.code.get(), e.status), (status, status));
            assert!(e.from_origin && !e.signpost_own);
        }
        assert!(origin_entry(399).is_none() && origin_entry(600).is_none());
        assert!(origin_entry(0).is_none());
        let e = origin_entry(503).unwrap();
        assert_eq!(
            (e.error_name.as_str(), e.retry_after),
            ("origin_unavailable", Some(60))
        );
        let e = origin_entry(404).unwrap();
        assert_eq!((e.error_category, e.retryable), (Category::Client, false));
        assert_eq!(origin_entry(599).unwrap().error_name, "origin_server_error");
        assert_eq!(origin_entry(418).unwrap().error_name, "origin_client_error");
    }

    #[test]
    fn catalog_covers_the_reference() {
        let expected: &[u16] = &[
            1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009, 1010, 1011, 1012, 1013,
            1014, 1015, 1016, 1018, 1019, 1020, 1023, 1025, 1026, 1033, 1034, 1035, 1036, 1037,
            1038, 1040, 1041, 1042, 1044, 1045, 1101, 1102, 1104, 1200, 1201, 1202, 1203, 1204,
            1205, 1206, 500, 502, 504, 520, 521, 522, 523, 524, 525, 526,
        ];
        for code in expected {
            assert!(lookup(Code::new(*code)).is_some(), "missing {code}");
        }
        // signpost's own: the error page's 404 and the answers to requests it cannot accept.
        let own: &[u16] = &[400, 402, 404, 405, 408, 413, 414, 431];
        for code in own {
            let e = lookup(Code::new(*code)).unwrap_or_else(|| panic!("missing own {code}"));
            assert!(e.signpost_own && e.status == *code, "{code}");
            assert!(
                !e.retryable && e.retry_after.is_none(),
                "{code} is a client mistake"
            );
            assert!(e.what_you_should_do.starts_with("**Do not retry"), "{code}");
        }
        assert_eq!(catalog().len(), expected.len() + own.len() + 1);
    }

    /// The answer to a challenged agent: a 403 that says to authenticate, not to stop.
    #[test]
    fn challenge_required_tells_agents_to_authenticate() {
        let e = lookup(Code::CHALLENGE_REQUIRED).expect("the challenge entry");
        assert!(e.signpost_own);
        assert_eq!(
            (e.status, e.error_name.as_str(), e.error_category),
            (403, "challenge_required", Category::Challenge)
        );
        assert_eq!(e.error_category.as_str(), "challenge");
        assert!(!e.retryable && e.retry_after.is_none() && !e.owner_action_required);
        let guidance = e.guidance(None);
        assert!(guidance.starts_with("**Authenticate, then retry.**"));
        for needed in [
            "Web Bot Auth",
            "Accept-Signature",
            "@authority",
            "signature-agent",
            "verified bot",
        ] {
            assert!(guidance.contains(needed), "{needed}");
        }
    }

    #[test]
    fn documented_retry_policy() {
        let retry: Vec<(u16, u32)> = catalog()
            .iter()
            .filter_map(|e| Some((e.code.get(), e.retry_after?)))
            .collect();
        assert_eq!(
            retry,
            [
                (500, 30),
                (502, 60),
                (504, 120),
                (520, 60),
                (521, 120),
                (522, 120),
                (523, 120),
                (524, 120),
                (1004, 120),
                (1015, 30),
                (1033, 120),
                (1038, 60),
                (1200, 60),
                (1205, 5)
            ]
        );
    }

    #[test]
    fn live_facts() {
        let e = lookup(Code::new(1015)).unwrap();
        assert_eq!(e.wire_title(), "Error 1015: You are being rate limited");
        assert_eq!((e.status, e.error_category), (429, Category::RateLimit));
        assert_eq!(
            e.guidance(None),
            "**Wait and retry.** This block is transient. Wait at least 30 seconds, then retry with exponential backoff.\n\nRecommended approach:\n1. Wait 30 seconds before your next request\n2. If rate-limited again, double the wait time (60s, 120s, etc.)\n3. If rate-limiting persists after 5 retries, stop and reassess your request pattern"
        );
        assert!(e.guidance(Some(10)).contains("(20s, 40s, etc.)"));
        let e = lookup(Code::new(1020)).unwrap();
        assert_eq!(e.error_name, "firewall_rule_blocked");
        assert_eq!(
            e.what_you_should_do,
            "**Do not retry.** This block is intentional. Contact the site owner if you believe this is an error."
        );
        assert_eq!(lookup(Code::new(1007)).unwrap().doc_page, Some(1006));
        assert_eq!(lookup(Code::new(1026)).unwrap().doc_page, None);
    }

    #[test]
    fn path_codes() {
        assert_eq!(lookup_path_code("1015").code, 1015);
        assert_eq!(lookup_path_code("522").code, 522);
        for bad in [
            "",
            "abc",
            "99999999999",
            "+1015",
            " 1015",
            "1015 ",
            "9999",
            "01015",
            "65536",
            "١٠١٥",
        ] {
            let e = lookup_path_code(bad);
            assert_eq!((e.code.get(), e.status), (404, 404), "{bad:?}");
            assert!(e.signpost_own);
        }
    }

    #[test]
    fn build_reports_every_problem() {
        let text = r#"
[[error]]
code = 1
status = 200
title = "t"
error_name = "Bad Name"
error_category = "dns"
detail = "d"
retryable = true
owner_action_required = false
what_you_should_do = "plain {oops}"
inferred = ["zone"]
"#;
        let errors = build(text).unwrap_err();
        assert!(errors.len() >= 6, "{errors:#?}");
        assert!(build("[[error]]\ncode = 1\nbogus = 2\n").is_err());
    }
}
