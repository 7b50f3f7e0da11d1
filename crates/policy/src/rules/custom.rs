//! Phases: legal restrictions (1026) and custom (WAF) rules (1020), both written as expressions.

use std::ops::ControlFlow;
use std::sync::Arc;

use super::{Action, RuleIds, RulesSpec, expression, refuse, sp};
use crate::Code;
use crate::decision::Decision;
use crate::error::{Diagnostics, ProblemKind, did_you_mean};
use crate::expr::{Cx, Filter, FilterIndex};
use crate::file::PolicyFile;

#[derive(Debug)]
pub(crate) struct CustomRule {
    id: Arc<str>,
    action: Action,
    filter: Filter,
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
    spec: &mut RulesSpec,
) {
    for r in &file.legal_rule {
        let r = r.get_ref();
        let id = ids.check(d, &r.id);
        if let Some(f) = expression(d, &r.expression, spec) {
            spec.legal.0.push((id, f));
        }
    }
}

/// Checks `[[custom_rule]]` entries.
pub(super) fn validate_custom(
    file: &PolicyFile,
    d: &mut Diagnostics<'_>,
    ids: &mut RuleIds,
    spec: &mut RulesSpec,
) {
    for r in &file.custom_rule {
        let r = r.get_ref();
        let id = ids.check(d, &r.id);
        let action = match r.action.get_ref().as_str() {
            "block" => Some(Action::Block),
            "allow" => Some(Action::Allow),
            "log" => Some(Action::Log),
            other => {
                let hint = did_you_mean(other, ["block", "allow", "log"])
                    .map(|s| format!("did you mean \"{s}\"?"))
                    .unwrap_or_else(|| "custom rules take \"block\", \"allow\" or \"log\"".into());
                d.at_with_hint(
                    ProblemKind::Invalid,
                    sp(&r.action),
                    format!("unknown action `{other}`"),
                    Some(hint),
                );
                None
            }
        };
        let filter = expression(d, &r.expression, spec);
        if let (Some(action), Some(filter)) = (action, filter) {
            spec.custom.push(CustomRule { id, action, filter });
        }
    }
}

impl LegalRules {
    pub(crate) fn check(&self, cx: &Cx<'_>, decision: &mut Decision) -> ControlFlow<()> {
        for (id, f) in &self.0 {
            if f.matches(cx) {
                return refuse(decision, Code::LEGAL_BLOCK, Some(id.clone()));
            }
        }
        ControlFlow::Continue(())
    }
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
    pub(crate) fn check(&self, cx: &Cx<'_>, decision: &mut Decision) -> ControlFlow<()> {
        if self.rules.is_empty() {
            return ControlFlow::Continue(());
        }
        for i in self.index.candidates(cx) {
            let r = &self.rules[i];
            if !r.filter.matches(cx) {
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
            }
        }
        ControlFlow::Continue(())
    }
}
