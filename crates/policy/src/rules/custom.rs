//! Phases: legal restrictions (1026) and custom (WAF) rules (1020), both written as expressions.

use std::ops::ControlFlow;
use std::sync::Arc;

use super::common::{Action, Needs, RuleIds, expression, refuse, sp};
use crate::Code;
use crate::decision::Decision;
use crate::error::{Diagnostics, ProblemKind, did_you_mean};
use crate::expr::{Cx, Filter, FilterIndex};
use crate::file::PolicyFile;
use crate::trace::{TraceStep, Tracer};

#[derive(Debug)]
pub(crate) struct CustomRule {
    id: Arc<str>,
    action: Action,
    filter: Filter,
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
    for r in &file.custom_rule {
        let r = r.get_ref();
        let id = ids.check(d, &r.id);
        let action = match r.action.get_ref().as_str() {
            "block" => Some(Action::Block),
            "allow" => Some(Action::Allow),
            "log" => Some(Action::Log),
            "challenge" => {
                needs.challenge_needed_at.get_or_insert(sp(&r.action));
                Some(Action::Challenge)
            }
            other => {
                let hint = did_you_mean(other, ["block", "allow", "log", "challenge"])
                    .map(|s| format!("did you mean \"{s}\"?"))
                    .unwrap_or_else(|| {
                        "custom rules take \"block\", \"allow\", \"log\" or \"challenge\"".into()
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
        let filter = expression(d, &r.expression, needs);
        let difficulty = crate::challenge::difficulty(d, r.difficulty.as_ref());
        if let (Some(difficulty), Some(Action::Block | Action::Allow | Action::Log)) =
            (&r.difficulty, action)
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
                difficulty,
            });
        }
    }
    custom
}

impl LegalRules {
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
            t.rule(|| expression_step(&r.id, &r.filter, cx, matched, r.action));
            if !matched {
                continue;
            }
            match r.action {
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
