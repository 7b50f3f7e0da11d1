//! What the HTML page says to a person, in each language the project ships: the page's labels,
//! a title and detail per code (translated; English keeps the catalog's), what a visitor can do,
//! and what the edge knows of a refusal's cause. Compiled in from `pages/<tag>.toml` and
//! `pages/countries.tsv`, checked by this module's tests. Agents' JSON and Markdown never read it.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::Deserialize;

use crate::catalog::{CatalogEntry, catalog};
use crate::language::Language;

/// Who reads a page, beyond its format: the language it is written in and what the edge knows
/// of why it refused. [`Visitor::default`] is an English reader the edge knows nothing about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Visitor<'a> {
    /// The page's language.
    pub language: Language,
    /// Whether `language` followed the request's `Accept-Language`; then the page's `Vary` names
    /// it. False when the zone fixed the language (or nobody asked).
    pub negotiated: bool,
    /// What the edge knows of the refusal's cause, shown after the detail; `None` when it knows
    /// nothing beyond the code. Shown only on the code it explains.
    pub reason: Option<Reason<'a>>,
}

impl Visitor<'_> {
    /// A reader whose language is the zone's `fixed` one, or else the one `accept_language`
    /// (the request's `Accept-Language`) ranks first.
    pub fn for_request(accept_language: Option<&[u8]>, fixed: Option<Language>) -> Self {
        match fixed {
            Some(language) => Visitor {
                language,
                negotiated: false,
                reason: None,
            },
            None => Visitor {
                language: Language::negotiate(accept_language),
                negotiated: true,
                reason: None,
            },
        }
    }
}

/// Why the edge refused, as far as a person should be told: enough to tell a country block from
/// a browser block or a firewall rule, never the rule's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason<'a> {
    /// 1009: the country or region the edge placed the client in, as an ISO 3166-1 alpha-2
    /// code (`SE`); the page names it in its language. Anything but two ASCII letters is not
    /// shown.
    Country(&'a str),
    /// 1010: the request named no program (an empty or missing `User-Agent`).
    NoUserAgent,
    /// 1010: the program the request named is on the site's list.
    ListedUserAgent,
    /// 1020: a firewall (custom) rule of the site matched.
    SiteRule,
    /// 1020: the site's crawl control does not allow this crawler.
    Crawler,
}

impl Reason<'_> {
    /// The catalog code this reason explains.
    pub fn code(self) -> u16 {
        match self {
            Reason::Country(_) => 1009,
            Reason::NoUserAgent | Reason::ListedUserAgent => 1010,
            Reason::SiteRule | Reason::Crawler => 1020,
        }
    }

    /// The sentence for a page in `book`'s language, or `None` when there is nothing to say
    /// (a country code that is not two letters).
    pub(crate) fn sentence(self, book: &Book) -> Option<String> {
        let r = &book.reasons;
        Some(match self {
            Reason::Country(code) => {
                let code = code.trim();
                if code.len() != 2 || !code.bytes().all(|b| b.is_ascii_alphabetic()) {
                    return None;
                }
                let code = code.to_ascii_uppercase();
                let place = match country_name(&code, book.language) {
                    Some(name) => format!("{name} ({code})"),
                    None => code,
                };
                r.country.replace("{country}", &place)
            }
            Reason::NoUserAgent => r.no_user_agent.clone(),
            Reason::ListedUserAgent => r.listed_user_agent.clone(),
            Reason::SiteRule => r.site_rule.clone(),
            Reason::Crawler => r.crawler.clone(),
        })
    }
}

/// The page's labels.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Words {
    /// `Error {code}`.
    pub error_code: String,
    /// The document title: `Error {code}: {title}`.
    pub wire_title: String,
    pub happened: String,
    pub todo: String,
    pub details: String,
    pub ray_id: String,
    pub time: String,
    pub host: String,
    pub status: String,
    pub retry_after: String,
    /// `{n} s`.
    pub seconds: String,
    pub way: String,
    pub you: String,
    pub browser: String,
    pub edge: String,
    pub edge_what: String,
    pub server: String,
    pub working: String,
    pub broken: String,
    pub not_reached: String,
    /// The default footer in this language (an operator's own footer is shown as written).
    pub footer: String,
}

/// The sentences of [`Reason`]s.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Reasons {
    /// `{country}` is the country's name and code.
    pub country: String,
    pub no_user_agent: String,
    pub listed_user_agent: String,
    pub site_rule: String,
    pub crawler: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPage {
    title: Option<String>,
    detail: Option<String>,
    advice: Option<String>,
    todo: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOrigin {
    server: RawPage,
    client: RawPage,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBook {
    words: Words,
    reasons: Reasons,
    advice: BTreeMap<String, String>,
    origin: RawOrigin,
    page: BTreeMap<String, RawPage>,
}

/// One code's page: the title and detail in this language (`None` in English, which shows the
/// catalog's), and what a visitor can do (Markdown, `{retry_after}` to fill in).
#[derive(Debug)]
pub(crate) struct Page {
    pub title: Option<String>,
    pub detail: Option<String>,
    pub todo: String,
}

impl Page {
    /// What a visitor can do, with the wait filled in.
    pub(crate) fn todo(&self, retry_after: Option<u32>) -> String {
        match retry_after {
            Some(wait) => self.todo.replace("{retry_after}", &wait.to_string()),
            None => self.todo.clone(),
        }
    }
}

/// Everything a page says in one language.
#[derive(Debug)]
pub(crate) struct Book {
    pub language: Language,
    pub words: Words,
    pub reasons: Reasons,
    /// By code, sorted.
    pages: Vec<(u16, Page)>,
    origin_server: Page,
    origin_client: Page,
}

impl Book {
    /// The page for `entry`: its code's, or for an error the origin answered the page of its
    /// class.
    pub(crate) fn page(&self, entry: &CatalogEntry) -> &Page {
        if !entry.from_origin
            && let Ok(i) = self
                .pages
                .binary_search_by_key(&entry.code.get(), |(code, _)| *code)
        {
            return &self.pages[i].1;
        }
        if entry.status >= 500 {
            &self.origin_server
        } else {
            &self.origin_client
        }
    }
}

const SOURCES: [(Language, &str); 3] = [
    (Language::En, include_str!("../pages/en.toml")),
    (Language::Fr, include_str!("../pages/fr.toml")),
    (Language::De, include_str!("../pages/de.toml")),
];

const COUNTRIES_TSV: &str = include_str!("../pages/countries.tsv");

/// The tables a page is checked against, and what the check found.
struct Check<'a> {
    language: Language,
    advice: &'a BTreeMap<String, String>,
    used: std::collections::BTreeSet<&'a str>,
    errors: Vec<String>,
}

impl<'a> Check<'a> {
    /// One page, checked: `what` names it in messages.
    fn page(&mut self, what: &str, raw: RawPage, retryable: bool) -> Option<Page> {
        let language = self.language;
        let translated = language != Language::En;
        let mut problems = Vec::new();
        for (field, value) in [("title", &raw.title), ("detail", &raw.detail)] {
            match value {
                Some(_) if !translated => {
                    problems.push(format!("English shows the catalog's {field}: remove it"))
                }
                None if translated => problems.push(format!("{field} is missing")),
                Some(v) if v.trim().is_empty() || v.contains(['\n', '\r']) => {
                    problems.push(format!("{field} must be one non-empty line"))
                }
                _ => {}
            }
        }
        let todo = match (raw.advice, raw.todo) {
            (Some(key), None) => match self.advice.get_key_value(&key) {
                Some((key, text)) => {
                    self.used.insert(key);
                    Some(text.clone())
                }
                None => {
                    problems.push(format!("no [advice] {key:?}"));
                    None
                }
            },
            (None, Some(todo)) => Some(todo),
            _ => {
                problems.push("give exactly one of `advice` and `todo`".into());
                None
            }
        };
        if let Some(todo) = &todo {
            if !todo.starts_with("**") {
                problems.push("what a visitor can do must open with a bold sentence".into());
            }
            let leftover = todo.replace("{retry_after}", "");
            if leftover.contains(['{', '}']) {
                problems.push("unknown placeholder".into());
            }
            if !retryable && leftover != *todo {
                problems.push("{retry_after} on a code that is not retryable".into());
            }
        }
        let ok = problems.is_empty();
        self.errors.extend(
            problems
                .into_iter()
                .map(|p| format!("{language}: {what}: {p}")),
        );
        Some(Page {
            title: raw.title,
            detail: raw.detail,
            todo: todo?,
        })
        .filter(|_| ok)
    }
}

/// Parses and checks one language's file, reporting every problem found.
fn build(language: Language, text: &str) -> Result<Book, Vec<String>> {
    let raw: RawBook = toml::from_str(text).map_err(|e| vec![format!("{language}: {e}")])?;
    let mut check = Check {
        language,
        advice: &raw.advice,
        used: Default::default(),
        errors: Vec::new(),
    };
    let mut pages = Vec::with_capacity(raw.page.len());
    for (key, raw_page) in raw.page {
        let Some(entry) = key
            .parse::<u16>()
            .ok()
            .and_then(|code| crate::lookup(crate::Code::new(code)))
        else {
            check
                .errors
                .push(format!("{language}: page.{key}: not a code of the catalog"));
            continue;
        };
        if let Some(p) = check.page(&format!("page.{key}"), raw_page, entry.retryable) {
            pages.push((entry.code.get(), p));
        }
    }
    pages.sort_by_key(|(code, _)| *code);
    for entry in catalog() {
        if pages
            .binary_search_by_key(&entry.code.get(), |(c, _)| *c)
            .is_err()
        {
            check
                .errors
                .push(format!("{language}: no page for {}", entry.code));
        }
    }
    // Origin errors may be retryable (429, 502, 503, 504), but the class's text is shared by
    // codes that are not: it names no wait.
    let origin_server = check.page("origin.server", raw.origin.server, false);
    let origin_client = check.page("origin.client", raw.origin.client, false);
    let w = &raw.words;
    for (field, value, needs) in [
        ("error_code", &w.error_code, &["{code}"][..]),
        ("wire_title", &w.wire_title, &["{code}", "{title}"][..]),
        ("seconds", &w.seconds, &["{n}"][..]),
        ("country", &raw.reasons.country, &["{country}"][..]),
    ] {
        for needed in needs {
            if !value.contains(needed) {
                check
                    .errors
                    .push(format!("{language}: {field} must contain {needed}"));
            }
        }
    }
    for key in raw.advice.keys() {
        if !check.used.contains(key.as_str()) {
            check
                .errors
                .push(format!("{language}: [advice] {key:?} is not used"));
        }
    }
    let errors = check.errors;
    match (origin_server, origin_client) {
        (Some(origin_server), Some(origin_client)) if errors.is_empty() => Ok(Book {
            language,
            words: raw.words,
            reasons: raw.reasons,
            pages,
            origin_server,
            origin_client,
        }),
        _ => Err(errors),
    }
}

static BOOKS: LazyLock<Vec<Book>> = LazyLock::new(|| {
    // Compiled in and checked by `every_language_is_complete`, so this cannot fail at run time.
    SOURCES
        .iter()
        .map(|(language, text)| {
            build(*language, text)
                .unwrap_or_else(|errors| panic!("invalid pages/{language}.toml: {errors:#?}"))
        })
        .collect()
});

/// Everything a page says in `language`.
pub(crate) fn book(language: Language) -> &'static Book {
    &BOOKS[language.index()]
}

/// Country names by code: `[code, en, fr, de]`, sorted by code.
static COUNTRIES: LazyLock<Vec<[&'static str; 4]>> = LazyLock::new(|| {
    let mut rows: Vec<[&str; 4]> = COUNTRIES_TSV
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let mut f = l.split('\t');
            Some([f.next()?, f.next()?, f.next()?, f.next()?])
        })
        .collect();
    rows.sort_by_key(|r| r[0]);
    rows
});

/// The name of the country or region with ISO code `code` (upper case) in `language`.
pub(crate) fn country_name(code: &str, language: Language) -> Option<&'static str> {
    let rows = &*COUNTRIES;
    let i = rows.binary_search_by_key(&code, |r| r[0]).ok()?;
    Some(rows[i][1 + language.index()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_is_complete() {
        for (language, text) in SOURCES {
            if let Err(errors) = build(language, text) {
                panic!("pages/{language}.toml:\n{}", errors.join("\n"));
            }
        }
    }

    #[test]
    fn build_reports_every_problem() {
        let text = r#"
[words]
error_code = "E"
wire_title = "{code}"
happened = "" 
todo = ""
details = ""
ray_id = ""
time = ""
host = ""
status = ""
retry_after = ""
seconds = ""
way = ""
you = ""
browser = ""
edge = ""
edge_what = ""
server = ""
working = ""
broken = ""
not_reached = ""
footer = ""
[reasons]
country = "no placeholder"
no_user_agent = ""
listed_user_agent = ""
site_rule = ""
crawler = ""
[advice]
spare = "**x**"
[origin.server]
todo = "plain"
[origin.client]
advice = "missing"
[page.1020]
todo = "**Wait {retry_after}.**"
[page.9999]
todo = "**x**"
"#;
        let errors = build(Language::Fr, text).unwrap_err();
        for needle in [
            "error_code must contain {code}",
            "wire_title must contain {title}",
            "seconds must contain {n}",
            "country must contain {country}",
            "\"spare\" is not used",
            "origin.server: what a visitor can do must open with a bold sentence",
            "origin.server: title is missing",
            "origin.client: no [advice] \"missing\"",
            "page.1020: {retry_after} on a code that is not retryable",
            "page.9999: not a code of the catalog",
            "no page for 1015",
        ] {
            assert!(
                errors.iter().any(|e| e.contains(needle)),
                "{needle}: {errors:#?}"
            );
        }
        let english = build(
            Language::En,
            &text.replace("[page.1020]", "[page.1020]\ntitle = \"t\""),
        )
        .unwrap_err();
        assert!(
            english
                .iter()
                .any(|e| e.contains("English shows the catalog's title")),
            "{english:#?}"
        );
    }

    #[test]
    fn countries_cover_the_policy_codes() {
        let rows = &*COUNTRIES;
        assert_eq!(rows.len(), 251);
        for pair in rows.windows(2) {
            assert!(pair[0][0] < pair[1][0], "{} twice", pair[0][0]);
        }
        for row in rows {
            assert!(
                row[0].len() == 2 && row[0].bytes().all(|b| b.is_ascii_uppercase()),
                "{row:?}"
            );
            assert!(
                row[1..].iter().all(|name| !name.trim().is_empty()),
                "{row:?}"
            );
        }
        assert_eq!(country_name("SE", Language::En), Some("Sweden"));
        assert_eq!(country_name("SE", Language::Fr), Some("Suède"));
        assert_eq!(country_name("SE", Language::De), Some("Schweden"));
        assert_eq!(country_name("ZZ", Language::En), None);
    }

    #[test]
    fn country_reasons() {
        let fr = book(Language::Fr);
        assert_eq!(
            Reason::Country("de").sentence(fr).as_deref(),
            Some("Votre connexion semble provenir du pays suivant\u{a0}: Allemagne (DE).")
        );
        let en = book(Language::En);
        assert_eq!(
            Reason::Country("QZ").sentence(en).as_deref(),
            Some("Your connection appears to come from QZ.")
        );
        for bad in ["", "S", "SEE", "<b", "é1"] {
            assert_eq!(Reason::Country(bad).sentence(en), None, "{bad:?}");
        }
    }
}
