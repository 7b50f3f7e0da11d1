//! Challenges in the policy: the `challenge` action's difficulty, a zone's `[zone.challenge]`
//! settings, the edge-wide `[challenge] keys`, and the decision's last phase, which turns a
//! challenge some rule asked for into the verdict, or lets the request pass.
//!
//! A rule that challenges does not end the phases: it notes the challenge
//! ([`ChallengeNote`]) and the later phases still run, so that a block or a rate limit after it
//! still refuses, and a cleared client is still counted. The last phase, `challenge`, then
//! decides: a path of the zone's `exempt_paths` passes ([`ChallengeBypass::Exempt`]), else the
//! verdict is [`Verdict::Challenge`](crate::Verdict::Challenge), which the edge answers unless the
//! client holds a valid clearance. A verified client (a verified bot, or a verified Web Bot Auth
//! signature) is never challenged by a rule that does not name it ([`ChallengeBypass::Verified`]):
//! a rule names verified clients when its expression reads who the request is (a `cf.verified_bot`,
//! `cf.bot_management.*` or `signpost.bot.*` field); crawl control's actions name them by
//! definition (they are about known bots).

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_spanned::Spanned;
use signpost_challenge::{Binding, Difficulty, Key, KeyRing, Lang, Settings};

use crate::crawl::{ALWAYS_FREE_PATHS, PathGlob};
use crate::error::{Diagnostics, ProblemKind};
use crate::identity::Identity;

/// The paths a zone never challenges unless its `exempt_paths` says otherwise: feeds (a feed
/// reader cannot run a page), `/robots.txt` and `/.well-known/` (what a client reads to learn
/// the site's rules), and, added to these, pay per crawl's free paths ([`ALWAYS_FREE_PATHS`] and
/// the zone's `[zone.crawl] free_paths`).
pub const DEFAULT_EXEMPT_PATHS: &[&str] = &[
    "/robots.txt",
    "/.well-known/*",
    "*/feed",
    "*/feed/",
    "*/feed/*",
    "*/rss",
    "*/rss/",
    "*/atom",
    "*/atom/",
    "*.rss",
    "*.atom",
    "*/index.xml",
    "*/feed.xml",
    "*/rss.xml",
    "*/atom.xml",
];

/// At most this many `exempt_paths` patterns per zone.
pub const MAX_EXEMPT_PATHS: usize = 64;
/// The longest `exempt_paths` pattern.
const MAX_PATTERN_LEN: usize = 256;
/// The largest secret file read (a secret is 32 bytes of randomness, 64 as hex).
const MAX_SECRET_FILE: u64 = 4096;

/// `[zone.challenge]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ChallengeFile {
    pub difficulty: Option<Spanned<i64>>,
    pub ipv4_prefix: Option<Spanned<i64>>,
    pub ipv6_prefix: Option<Spanned<i64>>,
    pub bind_user_agent: Option<bool>,
    pub clearance_ttl: Option<Spanned<String>>,
    pub wait_clearance_ttl: Option<Spanned<String>>,
    pub challenge_ttl: Option<Spanned<String>>,
    pub fallback_delay: Option<Spanned<String>>,
    pub language: Option<Spanned<String>>,
    pub exempt_paths: Option<Spanned<Vec<Spanned<String>>>>,
    pub under_attack: Option<bool>,
}

/// `[challenge]` as written: the keys that sign clearances and challenges, for every zone.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeysFile {
    pub keys: Spanned<Vec<Spanned<KeyFile>>>,
}

/// One key: its id (0 to 255, carried by every cookie it signs) and the file holding its secret.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeyFile {
    pub id: Spanned<i64>,
    pub secret_file: Spanned<String>,
}

/// A zone's challenge settings, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChallengeConfig {
    /// Binding and lifetimes, as the challenge crate takes them.
    pub settings: Settings,
    /// The difficulty of a rule that names none (default 4).
    pub difficulty: Difficulty,
    /// The page's language when the zone fixes one; `None` follows `Accept-Language`.
    pub language: Option<Lang>,
    /// Paths never challenged.
    pub exempt_paths: Vec<PathGlob>,
    /// "Under attack": every request no rule asked to challenge is challenged as if one had,
    /// at the zone's difficulty; verified clients, exempt paths and cleared clients still pass.
    pub under_attack: bool,
}

impl ChallengeConfig {
    /// The settings of a zone without `[zone.challenge]`: the defaults, and pay per crawl's free
    /// paths of `crawl_free` exempt with the default ones.
    fn defaults(crawl_free: &[PathGlob]) -> ChallengeConfig {
        ChallengeConfig {
            settings: Settings::default(),
            difficulty: Difficulty::DEFAULT,
            language: None,
            exempt_paths: default_exempt(crawl_free),
            under_attack: false,
        }
    }

    /// Whether `path` (without its query) is never challenged in this zone; normalised first,
    /// as rules read it, so `/%72obots.txt` is `/robots.txt`.
    pub fn is_exempt(&self, path: &str) -> bool {
        let path = crate::path::normalized_path(path);
        self.exempt_paths.iter().any(|g| g.matches(&path))
    }
}

fn default_exempt(crawl_free: &[PathGlob]) -> Vec<PathGlob> {
    DEFAULT_EXEMPT_PATHS
        .iter()
        .chain(ALWAYS_FREE_PATHS.iter())
        .map(|p| PathGlob::new(*p))
        .chain(crawl_free.iter().cloned())
        .collect()
}

/// A challenge a rule asked for, noted in the decision until its last phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChallengeNote {
    /// The rule's difficulty; `None` for the zone's.
    pub difficulty: Option<Difficulty>,
    /// The rule that asked (`None` for crawl control, which has no rule id).
    pub rule: Option<Arc<str>>,
    /// The phase that asked: `access_rules`, `custom_rules`, `crawl_control` or `rate_limits`.
    pub phase: &'static str,
    /// Why the request passes without a challenge, when it does.
    pub bypass: Option<ChallengeBypass>,
}

impl ChallengeNote {
    /// The rule's id, or the phase's name when no rule has an id: a label for logs and metrics.
    pub fn label(&self) -> &str {
        self.rule.as_deref().unwrap_or(self.phase)
    }
}

/// Why a request a rule would challenge passes without one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChallengeBypass {
    /// A verified bot or a verified signed agent, and no rule that asked names them.
    Verified,
    /// A path of the zone's `exempt_paths`.
    Exempt,
}

impl ChallengeBypass {
    /// `verified` or `exempt`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChallengeBypass::Verified => "verified",
            ChallengeBypass::Exempt => "exempt",
        }
    }
}

/// Whether the request's client is verified: a verified bot, or a verified Web Bot Auth
/// signature.
pub fn is_verified(identity: &Identity) -> bool {
    identity.signed() || identity.verified_bot().is_some()
}

/// A `difficulty` value: 0 to [`Difficulty::MAX`] leading hex zeros.
pub(crate) fn difficulty(
    d: &mut Diagnostics<'_>,
    value: Option<&Spanned<i64>>,
) -> Option<Difficulty> {
    let v = value?;
    let parsed = u8::try_from(*v.get_ref()).ok().and_then(Difficulty::new);
    if parsed.is_none() {
        d.at_with_hint(
            ProblemKind::Invalid,
            v.span(),
            format!(
                "a difficulty is 0 to {} leading hex zeros of SHA-256",
                Difficulty::MAX.get()
            ),
            Some(format!(
                "each step multiplies the work by 16; the default, {}, takes a browser about half a second",
                Difficulty::DEFAULT.get()
            )),
        );
    }
    parsed
}

/// Checks `[zone.challenge]`; the defaults when the zone has none.
pub(crate) fn compile(
    d: &mut Diagnostics<'_>,
    file: Option<&ChallengeFile>,
    crawl_free: &[PathGlob],
) -> ChallengeConfig {
    let mut config = ChallengeConfig::defaults(crawl_free);
    let Some(file) = file else { return config };
    config.under_attack = file.under_attack.unwrap_or(false);
    if let Some(level) = difficulty(d, file.difficulty.as_ref()) {
        config.difficulty = level;
    }
    let defaults = Binding::default();
    let prefix = |d: &mut Diagnostics<'_>, v: Option<&Spanned<i64>>, max: u8, default: u8| {
        let Some(v) = v else { return default };
        match u8::try_from(*v.get_ref()) {
            Ok(n) if n <= max => n,
            _ => {
                d.at(
                    ProblemKind::Invalid,
                    v.span(),
                    format!("a prefix length is 0 to {max}"),
                );
                default
            }
        }
    };
    let v4 = prefix(d, file.ipv4_prefix.as_ref(), 32, defaults.ipv4_prefix());
    let v6 = prefix(d, file.ipv6_prefix.as_ref(), 128, defaults.ipv6_prefix());
    let ua = file.bind_user_agent.unwrap_or(defaults.user_agent());
    if let Ok(binding) = Binding::new(v4, v6, ua) {
        config.settings.binding = binding;
    }
    if !ua && v4 == 0 && v6 == 0 {
        let at = file
            .ipv4_prefix
            .as_ref()
            .or(file.ipv6_prefix.as_ref())
            .map_or(0..0, |v| v.span());
        d.at(
            ProblemKind::Invalid,
            at,
            "a clearance bound to no address prefix and no User-Agent could be copied to any client; bind one of them",
        );
    }
    let s = &mut config.settings;
    s.clearance_ttl = bounded(d, file.clearance_ttl.as_ref(), s.clearance_ttl, DAY);
    s.wait_clearance_ttl = bounded(
        d,
        file.wait_clearance_ttl.as_ref(),
        s.wait_clearance_ttl,
        DAY,
    );
    s.challenge_ttl = bounded(d, file.challenge_ttl.as_ref(), s.challenge_ttl, HOUR);
    s.fallback_delay = bounded(d, file.fallback_delay.as_ref(), s.fallback_delay, MINUTE);
    if let Some(lang) = &file.language {
        match lang.get_ref().trim() {
            "negotiate" => config.language = None,
            tag => match Lang::ALL
                .into_iter()
                .find(|l| l.tag().eq_ignore_ascii_case(tag))
            {
                Some(l) => config.language = Some(l),
                None => {
                    let tags: Vec<&str> = Lang::ALL.iter().map(|l| l.tag()).collect();
                    d.at(
                        ProblemKind::Invalid,
                        lang.span(),
                        format!(
                            "`{tag}` is not a language of the challenge page; write \"negotiate\" (follow Accept-Language) or one of {}",
                            tags.join(", ")
                        ),
                    );
                }
            },
        }
    }
    if let Some(paths) = &file.exempt_paths {
        if paths.get_ref().len() > MAX_EXEMPT_PATHS {
            d.at(
                ProblemKind::Invalid,
                paths.span(),
                format!("at most {MAX_EXEMPT_PATHS} exempt_paths"),
            );
        }
        config.exempt_paths.clear();
        for p in paths.get_ref().iter().take(MAX_EXEMPT_PATHS) {
            let pattern = p.get_ref();
            let printable = pattern.bytes().all(|b| b.is_ascii_graphic());
            let starts = pattern.starts_with('/') || pattern.starts_with('*');
            if !starts || pattern.len() > MAX_PATTERN_LEN || !printable {
                d.at(
                    ProblemKind::Invalid,
                    p.span(),
                    format!(
                        "an exempt path is a path pattern starting with `/` or `*`, at most {MAX_PATTERN_LEN} printable ASCII characters, `*` for any run (e.g. \"/feed/*\")"
                    ),
                );
            } else {
                config.exempt_paths.push(PathGlob::new(pattern.clone()));
            }
        }
    }
    config
}

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// A duration above zero and at most `max`.
fn bounded(
    d: &mut Diagnostics<'_>,
    value: Option<&Spanned<String>>,
    default: Duration,
    max: Duration,
) -> Duration {
    let got = crate::units::duration(d, value, default);
    if got > max {
        if let Some(v) = value {
            d.at(
                ProblemKind::Invalid,
                v.span(),
                format!("at most {}", humantime::format_duration(max)),
            );
        }
        return default;
    }
    got
}

/// Reads `[challenge] keys`: the first signs (current), the second, when given, still verifies
/// (previous, during a rotation). A secret file holds at least 32 bytes (surrounding whitespace
/// trimmed), e.g. `openssl rand -hex 32`; its path is relative to the policy file.
pub(crate) fn load_keys(
    d: &mut Diagnostics<'_>,
    file: &KeysFile,
    base_dir: &Path,
) -> Option<KeyRing> {
    let list = file.keys.get_ref();
    if list.is_empty() || list.len() > 2 {
        d.at_with_hint(
            ProblemKind::Invalid,
            file.keys.span(),
            "list one key (the current) or two (the current, then the previous during a rotation)",
            Some("keys = [{ id = 2, secret_file = \"challenge-2.key\" }, { id = 1, secret_file = \"challenge-1.key\" }]".into()),
        );
        return None;
    }
    let mut keys = Vec::new();
    for k in list {
        let k = k.get_ref();
        let Ok(id) = u8::try_from(*k.id.get_ref()) else {
            d.at(ProblemKind::Invalid, k.id.span(), "a key id is 0 to 255");
            continue;
        };
        let path = base_dir.join(k.secret_file.get_ref());
        match read_secret(&path) {
            Ok(secret) => match Key::new(id, &secret) {
                Ok(key) => keys.push((key, k.id.span())),
                Err(why) => d.at(
                    ProblemKind::Invalid,
                    k.secret_file.span(),
                    format!("{}: {why} (e.g. `openssl rand -hex 32`)", path.display()),
                ),
            },
            Err(why) => d.at(
                ProblemKind::Read,
                k.secret_file.span(),
                format!("cannot read the challenge key {}: {why}", path.display()),
            ),
        }
    }
    if keys.len() != list.len() {
        return None;
    }
    let mut keys = keys.into_iter();
    let (current, _) = keys.next()?;
    let previous = keys.next();
    let at: Option<Range<usize>> = previous.as_ref().map(|(_, at)| at.clone());
    match KeyRing::new(current, previous.map(|(k, _)| k)) {
        Ok(ring) => Some(ring),
        Err(why) => {
            d.at(ProblemKind::Invalid, at.unwrap_or(0..0), why.to_string());
            None
        }
    }
}

fn read_secret(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_SECRET_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_SECRET_FILE {
        return Err(format!("larger than {MAX_SECRET_FILE} bytes"));
    }
    Ok(bytes.trim_ascii().to_vec())
}
