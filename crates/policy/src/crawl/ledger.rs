//! `[ledger]`'s settings: where the edge records charged responses, and when it rotates the
//! file.

use serde::Deserialize;
use serde_spanned::Spanned;

use crate::error::{Diagnostics, ProblemKind};

/// `[ledger]`: where the edge keeps the record of charged responses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerConfig {
    /// The directory (relative paths resolve against the policy file's directory).
    pub dir: std::path::PathBuf,
    /// Rotate the live file once it holds this many bytes.
    pub rotate_bytes: u64,
    /// Rotate the live file once it is this old.
    pub rotate_every: std::time::Duration,
}

/// The ledger's live file is rotated at this size unless the policy says otherwise (64 MiB).
pub const DEFAULT_LEDGER_ROTATE_BYTES: u64 = 64 * 1024 * 1024;
/// ... or at this age (a day).
pub const DEFAULT_LEDGER_ROTATE_EVERY: std::time::Duration =
    std::time::Duration::from_secs(24 * 60 * 60);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LedgerFile {
    pub dir: Spanned<String>,
    pub rotate_bytes: Option<Spanned<String>>,
    pub rotate_every: Option<Spanned<String>>,
}

/// Checks `[ledger]`; relative `dir` resolves against `base_dir`.
pub(crate) fn compile_ledger(
    d: &mut Diagnostics<'_>,
    file: &LedgerFile,
    base_dir: &std::path::Path,
) -> LedgerConfig {
    let dir = file.dir.get_ref();
    if dir.trim().is_empty() {
        d.at(
            ProblemKind::Invalid,
            file.dir.span(),
            "the ledger's dir must name a directory",
        );
    }
    LedgerConfig {
        dir: base_dir.join(dir),
        rotate_bytes: file
            .rotate_bytes
            .as_ref()
            .map_or(DEFAULT_LEDGER_ROTATE_BYTES, |v| {
                crate::units::size(d, v, DEFAULT_LEDGER_ROTATE_BYTES)
            }),
        rotate_every: crate::units::duration(
            d,
            file.rotate_every.as_ref(),
            DEFAULT_LEDGER_ROTATE_EVERY,
        ),
    }
}
