//! Phase: browser signature (1010). An empty or listed User-Agent is refused.

use std::ops::ControlFlow;
use std::sync::Arc;

use regex::RegexSet;

use super::common::{RuleIds, refuse, sp};
use crate::Code;
use crate::decision::Decision;
use crate::error::{Diagnostics, ProblemKind};
use crate::expr::{self, Cx};
use crate::file::PolicyFile;
use crate::trace::{TraceStep, Tracer};

/// Most patterns in `block_user_agents`, and most characters in one.
const MAX_PATTERN_LEN: usize = 4096;

#[derive(Debug)]
pub(crate) struct BrowserCheck {
    id: Arc<str>,
    block_empty: bool,
    agents: Option<RegexSet>,
}

/// Checks `[browser_check]`.
pub(super) fn validate(
    file: &PolicyFile,
    d: &mut Diagnostics<'_>,
    ids: &mut RuleIds,
) -> Option<BrowserCheck> {
    if let Some(b) = &file.browser_check {
        let b = b.get_ref();
        let id = match &b.id {
            Some(id) => ids.check(d, id),
            None => Arc::from("browser-check"),
        };
        let mut ok = true;
        for p in &b.block_user_agents {
            if let Err(why) = build_regex(p.get_ref()) {
                d.at(ProblemKind::Invalid, sp(p), why);
                ok = false;
            }
        }
        let agents = if ok && !b.block_user_agents.is_empty() {
            regex::RegexSetBuilder::new(b.block_user_agents.iter().map(|p| p.get_ref().as_str()))
                .size_limit(expr::MAX_REGEX_SIZE * 4)
                .build()
                .map_err(|e| {
                    if let Some(first) = b.block_user_agents.first() {
                        d.at(
                            ProblemKind::Invalid,
                            sp(first),
                            format!("user-agent patterns too large: {e}"),
                        );
                    }
                })
                .ok()
        } else {
            None
        };
        return Some(BrowserCheck {
            id,
            block_empty: b.block_empty_user_agent.unwrap_or(true),
            agents,
        });
    }
    None
}

fn build_regex(p: &str) -> Result<regex::Regex, String> {
    if p.len() > MAX_PATTERN_LEN {
        return Err(format!("pattern is longer than {MAX_PATTERN_LEN} bytes"));
    }
    regex::RegexBuilder::new(p)
        .size_limit(expr::MAX_REGEX_SIZE)
        .nest_limit(64)
        .build()
        .map_err(|e| {
            let s = e.to_string();
            format!("invalid regular expression: {}", expr::regex_reason(&s))
        })
}

impl BrowserCheck {
    /// The check's rule id (`browser-check` unless the policy names it).
    pub(super) fn id(&self) -> &Arc<str> {
        &self.id
    }

    pub(crate) fn check<T: Tracer>(
        &self,
        cx: &Cx<'_>,
        decision: &mut Decision,
        t: &mut T,
    ) -> ControlFlow<()> {
        let ua = cx.header(http::header::USER_AGENT);
        let bad = if ua.trim().is_empty() {
            self.block_empty
        } else {
            self.agents.as_ref().is_some_and(|set| set.is_match(&ua))
        };
        t.rule(|| self.step(&ua, bad));
        if bad {
            return refuse(
                decision,
                Code::BROWSER_SIGNATURE_BANNED,
                Some(self.id.clone()),
            );
        }
        ControlFlow::Continue(())
    }

    /// The check as a trace step: which pattern matched, or why none did.
    fn step(&self, ua: &str, bad: bool) -> TraceStep {
        let patterns = self.agents.as_ref().map_or(&[][..], |set| set.patterns());
        let description = if ua.trim().is_empty() {
            if self.block_empty {
                "the User-Agent is empty, and block_empty_user_agent is on".to_owned()
            } else {
                "the User-Agent is empty, and block_empty_user_agent is off".to_owned()
            }
        } else {
            let matched: Vec<&str> = self
                .agents
                .as_ref()
                .map(|set| {
                    set.matches(ua)
                        .iter()
                        .filter_map(|i| patterns.get(i))
                        .map(String::as_str)
                        .collect()
                })
                .unwrap_or_default();
            if matched.is_empty() {
                format!(
                    "no block_user_agents pattern matches ({} listed)",
                    patterns.len()
                )
            } else {
                format!(
                    "matches block_user_agents pattern(s): {}",
                    matched.join(", ")
                )
            }
        };
        let expression = patterns
            .iter()
            .map(|p| format!("http.user_agent matches {p:?}"))
            .chain(
                self.block_empty
                    .then(|| "http.user_agent eq \"\"".to_owned()),
            )
            .collect::<Vec<_>>()
            .join(" or ");
        TraceStep {
            expression: Some(expression),
            ..TraceStep::rule(&self.id, bad, description)
                .action("block")
                .field("http.user_agent", ua)
        }
    }
}
