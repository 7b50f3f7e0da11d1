//! Phases: legal restrictions (1026) and custom (WAF) rules (1020), both written as expressions.

use std::ops::ControlFlow;
use std::sync::Arc;

use super::common::{Action, Needs, RuleIds, expression, refuse, sp};
use crate::Code;
use crate::decision::Decision;
use crate::error::{Diagnostics, ProblemKind, did_you_mean};
use crate::expr::{Cx, Filter, FilterIndex};
use crate::file::PolicyFile;
use crate::policy::Divert;
use crate::trace::{TraceStep, Tracer};

#[derive(Debug)]
pub(crate) struct CustomRule {
    id: Arc<str>,
    action: Action,
    filter: Filter,
    /// For `divert`: the name of the zone's `[[zone.divert]]` it sends requests to.
    divert: Option<Arc<str>>,
    /// For `challenge`: the rule's difficulty (`None`: the zone's).
    difficulty: Option<signpost_challenge::Difficulty>,
}

/// The custom rules in file order, with an index of which can match a request.
#[derive(Debug, Default)]
pub(crate) struct CustomRules {
    rules: Vec<CustomRule>,
    /// Which rules can match a request, so that the others are not evaluated.
    index: FilterIndex,
}

/// `[[legal_rule]]` entries: any match refuses with 1026.
#[derive(Debug, Default)]
pub(crate) struct LegalRules(pub(super) Vec<(Arc<str>, Filter)>);

/// Checks `[[legal_rule]]` entries.
pub(super) fn validate_legal(
    file: &PolicyFile,
    d: &mut Diagnostics<'_>,
    ids: &mut RuleIds,
    needs: &mut Needs,
) -> LegalRules {
    let mut legal = LegalRules::default();
    for r in &file.legal_rule {
        let r = r.get_ref();
        let id = ids.check(d, &r.id);
        if let Some(f) = expression(d, &r.expression, needs) {
            legal.0.push((id, f));
        }
    }
    legal
}

/// Checks `[[custom_rule]]` entries.
pub(super) fn validate_custom(
    file: &PolicyFile,
    d: &mut Diagnostics<'_>,
    ids: &mut RuleIds,
    needs: &mut Needs,
) -> Vec<CustomRule> {
    let mut custom = Vec::new();
    // Every divert a zone declares: a rule may name any of them (a zone without it is not
    // diverted, see `CustomRules::check`).
    let declared: Vec<&str> = file
        .zone
        .iter()
        .flat_map(|z| z.get_ref().divert.iter())
        .map(|v| v.get_ref().name.get_ref().trim())
        .collect();
    for r in &file.custom_rule {
        let r = r.get_ref();
        let id = ids.check(d, &r.id);
        let action = match r.action.get_ref().as_str() {
            "block" => Some(Action::Block),
            "allow" => Some(Action::Allow),
            "log" => Some(Action::Log),
            "divert" => Some(Action::Divert),
            "challenge" => {
                needs.challenge_needed_at.get_or_insert(sp(&r.action));
                Some(Action::Challenge)
            }
            other => {
                let hint = did_you_mean(other, ["block", "allow", "log", "divert", "challenge"])
                    .map(|s| format!("did you mean \"{s}\"?"))
                    .unwrap_or_else(|| {
                        "custom rules take \"block\", \"allow\", \"log\", \"divert\" or \"challenge\"".into()
                    });
                d.at_with_hint(
                    ProblemKind::Invalid,
                    sp(&r.action),
                    format!("unknown action `{other}`"),
                    Some(hint),
                );
                None
            }
        };
        let divert = divert_name(d, r, action, &declared);
        let filter = expression(d, &r.expression, needs);
        let difficulty = crate::challenge::difficulty(d, r.difficulty.as_ref());
        if let (
            Some(difficulty),
            Some(Action::Block | Action::Allow | Action::Log | Action::Divert),
        ) = (&r.difficulty, action)
        {
            d.at(
                ProblemKind::Invalid,
                sp(difficulty),
                "only a rule with action = \"challenge\" takes a difficulty",
            );
        }
        if let (Some(action), Some(filter)) = (action, filter) {
            custom.push(CustomRule {
                id,
                action,
                filter,
                divert,
                difficulty,
            });
        }
    }
    custom
}

/// The divert a rule names: required with `action = "divert"`, refused with any other action,
/// and declared by at least one zone.
fn divert_name(
    d: &mut Diagnostics<'_>,
    r: &crate::file::CustomRuleFile,
    action: Option<Action>,
    declared: &[&str],
) -> Option<Arc<str>> {
    match (&r.divert, action) {
        (None, Some(Action::Divert)) => {
            d.at_with_hint(
                ProblemKind::Invalid,
                sp(&r.action),
                "a divert rule names where it sends requests",
                Some("add `divert = \"maze\"`, the name of a `[[zone.divert]]`".into()),
            );
            None
        }
        (Some(name), Some(Action::Divert)) => {
            let v = name.get_ref().trim();
            if declared.contains(&v) {
                Some(Arc::from(v))
            } else {
                let hint = did_you_mean(v, declared.iter().copied())
                    .map(|s| format!("did you mean \"{s}\"?"))
                    .unwrap_or_else(|| {
                        "declare it in the zones it serves: `[[zone.divert]]` with `name` and `origin`"
                            .into()
                    });
                d.at_with_hint(
                    ProblemKind::Invalid,
                    sp(name),
                    format!("no zone declares a divert named `{v}`"),
                    Some(hint),
                );
                None
            }
        }
        (Some(name), Some(_)) => {
            d.at(
                ProblemKind::Invalid,
                sp(name),
                "`divert` goes with `action = \"divert\"` only",
            );
            None
        }
        // An unknown action is reported already.
        (None, _) | (Some(_), None) => None,
    }
}

impl LegalRules {
    /// The legal rules' ids, in file order.
    pub(super) fn ids(&self) -> impl Iterator<Item = &Arc<str>> {
        self.0.iter().map(|(id, _)| id)
    }

    pub(crate) fn check<T: Tracer>(
        &self,
        cx: &Cx<'_>,
        decision: &mut Decision,
        t: &mut T,
    ) -> ControlFlow<()> {
        for (id, f) in &self.0 {
            let matched = f.matches(cx);
            t.rule(|| expression_step(id, f, cx, matched, Action::Block));
            if matched {
                return refuse(decision, Code::LEGAL_BLOCK, Some(id.clone()));
            }
        }
        ControlFlow::Continue(())
    }
}

/// An expression rule as a trace step: its text, the fields it read and their values.
fn expression_step(id: &str, f: &Filter, cx: &Cx<'_>, matched: bool, action: Action) -> TraceStep {
    let description = if matched {
        "the expression matches"
    } else {
        "the expression does not match"
    };
    TraceStep::rule(id, matched, description)
        .action(action.as_str())
        .filter(f, cx)
}

impl CustomRules {
    /// Each custom rule's id and action, in file order.
    pub(super) fn rules(&self) -> impl Iterator<Item = (&Arc<str>, Action)> {
        self.rules.iter().map(|r| (&r.id, r.action))
    }

    pub(crate) fn new(rules: Vec<CustomRule>) -> CustomRules {
        CustomRules {
            index: FilterIndex::new(rules.iter().map(|r| &r.filter)),
            rules,
        }
    }

    /// First match in file order: `block` refuses, `allow` ends the custom rules *and* skips the
    /// rate limits (a break with no refusal), `log` notes the rule and goes on. The index only
    /// leaves out rules that cannot match, and yields the others in file order.
    pub(crate) fn check<T: Tracer>(
        &self,
        cx: &Cx<'_>,
        diverts: &[Divert],
        decision: &mut Decision,
        t: &mut T,
    ) -> ControlFlow<()> {
        if self.rules.is_empty() {
            return ControlFlow::Continue(());
        }
        // The next rule in file order a trace has not shown yet: those the index leaves out
        // are shown as such, in their place.
        let mut shown = 0;
        for i in self.index.candidates(cx) {
            let r = &self.rules[i];
            if T::RECORDS {
                self.record_left_out(t, cx, shown..i);
                shown = i + 1;
            }
            let matched = r.filter.matches(cx);
            // A divert this zone does not declare: the rule does not apply here.
            let divert = r
                .divert
                .as_ref()
                .map(|name| (name, diverts.iter().position(|v| v.name == *name)));
            t.rule(|| {
                let step = expression_step(&r.id, &r.filter, cx, matched, r.action);
                match divert {
                    Some((name, Some(i))) => step
                        .param("divert", name)
                        .param("origin", diverts[i].origin.to_string()),
                    Some((name, None)) => TraceStep {
                        description: format!(
                            "this zone declares no divert `{name}`: the rule does not apply here"
                        ),
                        matched: false,
                        ..step
                    },
                    None => step,
                }
            });
            if !matched {
                continue;
            }
            match r.action {
                Action::Divert => {
                    let Some((_, Some(i))) = divert else {
                        continue;
                    };
                    decision.divert = Some(i);
                    decision.rule_id = Some(r.id.clone());
                    return ControlFlow::Break(());
                }
                Action::Log => decision.logged.push(r.id.clone()),
                Action::Block => {
                    return refuse(decision, Code::FIREWALL_RULE_BLOCKED, Some(r.id.clone()));
                }
                Action::Allow => {
                    decision.rule_id = Some(r.id.clone());
                    return ControlFlow::Break(());
                }
                // The first match: the custom rules end, the later phases still run.
                Action::Challenge => {
                    decision.note_challenge(
                        &cx.identity,
                        r.difficulty,
                        Some(r.id.clone()),
                        "custom_rules",
                        r.filter.needs_identity,
                    );
                    return ControlFlow::Continue(());
                }
            }
        }
        if T::RECORDS {
            self.record_left_out(t, cx, shown..self.rules.len());
        }
        ControlFlow::Continue(())
    }

    /// Records the rules in `range` as left out by the index: none of them can match.
    fn record_left_out<T: Tracer>(&self, t: &mut T, cx: &Cx<'_>, range: std::ops::Range<usize>) {
        for r in self.rules.get(range).unwrap_or_default() {
            t.rule(|| TraceStep {
                description: "cannot match this request: the rule index left it out unevaluated"
                    .into(),
                ..expression_step(&r.id, &r.filter, cx, false, r.action)
            });
        }
    }
}
