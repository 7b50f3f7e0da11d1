//! Sizes and durations as the policy file writes them ("100MB", "64KiB", "1024"; "5s", "1m 30s"),
//! checked with every problem at its place. A leaf: every section that takes a size or a
//! duration reads it here.

use std::time::Duration;

use serde_spanned::Spanned;

use crate::error::{Diagnostics, ProblemKind};

/// Parses a byte size ("100MB", "64KiB", "1024"), reporting a bad one at its place.
pub(crate) fn size(d: &mut Diagnostics<'_>, value: &Spanned<String>, default: u64) -> u64 {
    size_text(value.get_ref()).unwrap_or_else(|why| {
        d.at(ProblemKind::Invalid, value.span(), why);
        default
    })
}

/// A byte size: digits, then optionally `B`, `KB`, `MB`, `GB` (powers of 1000) or `KiB`, `MiB`,
/// `GiB` (powers of 1024).
pub(crate) fn size_text(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let unit_factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "KB" => 1000,
        "MB" => 1000 * 1000,
        "GB" => 1000 * 1000 * 1000,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        other => {
            return Err(format!(
                "`{other}` is not a size unit; write e.g. \"100MB\", \"64KiB\" or \"1024\""
            ));
        }
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit_factor))
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{text}` is not a size greater than zero"))
}

/// Parses a positive humantime duration ("5s", "1m 30s"), falling back to `default` when absent.
pub(crate) fn duration(
    d: &mut Diagnostics<'_>,
    value: Option<&Spanned<String>>,
    default: Duration,
) -> Duration {
    let Some(v) = value else { return default };
    match humantime::parse_duration(v.get_ref().trim()) {
        Ok(dur) if !dur.is_zero() => dur,
        Ok(_) => {
            d.at(
                ProblemKind::Invalid,
                v.span(),
                "a duration must be greater than zero",
            );
            default
        }
        Err(e) => {
            d.at(
                ProblemKind::Invalid,
                v.span(),
                format!(
                    "`{}` is not a duration ({e}); write e.g. \"10s\" or \"2m\"",
                    v.get_ref()
                ),
            );
            default
        }
    }
}
