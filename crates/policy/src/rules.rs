//! Rule specifications: access, browser, hotlink, legal, custom and rate-limit rules once checked.

use std::path::Path;

use crate::error::{Diagnostics, ProblemKind};
use crate::file::PolicyFile;

/// Every rule of the policy, validated but not compiled.
#[derive(Debug, Default)]
pub(crate) struct RulesSpec {}

pub(crate) fn validate_rules(
    file: &PolicyFile,
    d: &mut Diagnostics<'_>,
    _base_dir: &Path,
) -> RulesSpec {
    // Rules are being written; refuse them loudly rather than ignore them.
    let mut unsupported = |what: &str, span: std::ops::Range<usize>| {
        d.at(
            ProblemKind::Invalid,
            span,
            format!("{what} are not supported yet"),
        );
    };
    if let Some(r) = file.access_rule.first() {
        unsupported("access rules", r.span());
    }
    if let Some(r) = file.custom_rule.first() {
        unsupported("custom rules", r.span());
    }
    if let Some(r) = file.rate_limit.first() {
        unsupported("rate limits", r.span());
    }
    if let Some(r) = file.legal_rule.first() {
        unsupported("legal rules", r.span());
    }
    RulesSpec {}
}
