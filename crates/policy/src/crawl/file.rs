//! `[zone.crawl]` as the policy file writes it, checked into a [`CrawlConfig`] with every
//! problem at its `file:line:col`.

use serde::Deserialize;
use serde_spanned::Spanned;

use super::config::{
    CrawlAction, CrawlConfig, MAX_BOT_NAME_LEN, MAX_BOT_OVERRIDES, MAX_FREE_PATHS, MAX_MESSAGE_LEN,
    MAX_PATTERN_LEN,
};
use super::paths::PathGlob;
use super::price::{MIN_ZONE_PRICE_CENTS, Price};
use crate::error::{Diagnostics, ProblemKind};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CrawlFile {
    pub search: Option<Spanned<String>>,
    pub agent: Option<Spanned<String>>,
    pub training: Option<Spanned<String>>,
    pub impostors: Option<Spanned<String>>,
    pub price: Option<Spanned<String>>,
    pub block_status: Option<Spanned<i64>>,
    pub message: Option<Spanned<String>>,
    pub free_paths: Option<Spanned<Vec<Spanned<String>>>>,
    pub bots: Option<Spanned<std::collections::BTreeMap<String, Spanned<String>>>>,
}

fn action(
    d: &mut Diagnostics<'_>,
    value: Option<&Spanned<String>>,
    default: CrawlAction,
) -> CrawlAction {
    let Some(value) = value else { return default };
    match value.get_ref().as_str() {
        "allow" => CrawlAction::Allow,
        "charge" => CrawlAction::Charge,
        "block" => CrawlAction::Block,
        "challenge" => CrawlAction::Challenge,
        other => {
            d.at(
                ProblemKind::Invalid,
                value.span(),
                format!(
                    "`{other}` is not a crawl action; write \"allow\", \"block\", \"charge\" or \"challenge\""
                ),
            );
            default
        }
    }
}

/// Checks `[zone.crawl]`; `None` when the zone has none (crawl control off).
pub(crate) fn compile(d: &mut Diagnostics<'_>, file: Option<&CrawlFile>) -> Option<CrawlConfig> {
    let file = file?;
    let defaults = CrawlConfig::default();
    let mut config = CrawlConfig {
        search: action(d, file.search.as_ref(), defaults.search),
        agent: action(d, file.agent.as_ref(), defaults.agent),
        training: action(d, file.training.as_ref(), defaults.training),
        impostors: action(d, file.impostors.as_ref(), defaults.impostors),
        ..defaults
    };
    if let Some(impostors) = &file.impostors
        && config.impostors == CrawlAction::Charge
    {
        d.at(
            ProblemKind::Invalid,
            impostors.span(),
            "impostors cannot be charged (a request that fails verification cannot pay); write \"allow\", \"block\" or \"challenge\"",
        );
    }
    if let Some(price) = &file.price {
        match Price::parse(price.get_ref().as_bytes()) {
            Some(p) if p.cents >= MIN_ZONE_PRICE_CENTS => config.price = p,
            Some(_) => d.at(ProblemKind::Invalid, price.span(), "the price must be at least USD 0.01"),
            None => d.at(
                ProblemKind::Invalid,
                price.span(),
                format!(
                    "`{}` is not a price; write e.g. \"USD 0.01\" (USD, a space, at most two decimals, at most USD 1000000.00)",
                    price.get_ref()
                ),
            ),
        }
    }
    if let Some(status) = &file.block_status {
        match *status.get_ref() {
            402 => config.block_status = 402,
            403 => config.block_status = 403,
            _ => d.at(
                ProblemKind::Invalid,
                status.span(),
                "block_status must be 402 or 403",
            ),
        }
    }
    if let Some(message) = &file.message {
        let text = message.get_ref();
        if text.trim().is_empty() || text.len() > MAX_MESSAGE_LEN {
            d.at(
                ProblemKind::Invalid,
                message.span(),
                format!("message must be 1 to {MAX_MESSAGE_LEN} bytes of text"),
            );
        } else {
            config.message = Some(text.clone());
        }
    }
    if let Some(paths) = &file.free_paths {
        if paths.get_ref().len() > MAX_FREE_PATHS {
            d.at(
                ProblemKind::Invalid,
                paths.span(),
                format!("at most {MAX_FREE_PATHS} free_paths"),
            );
        }
        for p in paths.get_ref().iter().take(MAX_FREE_PATHS) {
            let pattern = p.get_ref();
            let printable = pattern.bytes().all(|b| b.is_ascii_graphic());
            if !pattern.starts_with('/') || pattern.len() > MAX_PATTERN_LEN || !printable {
                d.at(
                    ProblemKind::Invalid,
                    p.span(),
                    format!(
                        "a free path is a path pattern starting with `/`, at most {MAX_PATTERN_LEN} printable ASCII characters, `*` for any run (e.g. \"/public/*\")"
                    ),
                );
            } else {
                config.free_paths.push(PathGlob {
                    pattern: pattern.clone(),
                });
            }
        }
    }
    if let Some(bots) = &file.bots {
        if bots.get_ref().len() > MAX_BOT_OVERRIDES {
            d.at(
                ProblemKind::Invalid,
                bots.span(),
                format!("at most {MAX_BOT_OVERRIDES} bot overrides"),
            );
        }
        for (name, value) in bots.get_ref().iter().take(MAX_BOT_OVERRIDES) {
            let valid_name = !name.is_empty()
                && name.len() <= MAX_BOT_NAME_LEN
                && name.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
            if !valid_name {
                d.at(
                    ProblemKind::Invalid,
                    value.span(),
                    format!("a bot name is 1 to {MAX_BOT_NAME_LEN} printable ASCII characters"),
                );
                continue;
            }
            if config
                .bots
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(name))
            {
                d.at(
                    ProblemKind::Invalid,
                    value.span(),
                    format!("bot `{name}` is listed twice (names ignore case)"),
                );
                continue;
            }
            let a = action(d, Some(value), CrawlAction::Allow);
            config.bots.push((name.clone(), a));
        }
    }
    Some(config)
}

/// Reports the `[zone.crawl] bots` overrides that name no bot of the catalog (the shipped one
/// with the policy's `[[bot]]` changes): a typo would otherwise silently never apply.
pub(crate) fn check_bot_names(
    d: &mut Diagnostics<'_>,
    file: &CrawlFile,
    catalog: &crate::BotCatalog,
) {
    let Some(bots) = &file.bots else { return };
    for (name, value) in bots.get_ref() {
        if !catalog
            .bots()
            .iter()
            .any(|b| b.name.eq_ignore_ascii_case(name))
        {
            d.at(
                ProblemKind::Invalid,
                value.span(),
                format!("no known bot is named `{name}`; the names are those of the shipped bot catalog and of the policy's [[bot]] entries"),
            );
        }
    }
}

/// The first `"charge"` of a zone's `[zone.crawl]`, where a missing `[ledger]` is reported.
pub(crate) fn first_charge(file: &CrawlFile) -> Option<std::ops::Range<usize>> {
    let is_charge = |v: &&Spanned<String>| v.get_ref() == "charge";
    [&file.search, &file.agent, &file.training]
        .into_iter()
        .flatten()
        .find(is_charge)
        .or_else(|| file.bots.as_ref()?.get_ref().values().find(is_charge))
        .map(|v| v.span())
}
