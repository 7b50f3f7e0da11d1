//! `[ledger]`'s settings: where the edge records charged responses, and when it rotates the
//! file.

use serde::Deserialize;
use serde_spanned::Spanned;

use crate::error::{Diagnostics, ProblemKind};

/// `[ledger]`: where the edge keeps the record of charged responses.
#[derive(Clone, Debug)]
pub struct LedgerConfig {
    /// The directory (relative paths resolve against the policy file's directory).
    pub dir: std::path::PathBuf,
    /// Rotate the live file once it holds this many bytes.
    pub rotate_bytes: u64,
    /// Rotate the live file once it is this old.
    pub rotate_every: std::time::Duration,
    /// Where `dir` is written: the place of a problem opening it that only the running edge
    /// meets (another process holding the ledger's lock).
    dir_key: crate::error::Problem,
}

/// Two ledgers are the same settings wherever the file writes them.
impl PartialEq for LedgerConfig {
    fn eq(&self, other: &LedgerConfig) -> bool {
        (&self.dir, self.rotate_bytes, self.rotate_every)
            == (&other.dir, other.rotate_bytes, other.rotate_every)
    }
}

impl Eq for LedgerConfig {}

impl LedgerConfig {
    /// The edge cannot open the ledger in `dir`, for the reason `message` gives: a problem of
    /// the policy at its `dir` key, as `signpost check` reports the ones it can see.
    pub fn cannot_open(&self, message: String) -> crate::PolicyError {
        crate::PolicyError::single(crate::error::Problem {
            message,
            ..self.dir_key.clone()
        })
    }
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
    let path = base_dir.join(dir);
    if !dir.trim().is_empty() {
        check_ledger_dir(d, &file.dir, &path);
    }
    LedgerConfig {
        dir_key: d.problem_at(ProblemKind::Read, file.dir.span(), ""),
        dir: path,
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

/// Checks that the ledger's `dir` is one the edge can open (`path`, resolved): an existing
/// directory, or one it can create because the nearest existing path above it is a directory.
/// `signpost check` and `signpost run` both refuse the policy here, at the key, so that `check`
/// passes no policy that `run` refuses. Nothing is created or locked: `check` on the machine
/// where the edge runs changes nothing. (Permissions are left to the edge's open, which reports
/// at the same key.)
fn check_ledger_dir(d: &mut Diagnostics<'_>, value: &Spanned<String>, path: &std::path::Path) {
    let shown = value.get_ref();
    let problem = match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => return,
        Ok(_) => format!("the ledger's dir `{shown}` is not a directory"),
        Err(e) => {
            // The edge creates the directory, and every missing one above it.
            let existing = path
                .ancestors()
                .skip(1)
                // A relative path's last ancestor is the empty path: the working directory.
                .map(|a| match a.as_os_str().is_empty() {
                    true => std::path::Path::new("."),
                    false => a,
                })
                .find_map(|a| std::fs::metadata(a).ok().map(|meta| (a, meta)));
            match existing {
                Some((_, meta)) if meta.is_dir() && e.kind() == std::io::ErrorKind::NotFound => {
                    return;
                }
                Some((above, meta)) if !meta.is_dir() => format!(
                    "cannot create the ledger's dir `{shown}`: `{}` is not a directory",
                    above.display()
                ),
                _ => format!("cannot open the ledger's dir `{shown}`: {e}"),
            }
        }
    };
    let hint = std::path::Path::new(shown)
        .is_relative()
        .then(|| "relative paths are resolved against the policy file's directory".to_owned());
    d.at_with_hint(ProblemKind::Read, value.span(), problem, hint);
}
