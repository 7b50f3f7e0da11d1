//! Phase: IP access rules. Allow or block by address (1006), AS number (1005) or country (1009),
//! or challenge by any of them.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use super::common::{Action, Needs, RuleIds, refuse, sp};
use crate::Code;
use crate::decision::Decision;
use crate::error::{Diagnostics, ProblemKind};
use crate::expr::Cx;
use crate::file::PolicyFile;
use crate::geo::{Country, country_code};
use crate::ipset::{IpTable, parse_net};
use crate::trace::{TraceStep, Tracer};

/// Access rules folded into lookup tables; values index `ids`.
#[derive(Debug, Default)]
pub(crate) struct AccessTables {
    ids: Vec<Arc<str>>,
    /// Per rule (as `ids`): its action and an expression equivalent to it, for traces.
    about: Vec<(Action, Box<str>)>,
    allow_ip: IpTable<usize>,
    allow_asn: HashMap<u32, usize>,
    allow_country: HashMap<Country, usize>,
    block_ip: IpTable<usize>,
    block_asn: HashMap<u32, usize>,
    block_country: HashMap<Country, usize>,
    challenge_ip: IpTable<usize>,
    challenge_asn: HashMap<u32, usize>,
    challenge_country: HashMap<Country, usize>,
    /// Per rule (as `ids`): a challenge rule's difficulty (`None`: the zone's).
    difficulty: Vec<Option<signpost_challenge::Difficulty>>,
}

/// Checks `[[access_rule]]` entries into lookup tables.
pub(super) fn validate(
    file: &PolicyFile,
    d: &mut Diagnostics<'_>,
    ids: &mut RuleIds,
    needs: &mut Needs,
) -> AccessTables {
    let mut tables = AccessTables::default();
    for r in &file.access_rule {
        let r = r.get_ref();
        let id = ids.check(d, &r.id);
        let action = match r.action.get_ref().as_str() {
            "allow" => Action::Allow,
            "block" => Action::Block,
            "challenge" => {
                needs.challenge_needed_at.get_or_insert(sp(&r.action));
                Action::Challenge
            }
            other => {
                d.at_with_hint(
                    ProblemKind::Invalid,
                    sp(&r.action),
                    format!("unknown access action `{other}`"),
                    Some("access rules take \"block\", \"allow\" or \"challenge\"".into()),
                );
                continue;
            }
        };
        let difficulty = crate::challenge::difficulty(d, r.difficulty.as_ref());
        if let (Some(at), false) = (&r.difficulty, action == Action::Challenge) {
            d.at(
                ProblemKind::Invalid,
                sp(at),
                "only a rule with action = \"challenge\" takes a difficulty",
            );
        }
        let t = &mut tables;
        let idx = t.ids.len();
        t.ids.push(id);
        t.difficulty.push(difficulty);
        t.about.push((action, equivalent_expression(r)));
        let given = [r.ip.is_some(), r.asn.is_some(), r.country.is_some()];
        if given.iter().filter(|g| **g).count() != 1 {
            d.at(
                ProblemKind::Invalid,
                sp(&r.id),
                "an access rule needs exactly one of `ip`, `asn` or `country`",
            );
            continue;
        }
        if let Some(ips) = &r.ip {
            let table = match action {
                Action::Allow => &mut t.allow_ip,
                Action::Challenge => &mut t.challenge_ip,
                _ => &mut t.block_ip,
            };
            for s in ips.get_ref() {
                match parse_net(s.get_ref()) {
                    Ok(net) => table.insert(net, idx),
                    Err(why) => d.at(ProblemKind::Invalid, sp(s), why),
                }
            }
        }
        if let Some(asns) = &r.asn {
            needs.asn_needed_at.get_or_insert(sp(asns));
            let map = match action {
                Action::Allow => &mut t.allow_asn,
                Action::Challenge => &mut t.challenge_asn,
                _ => &mut t.block_asn,
            };
            for n in asns.get_ref() {
                match u32::try_from(*n.get_ref()) {
                    Ok(asn) => {
                        map.entry(asn).or_insert(idx);
                    }
                    Err(_) => d.at(
                        ProblemKind::Invalid,
                        sp(n),
                        "an AS number is between 0 and 4294967295",
                    ),
                }
            }
        }
        if let Some(cs) = &r.country {
            needs.country_needed_at.get_or_insert(sp(cs));
            let map = match action {
                Action::Allow => &mut t.allow_country,
                Action::Challenge => &mut t.challenge_country,
                _ => &mut t.block_country,
            };
            for c in cs.get_ref() {
                match valid_country(c.get_ref()) {
                    Some(code) => {
                        map.entry(code).or_insert(idx);
                    }
                    None => d.at(
                        ProblemKind::Invalid,
                        sp(c),
                        format!(
                            "`{}` is not an ISO 3166-1 alpha-2 country code",
                            c.get_ref()
                        ),
                    ),
                }
            }
        }
    }
    tables
}

/// The Rules-language expression an access rule amounts to, its list cut short after a few
/// entries (a rule may list thousands of networks).
fn equivalent_expression(r: &crate::file::AccessRuleFile) -> Box<str> {
    const SHOWN: usize = 8;
    fn list(field: &str, items: impl ExactSizeIterator<Item = String>) -> Box<str> {
        let total = items.len();
        let mut shown: Vec<String> = items.take(SHOWN).collect();
        if total > SHOWN {
            shown.push(format!("... {} more", total - SHOWN));
        }
        format!("{field} in {{{}}}", shown.join(" ")).into()
    }
    if let Some(ips) = &r.ip {
        list("ip.src", ips.get_ref().iter().map(|s| s.get_ref().clone()))
    } else if let Some(asns) = &r.asn {
        list(
            "ip.src.asnum",
            asns.get_ref().iter().map(|n| n.get_ref().to_string()),
        )
    } else if let Some(cs) = &r.country {
        list(
            "ip.src.country",
            cs.get_ref().iter().map(|c| format!("{:?}", c.get_ref())),
        )
    } else {
        Box::default()
    }
}

fn valid_country(s: &str) -> Option<Country> {
    let code = country_code(s.trim())?;
    // Reject codes no database uses: only upper-case input letters matter, and "XX"/"T1" style
    // placeholders are not ISO 3166-1.
    crate::iso::is_assigned(code).then_some(code)
}

/// Whether an `allow` rule vouched for the client: it then skips the access blocks, the browser
/// check and the custom rules (never hotlink, legal or rate limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trust {
    Allowed,
    Unknown,
}

impl AccessTables {
    /// Each access rule's id and action, in file order.
    pub(super) fn rules(&self) -> impl Iterator<Item = (&Arc<str>, Action)> {
        self.ids
            .iter()
            .zip(self.about.iter().map(|(action, _)| *action))
    }

    /// The phase's step in a trace: the values the access rules look up.
    pub(crate) fn phase_step(&self, cx: &Cx<'_>) -> TraceStep {
        let step = TraceStep::phase(
            "access_rules",
            "allow rules first (a match vouches for the client), then blocks by IP (1006), AS number (1005), country (1009), then challenges",
        );
        if self.ids.is_empty() {
            return TraceStep {
                description: "no access rules".into(),
                ..step
            };
        }
        step.field("ip.src", cx.client_ip.to_string())
            .field(
                "ip.src.asnum",
                cx.asn().map_or_else(String::new, |n| n.to_string()),
            )
            .field(
                "ip.src.country",
                cx.country()
                    .and_then(|c| std::str::from_utf8(&c).ok().map(str::to_owned))
                    .unwrap_or_default(),
            )
    }

    /// Allow rules first (any match vouches for the client), then blocks by IP, ASN, country.
    pub(crate) fn check<T: Tracer>(
        &self,
        cx: &Cx<'_>,
        decision: &mut Decision,
        t: &mut T,
    ) -> ControlFlow<(), Trust> {
        if self.ids.is_empty() {
            return ControlFlow::Continue(Trust::Unknown);
        }
        let allowed = self
            .allow_ip
            .lookup(cx.client_ip)
            .copied()
            .or_else(|| lookup_num(&self.allow_asn, || cx.asn()))
            .or_else(|| lookup_country(&self.allow_country, || cx.country()));
        if let Some(i) = allowed {
            self.record(t, Some(i), Some(Action::Allow));
            decision.rule_id = self.ids.get(i).cloned();
            return ControlFlow::Continue(Trust::Allowed);
        }
        let blocked = self
            .block_ip
            .lookup(cx.client_ip)
            .map(|i| (*i, Code::IP_BANNED))
            .or_else(|| lookup_num(&self.block_asn, || cx.asn()).map(|i| (i, Code::ASN_BANNED)))
            .or_else(|| {
                lookup_country(&self.block_country, || cx.country())
                    .map(|i| (i, Code::COUNTRY_BANNED))
            });
        match blocked {
            Some((i, code)) => {
                self.record(t, Some(i), None);
                refuse(decision, code, self.ids.get(i).cloned())
            }
            None => {
                self.challenge(cx, decision, t);
                ControlFlow::Continue(Trust::Unknown)
            }
        }
    }

    /// Challenge rules, after the blocks: the first that lists the client notes a challenge.
    fn challenge<T: Tracer>(&self, cx: &Cx<'_>, decision: &mut Decision, t: &mut T) {
        let listed = self
            .challenge_ip
            .lookup(cx.client_ip)
            .copied()
            .or_else(|| lookup_num(&self.challenge_asn, || cx.asn()))
            .or_else(|| lookup_country(&self.challenge_country, || cx.country()));
        self.record(t, listed, None);
        if let Some(i) = listed {
            // A list of addresses, networks or countries never names verified clients.
            decision.note_challenge(
                &cx.identity,
                self.difficulty.get(i).copied().flatten(),
                self.ids.get(i).cloned(),
                "access_rules",
                false,
            );
        }
    }

    /// Records the rules considered, in file order (the tables answer for all of them at once):
    /// those with action `only` when given, `matched` the one that listed the client.
    fn record<T: Tracer>(&self, t: &mut T, matched: Option<usize>, only: Option<Action>) {
        if !T::RECORDS {
            return;
        }
        for (i, (action, expression)) in self.about.iter().enumerate() {
            if only.is_some_and(|only| only != *action) {
                continue;
            }
            let id = self.ids.get(i).map_or("", |id| &**id);
            let hit = matched == Some(i);
            let description = match (hit, action) {
                (true, Action::Allow) => "lists the client: it is vouched for",
                (true, _) => "lists the client",
                (false, _) => "does not list the client",
            };
            t.rule(|| TraceStep {
                expression: Some(expression.to_string()),
                ..TraceStep::rule(id, hit, description).action(action.as_str())
            });
        }
    }
}

fn lookup_num(map: &HashMap<u32, usize>, get: impl FnOnce() -> Option<u32>) -> Option<usize> {
    if map.is_empty() {
        return None;
    }
    map.get(&get()?).copied()
}

fn lookup_country(
    map: &HashMap<Country, usize>,
    get: impl FnOnce() -> Option<Country>,
) -> Option<usize> {
    if map.is_empty() {
        return None;
    }
    map.get(&get()?).copied()
}
