//! Traces: the real decision, observed. Every phase of [`CompiledPolicy::decide`] reports what it
//! considers to a [`Tracer`]; the decision itself passes [`NoTrace`], whose methods are empty and
//! inlined, so that the ordinary decision compiles to what it was without an observer, while
//! [`CompiledPolicy::trace`] passes a [`Recorder`]. There is one decision, not a second
//! implementation of the policy: a trace cannot disagree with what the edge does.
//!
//! A trace changes nothing: a recording decision peeks at the rate-limit counters instead of
//! counting (see `Limiter::peek`), and asks Redis nothing.
//!
//! [`CompiledPolicy::decide`]: crate::CompiledPolicy::decide
//! [`CompiledPolicy::trace`]: crate::CompiledPolicy::trace

use crate::decision::Decision;
use crate::expr::{Cx, Field, Filter};
use crate::geo::Country;

/// The phases of a decision, in the order they run, by their stable names (a trace's
/// `step_name` for a phase). `docs/policy.md` describes each.
pub const PHASES: &[&str] = &[
    "tls_sni",
    "host_routing",
    "identify",
    "access_rules",
    "browser_check",
    "hotlink",
    "legal_rules",
    "custom_rules",
    "crawl_control",
    "rate_limits",
    "challenge",
];

/// Whether a step is a phase of the decision or a rule one phase considered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// A phase: its steps are the rules it considered.
    Phase,
    /// One rule (or check) of a phase.
    Rule,
}

impl StepKind {
    /// `phase` or `rule`.
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Phase => "phase",
            StepKind::Rule => "rule",
        }
    }
}

/// One step of a trace, shaped like a step of Cloudflare's Trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceStep {
    /// A phase's name (one of [`PHASES`]), or a rule's id.
    pub step_name: String,
    /// Phase or rule.
    pub kind: StepKind,
    /// What was checked and why it matched or not, in words.
    pub description: String,
    /// The rule's expression as written (or, for table rules, an equivalent one).
    pub expression: Option<String>,
    /// For a rule: whether it matched. For a phase: whether it ended the evaluation.
    pub matched: bool,
    /// What the rule does when it matches (`block`, `allow`, `log`, `count`, `route`...).
    pub action: Option<String>,
    /// The action's parameters, e.g. `code`, or a rate limit's `key` and `count`.
    pub action_parameters: Vec<(String, String)>,
    /// The request fields the step read, with their values as the rules see them.
    pub fields: Vec<(String, String)>,
    /// The rules a phase considered, in order.
    pub trace: Vec<TraceStep>,
}

impl TraceStep {
    /// A phase step named `name`.
    pub(crate) fn phase(name: &str, description: impl Into<String>) -> TraceStep {
        TraceStep {
            step_name: name.to_owned(),
            kind: StepKind::Phase,
            description: description.into(),
            expression: None,
            matched: false,
            action: None,
            action_parameters: Vec::new(),
            fields: Vec::new(),
            trace: Vec::new(),
        }
    }

    /// A rule step for the rule `id`.
    pub(crate) fn rule(id: &str, matched: bool, description: impl Into<String>) -> TraceStep {
        TraceStep {
            kind: StepKind::Rule,
            matched,
            ..TraceStep::phase(id, description)
        }
    }

    /// With the action `action`.
    pub(crate) fn action(mut self, action: &str) -> TraceStep {
        self.action = Some(action.to_owned());
        self
    }

    /// With one more action parameter.
    pub(crate) fn param(mut self, name: &str, value: impl ToString) -> TraceStep {
        self.action_parameters
            .push((name.to_owned(), value.to_string()));
        self
    }

    /// With one more field value.
    pub(crate) fn field(mut self, name: &str, value: impl Into<String>) -> TraceStep {
        self.fields.push((name.to_owned(), value.into()));
        self
    }

    /// With one more field value: `field`'s, as the rules read it in `cx`.
    pub(crate) fn read(mut self, field: &Field, cx: &Cx<'_>) -> TraceStep {
        self.fields
            .push((field.name().into_owned(), field.text(cx)));
        self
    }

    /// With `filter`'s text and the values of the fields it reads in `cx`.
    pub(crate) fn filter(mut self, filter: &Filter, cx: &Cx<'_>) -> TraceStep {
        self.expression = Some(filter.text.to_string());
        for f in filter.fields() {
            self = self.read(f, cx);
        }
        self
    }
}

/// A decision explained: its outcome and every step that led to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// The decision, exactly as [`decide`](crate::CompiledPolicy::decide) would make it with the
    /// counters as they are (a trace counts nothing).
    pub decision: Decision,
    /// Every phase, in order, each with the rules it considered; phases after the one that
    /// ended the evaluation are listed as not reached.
    pub steps: Vec<TraceStep>,
    /// The phase that ended the evaluation, if one did before the end.
    pub stopped_at: Option<&'static str>,
}

/// What a phase tells its observer. Arguments are closures, so that [`NoTrace`] builds nothing.
pub(crate) trait Tracer {
    /// Whether steps are recorded. A recording decision must change no state.
    const RECORDS: bool;
    /// A phase starts: the rules recorded next belong to it.
    fn phase(&mut self, step: impl FnOnce() -> TraceStep);
    /// A rule of the current phase was considered.
    fn rule(&mut self, step: impl FnOnce() -> TraceStep);
    /// The country and AS number to assume instead of the databases' answers.
    fn assumed_geo(&self) -> (Option<Country>, Option<u32>) {
        (None, None)
    }
}

/// The ordinary decision's observer: records nothing, costs nothing.
pub(crate) struct NoTrace;

impl Tracer for NoTrace {
    const RECORDS: bool = false;
    #[inline(always)]
    fn phase(&mut self, _: impl FnOnce() -> TraceStep) {}
    #[inline(always)]
    fn rule(&mut self, _: impl FnOnce() -> TraceStep) {}
}

/// A trace's observer: keeps every step.
#[derive(Default)]
pub(crate) struct Recorder {
    pub(crate) steps: Vec<TraceStep>,
    pub(crate) country: Option<Country>,
    pub(crate) asn: Option<u32>,
}

impl Tracer for Recorder {
    const RECORDS: bool = true;
    fn phase(&mut self, step: impl FnOnce() -> TraceStep) {
        let step = step();
        debug_assert_eq!(
            Some(step.step_name.as_str()),
            PHASES.get(self.steps.len()).copied(),
            "a phase out of PHASES' order"
        );
        self.steps.push(step);
    }
    fn assumed_geo(&self) -> (Option<Country>, Option<u32>) {
        (self.country, self.asn)
    }
    fn rule(&mut self, step: impl FnOnce() -> TraceStep) {
        let step = step();
        match self.steps.last_mut() {
            Some(phase) => phase.trace.push(step),
            None => self.steps.push(step),
        }
    }
}

impl Recorder {
    /// The trace, once the phases have run: the phase that ended the evaluation (when it
    /// ended early) is marked with the decision's outcome, and the phases after it are listed
    /// as not reached.
    pub(crate) fn finish(mut self, decision: Decision, stopped: bool) -> Trace {
        let mut stopped_at = None;
        if let (true, Some(last)) = (stopped, self.steps.last_mut()) {
            last.matched = true;
            let (action, code) = match decision.verdict {
                crate::Verdict::Refuse { code, .. } => ("block", Some(code)),
                crate::Verdict::Proxy => ("allow", None),
                crate::Verdict::Challenge { difficulty } => {
                    last.action_parameters
                        .push(("difficulty".to_owned(), difficulty.get().to_string()));
                    ("challenge", None)
                }
            };
            last.action = Some(action.to_owned());
            if let Some(code) = code {
                last.action_parameters
                    .push(("code".to_owned(), code.to_string()));
            }
            if let Some(id) = &decision.rule_id {
                last.action_parameters
                    .push(("rule".to_owned(), id.to_string()));
            }
            stopped_at = PHASES.iter().copied().find(|p| *p == last.step_name);
        }
        let reached = self.steps.len();
        if let Some(at) = stopped_at {
            for name in PHASES.iter().skip(reached) {
                self.steps.push(TraceStep::phase(
                    name,
                    format!("not reached: evaluation stopped at {at}"),
                ));
            }
        }
        Trace {
            decision,
            steps: self.steps,
            stopped_at,
        }
    }
}
