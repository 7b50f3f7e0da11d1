//! The known bots: who they are, what they do with a site's pages, and how a request proves it
//! is one of them.
//!
//! The catalog ships with the binary (`catalog.toml` beside this file); a policy adds, changes and
//! removes entries with `[[bot]]`. It is compiled once per load into a search for the bots'
//! User-Agent tokens, ASCII case-insensitive (a skip table that passes over most of a
//! User-Agent's bytes, and an automaton that checks the places a token may start), and a table
//! from key directories to bots.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, Anchored, Input, MatchKind, StartKind};
use serde::Deserialize;
use serde_spanned::Spanned;

use crate::error::{Diagnostics, ProblemKind, did_you_mean};
use crate::ipset::{IpTable, parse_net};

/// The catalog as shipped.
const SHIPPED: &str = include_str!("catalog.toml");

/// Cloudflare's verified-bot categories (`cf.verified_bot_category`).
pub const CATEGORIES: &[&str] = &[
    "Academic Research",
    "Accessibility",
    "Advertising & Marketing",
    "Aggregator",
    "AI Assistant",
    "AI Crawler",
    "AI Search",
    "Archiver",
    "Feed Fetcher",
    "Monitoring & Analytics",
    "Page Preview",
    "Search Engine Crawler",
    "Search Engine Optimization",
    "Security",
    "Social Media Marketing",
    "Webhooks",
    "Other",
];

/// User-Agent tokens that name an HTTP library, not a bot: anything can send them, so a bot
/// cannot be known by one (Cloudflare refuses them as verified-bot patterns too).
const GENERIC_USER_AGENTS: &[&str] = &[
    "python-requests",
    "go-http-client",
    "node-fetch",
    "curl",
    "wget",
    "okhttp",
    "java",
    "axios",
    "mozilla",
    "aiohttp",
    "httpx",
    "libwww-perl",
];

/// What a bot does with the pages it fetches, as crawl control sorts bots (Cloudflare's
/// behaviors since 2026-07).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Behaviors(u8);

impl Behaviors {
    /// Indexes pages for a search engine.
    pub const SEARCH: Behaviors = Behaviors(1);
    /// Fetches pages for a person asking now.
    pub const AGENT: Behaviors = Behaviors(2);
    /// Collects pages to train models.
    pub const TRAINING: Behaviors = Behaviors(4);
    /// Each behavior with its name, in the order they are written.
    pub const ALL: [(Behaviors, &'static str); 3] = [
        (Behaviors::SEARCH, "search"),
        (Behaviors::AGENT, "agent"),
        (Behaviors::TRAINING, "training"),
    ];

    /// Whether every behavior of `other` is in `self`.
    pub fn contains(self, other: Behaviors) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    /// Whether no behavior is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The behaviors written out, space-separated in a fixed order (`"search training"`): what
    /// `signpost.bot.behaviors` reads.
    pub fn as_str(self) -> &'static str {
        const NAMES: [&str; 8] = [
            "",
            "search",
            "agent",
            "search agent",
            "training",
            "search training",
            "agent training",
            "search agent training",
        ];
        NAMES[usize::from(self.0 & 7)]
    }

    fn by_name(name: &str) -> Option<Behaviors> {
        Behaviors::ALL
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(b, _)| *b)
    }
}

impl std::ops::BitOr for Behaviors {
    type Output = Behaviors;
    fn bitor(self, rhs: Behaviors) -> Behaviors {
        Behaviors(self.0 | rhs.0)
    }
}

/// One known bot.
#[derive(Debug)]
pub struct Bot {
    /// Its name, unique in the catalog: what `signpost.bot.name` reads and logs show.
    pub name: Arc<str>,
    /// Who runs it.
    pub operator: Arc<str>,
    /// Its Cloudflare verified-bot category (one of [`CATEGORIES`]).
    pub category: Arc<str>,
    /// What it does with pages.
    pub behaviors: Behaviors,
    /// The token its User-Agent carries, if it is known by one.
    pub user_agent: Option<Box<str>>,
    /// The name robots.txt addresses it by.
    pub robots_token: Arc<str>,
    /// The key directories it signs Web Bot Auth requests from, normalised (see
    /// [`normalize_agent`]).
    pub web_bot_auth: Vec<Arc<str>>,
    /// Addresses it crawls from, given in the policy.
    pub(crate) ip_ranges: IpTable<()>,
    /// Where its operator publishes its addresses.
    pub ip_ranges_url: Vec<Arc<str>>,
    /// Suffixes of the host names its addresses' reverse DNS names end in, lower case.
    pub rdns: Vec<Box<str>>,
}

impl Bot {
    /// Whether a request can prove it is this bot at all: a bot known only by its User-Agent
    /// cannot, so a request claiming it is never verified and never an impostor.
    pub fn is_verifiable(&self) -> bool {
        !self.web_bot_auth.is_empty()
            || !self.ip_ranges.is_empty()
            || !self.ip_ranges_url.is_empty()
            || !self.rdns.is_empty()
    }

    /// Whether the policy lists `ip` among the bot's own addresses.
    pub(crate) fn listed_ip(&self, ip: std::net::IpAddr) -> bool {
        self.ip_ranges.contains(ip)
    }
}

impl PartialEq for Bot {
    /// Names are unique in a catalog.
    fn eq(&self, other: &Bot) -> bool {
        self.name == other.name
    }
}

impl Eq for Bot {}

/// The known bots of a policy, compiled for lookups.
#[derive(Debug, Default)]
pub struct BotCatalog {
    bots: Vec<Arc<Bot>>,
    /// The bots' User-Agent tokens; pattern `i` names `user_agent_bot[i]`.
    user_agents: Option<TokenSearch>,
    user_agent_bot: Vec<usize>,
    by_directory: HashMap<Arc<str>, usize>,
}

impl BotCatalog {
    /// Every bot, catalog order.
    pub fn bots(&self) -> &[Arc<Bot>] {
        &self.bots
    }

    /// The bot called `name`.
    pub fn named(&self, name: &str) -> Option<&Arc<Bot>> {
        self.bots.iter().find(|b| &*b.name == name)
    }

    /// The bot a User-Agent claims to be: the longest bot token found in it, ASCII
    /// case-insensitively, wherever it is (`Mozilla/5.0 (compatible; Googlebot/2.1; ...)`).
    pub fn claimed_by(&self, user_agent: &[u8]) -> Option<&Arc<Bot>> {
        let found = self.user_agents.as_ref()?.find(user_agent)?;
        self.bots.get(*self.user_agent_bot.get(found)?)
    }

    /// The bot that signs from the key directory `agent` (normalised by [`normalize_agent`]).
    pub fn signing_from(&self, agent: &str) -> Option<&Arc<Bot>> {
        self.by_directory.get(agent).and_then(|&i| self.bots.get(i))
    }

    /// Every published address list the catalog names, once each: what the edge keeps fresh.
    pub fn ip_range_urls(&self) -> Vec<Arc<str>> {
        let mut urls: Vec<Arc<str>> = Vec::new();
        for bot in &self.bots {
            for url in &bot.ip_ranges_url {
                if !urls.contains(url) {
                    urls.push(Arc::clone(url));
                }
            }
        }
        urls
    }

    fn compile(bots: Vec<Bot>) -> BotCatalog {
        let bots: Vec<Arc<Bot>> = bots.into_iter().map(Arc::new).collect();
        let mut tokens = Vec::new();
        let mut user_agent_bot = Vec::new();
        let mut by_directory = HashMap::new();
        for (i, bot) in bots.iter().enumerate() {
            if let Some(token) = &bot.user_agent {
                tokens.push(token.to_string());
                user_agent_bot.push(i);
            }
            for dir in &bot.web_bot_auth {
                by_directory.entry(Arc::clone(dir)).or_insert(i);
            }
        }
        let user_agents = TokenSearch::new(&tokens);
        BotCatalog {
            bots,
            user_agents,
            user_agent_bot,
            by_directory,
        }
    }
}

/// The search for the bot tokens in a User-Agent: the leftmost token found, ASCII
/// case-insensitively, the longest of those starting there.
#[derive(Debug)]
struct TokenSearch {
    /// The places a token may start. Most User-Agents (a browser's) hold no token: most of
    /// their bytes are skipped, where an unanchored automaton steps through every byte. `None`
    /// when a token of one byte leaves nothing to skip.
    skip: Option<SkipTable>,
    /// Anchored, checking each place the skip table finds, when there is one; else unanchored,
    /// one pass over the User-Agent.
    automaton: AhoCorasick,
}

impl TokenSearch {
    fn new(tokens: &[String]) -> Option<TokenSearch> {
        if tokens.is_empty() {
            return None;
        }
        let builder = |start| {
            AhoCorasickBuilder::new()
                .ascii_case_insensitive(true)
                .match_kind(MatchKind::LeftmostLongest)
                .start_kind(start)
                .build(tokens)
                .ok()
        };
        let skipping = SkipTable::new(tokens).and_then(|skip| {
            Some(TokenSearch {
                automaton: builder(StartKind::Anchored)?,
                skip: Some(skip),
            })
        });
        skipping.or_else(|| {
            Some(TokenSearch {
                automaton: builder(StartKind::Unanchored)?,
                skip: None,
            })
        })
    }

    /// The pattern index of the token found in `haystack`.
    fn find(&self, haystack: &[u8]) -> Option<usize> {
        let Some(skip) = &self.skip else {
            return self
                .automaton
                .find(haystack)
                .map(|m| m.pattern().as_usize());
        };
        let mut from = 0;
        while let Some(start) = skip.next_candidate(haystack, from) {
            // No token starts before `start`: one starting there is the leftmost.
            let input = Input::new(haystack).range(start..).anchored(Anchored::Yes);
            if let Ok(Some(found)) = self.automaton.try_find(input) {
                return Some(found.pattern().as_usize());
            }
            from = start + 1;
        }
        None
    }
}

/// A Wu–Manber skip table over two-byte blocks: the first `prefix` bytes of every token (the
/// shortest token's length, at most [`SkipTable::MAX_PREFIX`]) are a window slid along the
/// User-Agent; the window's last two bytes say how far it can move before a token's prefix could
/// fill it. Bytes are compared ASCII case-insensitively, as the automaton compares them.
#[derive(Debug)]
struct SkipTable {
    prefix: usize,
    /// Each byte's class: 0 for a byte in no token's prefix, else one class per byte (both
    /// ASCII cases of a letter share one).
    class: [u8; 256],
    classes: usize,
    /// `shift[a * classes + b]`: how far the window may move when it ends with bytes of classes
    /// `a`, `b`; 0 when a token's prefix may fill it.
    shift: Vec<u8>,
}

impl SkipTable {
    /// A longer prefix skips more, and needs a larger shift than a byte holds.
    const MAX_PREFIX: usize = 32;

    /// `None` when a token is shorter than two bytes (nothing to skip) or the tokens' prefixes
    /// hold more byte values than a class holds.
    fn new(tokens: &[String]) -> Option<SkipTable> {
        let prefix = tokens.iter().map(String::len).min()?.min(Self::MAX_PREFIX);
        if prefix < 2 {
            return None;
        }
        let mut class = [0u8; 256];
        let mut classes = 1usize;
        for token in tokens {
            for &byte in &token.as_bytes()[..prefix] {
                let byte = byte.to_ascii_lowercase();
                if class[usize::from(byte)] == 0 {
                    let next = u8::try_from(classes).ok()?;
                    class[usize::from(byte)] = next;
                    class[usize::from(byte.to_ascii_uppercase())] = next;
                    classes += 1;
                }
            }
        }
        // `prefix` is at most MAX_PREFIX: every shift fits a byte.
        let mut shift = vec![(prefix - 1) as u8; classes * classes];
        for token in tokens {
            let bytes = token.as_bytes();
            for at in 1..prefix {
                let pair = usize::from(class[usize::from(bytes[at - 1])]) * classes
                    + usize::from(class[usize::from(bytes[at])]);
                shift[pair] = shift[pair].min((prefix - 1 - at) as u8);
            }
        }
        Some(SkipTable {
            prefix,
            class,
            classes,
            shift,
        })
    }

    /// The first place at or after `from` where a token may start; every place before it is
    /// ruled out.
    fn next_candidate(&self, haystack: &[u8], from: usize) -> Option<usize> {
        // `end`: the last byte of the window starting at `end + 1 - prefix`.
        let mut end = from + self.prefix - 1;
        while let (Some(&a), Some(&b)) = (haystack.get(end - 1), haystack.get(end)) {
            let pair = usize::from(self.class[usize::from(a)]) * self.classes
                + usize::from(self.class[usize::from(b)]);
            match self.shift.get(pair).copied().unwrap_or(0) {
                0 => return Some(end + 1 - self.prefix),
                shift => end += usize::from(shift),
            }
        }
        None
    }
}

/// A key directory as the catalog and the verifier compare them: the `https` origin in lower
/// case, without a trailing slash or the default port (`https://Bot.Example:443/` is
/// `https://bot.example`). A URL with a path (a `jwks_uri`) keeps its path as written.
pub fn normalize_agent(url: &str) -> String {
    let url = url.trim();
    let (scheme, rest) = url.split_once("://").unwrap_or(("https", url));
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let mut authority = authority.to_ascii_lowercase();
    if scheme.eq_ignore_ascii_case("https") && authority.ends_with(":443") {
        authority.truncate(authority.len() - 4);
    }
    let path = path.trim_end_matches('/');
    format!("{}://{authority}{path}", scheme.to_ascii_lowercase())
}

/// `[[bot]]`, in the policy and in the shipped catalog.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BotFile {
    pub name: Spanned<String>,
    /// Removes the shipped bot of this name.
    pub remove: Option<bool>,
    pub operator: Option<Spanned<String>>,
    pub category: Option<Spanned<String>>,
    pub behaviors: Option<Spanned<Vec<Spanned<String>>>>,
    pub user_agent: Option<Spanned<String>>,
    pub robots_token: Option<Spanned<String>>,
    pub web_bot_auth: Option<Vec<Spanned<String>>>,
    pub ip_ranges: Option<Vec<Spanned<String>>>,
    pub ip_ranges_url: Option<Vec<Spanned<String>>>,
    pub rdns: Option<Vec<Spanned<String>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShippedFile {
    bot: Vec<Spanned<BotFile>>,
}

/// The most bots a catalog holds, shipped and added: the User-Agent automaton and the tables
/// stay small whatever a policy says.
pub const MAX_BOTS: usize = 1000;

/// The shipped catalog changed by the policy's `[[bot]]` entries, every problem reported at
/// its place in the policy.
pub(crate) fn validate(entries: &[Spanned<BotFile>], d: &mut Diagnostics<'_>) -> BotCatalog {
    let mut bots = shipped();
    let shipped_names: Vec<Arc<str>> = bots.iter().map(|b| Arc::clone(&b.name)).collect();
    let mut seen: Vec<&str> = Vec::new();
    for entry in entries {
        let e = entry.get_ref();
        let name = e.name.get_ref().trim();
        if name.is_empty() {
            d.at(ProblemKind::Invalid, sp(&e.name), "a bot needs a name");
            continue;
        }
        if seen.contains(&name) {
            d.at(
                ProblemKind::Invalid,
                sp(&e.name),
                format!("bot `{name}` is already listed above"),
            );
            continue;
        }
        seen.push(name);
        let at = bots.iter().position(|b| &*b.name == name);
        if e.remove == Some(true) {
            match at {
                Some(i) => {
                    bots.remove(i);
                }
                None => {
                    let names: Vec<&str> = shipped_names.iter().map(|n| &**n).collect();
                    d.at_with_hint(
                        ProblemKind::Invalid,
                        sp(&e.name),
                        format!("no shipped bot is called `{name}`: nothing to remove"),
                        did_you_mean(name, names.iter().copied())
                            .map(|n| format!("did you mean `{n}`?")),
                    );
                }
            }
            continue;
        }
        match at {
            Some(i) => {
                let mut bot = std::mem::replace(&mut bots[i], placeholder());
                apply(&mut bot, e, d);
                bots[i] = bot;
            }
            None => {
                if e.category.is_none() || e.behaviors.is_none() {
                    d.at(
                        ProblemKind::Invalid,
                        sp(&e.name),
                        format!(
                            "`{name}` is not a shipped bot: a new bot needs `category` and `behaviors`"
                        ),
                    );
                    continue;
                }
                let mut bot = placeholder();
                bot.name = Arc::from(name);
                bot.robots_token = Arc::from(name);
                apply(&mut bot, e, d);
                bots.push(bot);
            }
        }
    }
    if bots.len() > MAX_BOTS
        && let Some(last) = entries.last()
    {
        d.at(
            ProblemKind::Invalid,
            sp(last),
            format!("a catalog holds at most {MAX_BOTS} bots"),
        );
    }
    BotCatalog::compile(bots)
}

/// The catalog as shipped, unchanged.
#[cfg(test)]
pub(crate) fn shipped_catalog() -> BotCatalog {
    BotCatalog::shipped()
}

impl BotCatalog {
    /// The catalog as shipped with the binary, before any policy's `[[bot]]` changes.
    pub fn shipped() -> BotCatalog {
        BotCatalog::compile(shipped())
    }
}

fn shipped() -> Vec<Bot> {
    // The shipped file is part of the build: a test proves it parses without a problem.
    shipped_into(&mut Diagnostics::new(SHIPPED, "bots/catalog.toml"))
}

fn shipped_into(d: &mut Diagnostics<'_>) -> Vec<Bot> {
    let Ok(file) = toml::from_str::<ShippedFile>(SHIPPED) else {
        return Vec::new();
    };
    let mut bots = Vec::with_capacity(file.bot.len());
    for entry in &file.bot {
        let e = entry.get_ref();
        let mut bot = placeholder();
        bot.name = Arc::from(e.name.get_ref().as_str());
        bot.robots_token = Arc::clone(&bot.name);
        apply(&mut bot, e, d);
        bots.push(bot);
    }
    bots
}

fn placeholder() -> Bot {
    Bot {
        name: Arc::from(""),
        operator: Arc::from(""),
        category: Arc::from("Other"),
        behaviors: Behaviors::default(),
        user_agent: None,
        robots_token: Arc::from(""),
        web_bot_auth: Vec::new(),
        ip_ranges: IpTable::default(),
        ip_ranges_url: Vec::new(),
        rdns: Vec::new(),
    }
}

/// Sets on `bot` every field `e` gives, checking each.
fn apply(bot: &mut Bot, e: &BotFile, d: &mut Diagnostics<'_>) {
    if let Some(operator) = &e.operator {
        bot.operator = Arc::from(operator.get_ref().trim());
    }
    if let Some(category) = &e.category {
        let c = category.get_ref().trim();
        match CATEGORIES.iter().find(|k| k.eq_ignore_ascii_case(c)) {
            Some(k) => bot.category = Arc::from(*k),
            None => d.at_with_hint(
                ProblemKind::Invalid,
                sp(category),
                format!("`{c}` is not a verified-bot category"),
                Some(match did_you_mean(c, CATEGORIES.iter().copied()) {
                    Some(k) => format!("did you mean `{k}`?"),
                    None => format!("categories are {}", CATEGORIES.join(", ")),
                }),
            ),
        }
    }
    if let Some(behaviors) = &e.behaviors {
        let mut set = Behaviors::default();
        for b in behaviors.get_ref() {
            match Behaviors::by_name(b.get_ref().trim()) {
                Some(one) => set = set | one,
                None => d.at(
                    ProblemKind::Invalid,
                    sp(b),
                    format!(
                        "`{}` is not a behavior: search, agent or training",
                        b.get_ref()
                    ),
                ),
            }
        }
        bot.behaviors = set;
    }
    if let Some(ua) = &e.user_agent {
        let token = ua.get_ref().trim();
        if token.len() < 3 {
            d.at(
                ProblemKind::Invalid,
                sp(ua),
                "a User-Agent token needs at least 3 characters: a shorter one matches unrelated clients",
            );
        } else if GENERIC_USER_AGENTS
            .iter()
            .any(|g| token.to_ascii_lowercase().starts_with(g))
        {
            d.at(
                ProblemKind::Invalid,
                sp(ua),
                format!("`{token}` names an HTTP library, which anyone can send, not a bot"),
            );
        } else {
            bot.user_agent = Some(token.into());
        }
    }
    if let Some(token) = &e.robots_token {
        bot.robots_token = Arc::from(token.get_ref().trim());
    } else if let Some(ua) = &bot.user_agent
        && e.user_agent.is_some()
    {
        bot.robots_token = Arc::from(&**ua);
    }
    if let Some(dirs) = &e.web_bot_auth {
        bot.web_bot_auth.clear();
        for dir in dirs {
            let url = dir.get_ref().trim();
            if !url.to_ascii_lowercase().starts_with("https://") || url.len() <= "https://".len() {
                d.at(
                    ProblemKind::Invalid,
                    sp(dir),
                    "a key directory is an https URL, e.g. \"https://bot.example.com\"",
                );
                continue;
            }
            bot.web_bot_auth.push(Arc::from(normalize_agent(url)));
        }
    }
    if let Some(ranges) = &e.ip_ranges {
        let mut table = IpTable::default();
        for r in ranges {
            match parse_net(r.get_ref()) {
                Ok(net) => table.insert(net, ()),
                Err(why) => d.at(ProblemKind::Invalid, sp(r), why),
            }
        }
        bot.ip_ranges = table;
    }
    if let Some(urls) = &e.ip_ranges_url {
        bot.ip_ranges_url.clear();
        for u in urls {
            let url = u.get_ref().trim();
            if !url.to_ascii_lowercase().starts_with("https://") {
                d.at(
                    ProblemKind::Invalid,
                    sp(u),
                    "an address list is fetched over https: give an https URL",
                );
                continue;
            }
            bot.ip_ranges_url.push(Arc::from(url));
        }
    }
    if let Some(suffixes) = &e.rdns {
        bot.rdns.clear();
        for s in suffixes {
            let suffix = s.get_ref().trim().trim_matches('.').to_ascii_lowercase();
            if !suffix.contains('.')
                || suffix
                    .bytes()
                    .any(|b| !(b.is_ascii_alphanumeric() || b == b'-' || b == b'.'))
            {
                d.at(
                    ProblemKind::Invalid,
                    sp(s),
                    "a reverse DNS suffix is a domain name with at least two labels, e.g. \"googlebot.com\"",
                );
                continue;
            }
            bot.rdns.push(suffix.into());
        }
    }
}

fn sp<T>(s: &Spanned<T>) -> Range<usize> {
    s.span()
}

pub(crate) mod settings;

#[cfg(test)]
mod tests;
