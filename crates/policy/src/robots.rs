//! `[zone.robots]`: the managed robots.txt block, with the zone's content signals and the
//! `Disallow` lines that follow from its crawl policy.
//!
//! [`managed_block`] is pure: the edge serves it alone (`replace`, or an origin with no file) or
//! before the origin's own file (`prepend`).

use serde::Deserialize;
use serde_spanned::Spanned;

use crate::bots::{Behaviors, Bot};
use crate::crawl::{CrawlAction, CrawlConfig};
use crate::error::{Diagnostics, ProblemKind};

/// What the edge does with `/robots.txt` for a zone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RobotsMode {
    /// The origin's file passes through untouched (it is still read to count violations).
    #[default]
    Off,
    /// The managed block, then the origin's file (the block alone when the origin has none).
    Prepend,
    /// The managed block alone, answered by the edge.
    Replace,
}

/// One content signal: permitted, not permitted, or not expressed.
pub type Signal = Option<bool>;

/// A zone's `[zone.robots]`, validated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RobotsConfig {
    /// Off, prepend or replace.
    pub mode: RobotsMode,
    /// `search=`: building a search index and linking to the content.
    pub search: Signal,
    /// `ai-input=`: using the content as input to an AI model answering a query.
    pub ai_input: Signal,
    /// `ai-train=`: training or fine-tuning AI models.
    pub ai_train: Signal,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RobotsFile {
    pub mode: Option<Spanned<String>>,
    pub search: Option<Spanned<String>>,
    pub ai_input: Option<Spanned<String>>,
    pub ai_train: Option<Spanned<String>>,
}

fn signal(d: &mut Diagnostics<'_>, value: Option<&Spanned<String>>) -> Signal {
    let value = value?;
    match value.get_ref().as_str() {
        "yes" => Some(true),
        "no" => Some(false),
        other => {
            d.at(
                ProblemKind::Invalid,
                value.span(),
                format!(
                    "`{other}` is not a content signal; write \"yes\" or \"no\" (or leave it out)"
                ),
            );
            None
        }
    }
}

/// Checks `[zone.robots]`; the default (off, no signals) when the zone has none.
pub(crate) fn compile(d: &mut Diagnostics<'_>, file: Option<&RobotsFile>) -> RobotsConfig {
    let Some(file) = file else {
        return RobotsConfig::default();
    };
    let mode = match &file.mode {
        None => RobotsMode::Off,
        Some(m) => match m.get_ref().as_str() {
            "off" => RobotsMode::Off,
            "prepend" => RobotsMode::Prepend,
            "replace" => RobotsMode::Replace,
            other => {
                d.at(
                    ProblemKind::Invalid,
                    m.span(),
                    format!("`{other}` is not a robots.txt mode; write \"off\", \"prepend\" or \"replace\""),
                );
                RobotsMode::Off
            }
        },
    };
    RobotsConfig {
        mode,
        search: signal(d, file.search.as_ref()),
        ai_input: signal(d, file.ai_input.as_ref()),
        ai_train: signal(d, file.ai_train.as_ref()),
    }
}

/// A known crawler as the managed block needs it: its catalog name (what the crawl policy's
/// overrides name), the product token it obeys in robots.txt, and its behaviors: a view of a
/// catalog [`Bot`] (`KnownCrawler::from(&*bot)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownCrawler<'a> {
    /// The catalog name, e.g. `GPTBot`.
    pub name: &'a str,
    /// The robots.txt product token, e.g. `GPTBot` or `Google-Extended`.
    pub robots_token: &'a str,
    /// Search, agent, training.
    pub behaviors: Behaviors,
}

impl<'a> From<&'a Bot> for KnownCrawler<'a> {
    fn from(bot: &'a Bot) -> Self {
        KnownCrawler {
            name: &bot.name,
            robots_token: &bot.robots_token,
            behaviors: bot.behaviors,
        }
    }
}

/// The preamble: what the three signals mean, in this project's words.
const PREAMBLE: &str = "\
# Content signals
# The Content-Signal line below states what the operator of this site permits to be done
# with its content after it has been fetched. Each signal is yes (permitted) or no (not
# permitted); a signal that is left out expresses no preference either way.
#   search    building a search index, and showing links to the content with short
#             excerpts in search results (not summaries written by an AI model)
#   ai-input  giving the content to an AI model while it answers a question or acts for
#             someone, to ground or shape its answer (retrieval, agents)
#   ai-train  training or fine-tuning AI models on the content
# A \"no\" is an express reservation of rights, including the reservation against text and
# data mining under Article 4 of Directive (EU) 2019/790.
";

/// The `Content-Signal` value for the zone's signals, e.g. `search=yes, ai-input=yes,
/// ai-train=no`; `None` when the zone sets none.
pub fn content_signal(robots: &RobotsConfig) -> Option<String> {
    let parts: Vec<String> = [
        ("search", robots.search),
        ("ai-input", robots.ai_input),
        ("ai-train", robots.ai_train),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some(format!("{name}={}", if value? { "yes" } else { "no" })))
    .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// The managed robots.txt block of a zone: the content-signals preamble and a `User-agent: *`
/// group carrying `Content-Signal` (when the zone sets signals), then one `User-agent: <token>`
/// / `Disallow: /` group per robots token of a crawler the crawl policy blocks. Crawlers set to
/// charge are not disallowed: they may crawl, and pay. The text ends with a blank line so that
/// an origin's file prepended after it starts a group of its own.
///
/// The `User-agent: *` group carries `Allow: /`: it ends the group (a parser that reads the
/// origin's next `User-agent` line as part of it would otherwise give the origin's rules to
/// every crawler), and as the shortest possible rule it never outranks an origin's rule.
pub fn managed_block(
    robots: &RobotsConfig,
    crawl: Option<&CrawlConfig>,
    crawlers: &[KnownCrawler<'_>],
) -> String {
    let mut out = String::new();
    if let Some(signal) = content_signal(robots) {
        out.push_str(PREAMBLE);
        out.push_str("\nUser-agent: *\nContent-Signal: ");
        out.push_str(&signal);
        out.push_str("\nAllow: /\n");
    }
    if let Some(crawl) = crawl {
        let mut tokens: Vec<&str> = crawlers
            .iter()
            .filter(|c| crawl.action_for(c.name, c.behaviors) == CrawlAction::Block)
            .map(|c| c.robots_token)
            .filter(|t| is_product_token(t))
            .collect();
        tokens.sort_unstable_by_key(|t| t.to_ascii_lowercase());
        tokens.dedup_by(|a, b| a.eq_ignore_ascii_case(b));
        for token in tokens {
            out.push_str("\nUser-agent: ");
            out.push_str(token);
            out.push_str("\nDisallow: /\n");
        }
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

/// RFC 9309's product token: letters, `_` and `-`. Anything else would break the file.
fn is_product_token(token: &str) -> bool {
    !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_alphabetic() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::CompiledPolicy;

    fn zone(table: &str) -> Result<(RobotsConfig, Option<CrawlConfig>), String> {
        let text = format!(
            "[ledger]\ndir = \"ledger\"\n[[zone]]\nname = \"z\"\nhosts = [\"*\"]\norigin = \"127.0.0.1:8000\"\n{table}"
        );
        CompiledPolicy::from_toml(&text, "t.toml", Path::new("."), None)
            .map(|p| (p.zones()[0].robots.clone(), p.zones()[0].crawl.clone()))
            .map_err(|e| e.to_string())
    }

    fn crawlers() -> [KnownCrawler<'static>; 4] {
        [
            KnownCrawler {
                name: "GPTBot",
                robots_token: "GPTBot",
                behaviors: Behaviors::TRAINING,
            },
            KnownCrawler {
                name: "Googlebot",
                robots_token: "Googlebot",
                behaviors: Behaviors::SEARCH | Behaviors::TRAINING,
            },
            KnownCrawler {
                name: "ChatGPT-User",
                robots_token: "ChatGPT-User",
                behaviors: Behaviors::AGENT,
            },
            KnownCrawler {
                name: "Bingbot",
                robots_token: "bingbot",
                behaviors: Behaviors::SEARCH,
            },
        ]
    }

    #[test]
    fn managed_block_signals_and_disallows() {
        let (robots, crawl) = zone(
            "[zone.robots]\nmode = \"prepend\"\nsearch = \"yes\"\nai_input = \"yes\"\nai_train = \"no\"\n[zone.crawl]\ntraining = \"block\"\n[zone.crawl.bots]\n\"Googlebot\" = \"allow\"\n",
        )
        .unwrap();
        assert_eq!(robots.mode, RobotsMode::Prepend);
        let block = managed_block(&robots, crawl.as_ref(), &crawlers());
        assert!(block.starts_with("# Content signals\n"), "{block}");
        assert!(
            block
                .lines()
                .all(|l| l.is_empty() || l.starts_with('#') || l.contains(": ")),
            "{block}"
        );
        let tail = &block[block.find("\nUser-agent: *").unwrap()..];
        assert_eq!(
            tail,
            "\nUser-agent: *\nContent-Signal: search=yes, ai-input=yes, ai-train=no\nAllow: /\n\nUser-agent: GPTBot\nDisallow: /\n\n"
        );
    }

    #[test]
    fn training_blocked_blocks_multi_purpose_crawlers_and_charge_is_not_disallowed() {
        let (robots, crawl) =
            zone("[zone.robots]\nmode = \"replace\"\n[zone.crawl]\ntraining = \"block\"\nagent = \"charge\"\n").unwrap();
        assert_eq!(content_signal(&robots), None);
        let block = managed_block(&robots, crawl.as_ref(), &crawlers());
        assert_eq!(
            block,
            "\nUser-agent: Googlebot\nDisallow: /\n\nUser-agent: GPTBot\nDisallow: /\n\n"
        );
        // Nothing to say: an empty block.
        assert_eq!(
            managed_block(&RobotsConfig::default(), None, &crawlers()),
            ""
        );
        // A token that would break the file is left out.
        let odd = [KnownCrawler {
            name: "X",
            robots_token: "X\nDisallow: /",
            behaviors: Behaviors::TRAINING,
        }];
        assert_eq!(managed_block(&robots, crawl.as_ref(), &odd), "");
    }

    #[test]
    fn only_set_signals_are_written() {
        let (robots, _) = zone("[zone.robots]\nai_train = \"no\"\n").unwrap();
        assert_eq!(robots.mode, RobotsMode::Off);
        assert_eq!(content_signal(&robots).as_deref(), Some("ai-train=no"));
    }

    #[test]
    fn bad_values_are_located() {
        for (table, needle) in [
            ("mode = \"merge\"", "not a robots.txt mode"),
            ("ai_train = \"false\"", "not a content signal"),
            ("ai_training = \"no\"", "unknown key"),
        ] {
            let e = zone(&format!("[zone.robots]\n{table}\n")).unwrap_err();
            assert!(
                e.contains("t.toml:8:") && e.contains(needle),
                "{table}: {e}"
            );
        }
    }
}
