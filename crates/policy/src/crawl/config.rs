//! A zone's `[zone.crawl]`, validated: the action for each crawler (by its behaviors, or by an
//! override of its name), the price, the block's status and message, the free paths.

use super::paths::{PathGlob, is_always_free};
use super::price::{MIN_ZONE_PRICE_CENTS, Price};
use crate::bots::Behaviors;

/// What the edge does with a crawler. Ordered from the least to the most restrictive, so that a
/// bot with several behaviors gets the `max` of their actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CrawlAction {
    /// Proxy as any request.
    Allow,
    /// Challenge: proxy only a client holding a clearance (the zone's `[zone.challenge]`); an
    /// agent is asked to sign instead.
    Challenge,
    /// Pay per crawl: proxy only with a signed payment intent, and charge the response.
    Charge,
    /// Refuse with the zone's `block_status` and licensing message.
    Block,
}

impl CrawlAction {
    /// The policy's word for it: `allow`, `charge` or `block`.
    pub fn as_str(self) -> &'static str {
        match self {
            CrawlAction::Allow => "allow",
            CrawlAction::Challenge => "challenge",
            CrawlAction::Charge => "charge",
            CrawlAction::Block => "block",
        }
    }
}

/// At most this many `free_paths` patterns per zone.
pub const MAX_FREE_PATHS: usize = 64;
/// At most this many per-bot overrides per zone.
pub const MAX_BOT_OVERRIDES: usize = 256;
/// A `message` may be at most this long (bytes): Cloudflare's inline limit for a custom rule's
/// response body, 2 KB.
pub const MAX_MESSAGE_LEN: usize = 2048;
pub(super) const MAX_PATTERN_LEN: usize = 256;
pub(super) const MAX_BOT_NAME_LEN: usize = 64;

/// A zone's `[zone.crawl]`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrawlConfig {
    /// The action for crawlers that build a search index.
    pub search: CrawlAction,
    /// The action for crawlers that fetch for a person at query time.
    pub agent: CrawlAction,
    /// The action for crawlers that collect training data.
    pub training: CrawlAction,
    /// The action for a request whose User-Agent claims a known bot that fails verification:
    /// allow or block (an impostor cannot pay).
    pub impostors: CrawlAction,
    /// The zone's price per charged response (the origin may set its own per page).
    pub price: Price,
    /// 402 or 403: the status of a block.
    pub block_status: u16,
    /// The operator's licensing text, the detail of a block.
    pub message: Option<String>,
    /// Paths (beyond [`ALWAYS_FREE_PATHS`](super::paths::ALWAYS_FREE_PATHS)) that are never charged: a crawler set to charge is
    /// allowed there. A block still applies.
    pub free_paths: Vec<PathGlob>,
    /// Per-bot overrides by catalog name, compared without regard to ASCII case.
    pub bots: Vec<(String, CrawlAction)>,
}

impl Default for CrawlConfig {
    fn default() -> Self {
        CrawlConfig {
            search: CrawlAction::Allow,
            agent: CrawlAction::Allow,
            training: CrawlAction::Allow,
            impostors: CrawlAction::Block,
            price: Price {
                cents: MIN_ZONE_PRICE_CENTS,
            },
            block_status: 403,
            message: None,
            free_paths: Vec::new(),
            bots: Vec::new(),
        }
    }
}

impl CrawlConfig {
    /// Whether any crawler may be challenged in this zone (so the policy needs `[challenge] keys`).
    pub fn may_challenge(&self) -> bool {
        [self.search, self.agent, self.training, self.impostors].contains(&CrawlAction::Challenge)
            || self.bots.iter().any(|(_, a)| *a == CrawlAction::Challenge)
    }

    /// The action for the known bot `name` with `behaviors`: the override that names it, else
    /// the most restrictive action of its behaviors (so blocking training also blocks a crawler
    /// that does search and training, such as Googlebot, as Cloudflare does). A bot with no
    /// known behavior is allowed.
    pub fn action_for(&self, name: &str, behaviors: Behaviors) -> CrawlAction {
        if let Some((_, action)) = self.bots.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
            return *action;
        }
        let mut action = CrawlAction::Allow;
        for (behavior, behavior_action) in [
            (Behaviors::SEARCH, self.search),
            (Behaviors::AGENT, self.agent),
            (Behaviors::TRAINING, self.training),
        ] {
            if behaviors.contains(behavior) {
                action = action.max(behavior_action);
            }
        }
        action
    }

    /// Whether `path` (the request's path, without query) is never charged in this zone: one of
    /// [`ALWAYS_FREE_PATHS`](super::paths::ALWAYS_FREE_PATHS) or a `free_paths` pattern. The path is normalised first, as rules
    /// read it, so `/%70ublic/x` is `/public/x`.
    pub fn is_free_path(&self, path: &str) -> bool {
        let path = crate::path::normalized_path(path);
        is_always_free(&path) || self.free_paths.iter().any(|g| g.matches(&path))
    }
}

impl CrawlConfig {
    /// Whether any crawler may be charged in this zone (so the policy needs a `[ledger]`).
    pub fn may_charge(&self) -> bool {
        [self.search, self.agent, self.training].contains(&CrawlAction::Charge)
            || self.bots.iter().any(|(_, a)| *a == CrawlAction::Charge)
    }
}
