//! `[zone.markdown]`: origin HTML converted to Markdown for agents that ask for it.

use serde::Deserialize;
use serde_spanned::Spanned;

use crate::error::{Diagnostics, ProblemKind};

/// Cloudflare's cap on the decoded HTML it converts: 6 MiB.
pub const DEFAULT_MARKDOWN_MAX_BYTES: usize = 6 * 1024 * 1024;

/// The largest `max_bytes` a policy may set (8 MiB): the edge counts a conversion's working
/// memory in a 256 MiB budget, and a page this large with the most elements fits it alone.
pub const MAX_MARKDOWN_MAX_BYTES: usize = 8 * 1024 * 1024;

/// The converted-page cache's size when `cache = true` gives none: 64 MiB, about 1,000 pages of
/// 60 KB of Markdown.
pub const DEFAULT_MARKDOWN_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// The smallest and largest `cache_bytes`: 64 KiB (a few pages) to 4 GiB (each zone's cache is
/// its own; the edge holds the sum of the zones' sizes at most).
pub const MIN_MARKDOWN_CACHE_BYTES: usize = 64 * 1024;
pub const MAX_MARKDOWN_CACHE_BYTES: usize = 4 * 1024 * 1024 * 1024;

/// A `content_signal` value may be at most this long.
const MAX_CONTENT_SIGNAL_LEN: usize = 512;

/// The zone's Markdown conversion settings, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkdownConfig {
    /// Convert at all. Off unless the zone turns it on.
    pub enabled: bool,
    /// The largest decoded (decompressed) page converted; larger ones pass through as HTML.
    pub max_bytes: usize,
    /// The `Content-Signal` header sent with converted pages when the origin sent none.
    pub content_signal: Option<String>,
    /// Add `X-Markdown-Tokens` with the exact cl100k_base token count of the Markdown.
    pub token_count_header: bool,
    /// The converted-page cache's size in bytes (`cache = true`, `cache_bytes`); `None` when
    /// the zone converts every request anew.
    pub cache_bytes: Option<usize>,
    /// HTML pages carry a `Link` to their Markdown (`rel="alternate"`): on unless `link = false`.
    pub link: bool,
}

impl Default for MarkdownConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            max_bytes: DEFAULT_MARKDOWN_MAX_BYTES,
            content_signal: None,
            token_count_header: false,
            cache_bytes: None,
            link: true,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MarkdownFile {
    pub enabled: Option<bool>,
    pub max_bytes: Option<Spanned<i64>>,
    pub content_signal: Option<Spanned<String>>,
    pub token_count_header: Option<bool>,
    pub cache: Option<bool>,
    pub cache_bytes: Option<Spanned<i64>>,
    pub link: Option<bool>,
}

pub(crate) fn compile(d: &mut Diagnostics<'_>, file: Option<&MarkdownFile>) -> MarkdownConfig {
    let mut config = MarkdownConfig::default();
    let Some(file) = file else { return config };
    config.enabled = file.enabled.unwrap_or(false);
    config.token_count_header = file.token_count_header.unwrap_or(false);
    config.link = file.link.unwrap_or(true);
    if let Some(max) = &file.max_bytes {
        match usize::try_from(*max.get_ref()) {
            Ok(n) if (1..=MAX_MARKDOWN_MAX_BYTES).contains(&n) => config.max_bytes = n,
            _ => d.at(
                ProblemKind::Invalid,
                max.span(),
                format!("max_bytes must be between 1 and {MAX_MARKDOWN_MAX_BYTES} (8 MiB)"),
            ),
        }
    }
    compile_cache(d, file, &mut config);
    if let Some(signal) = &file.content_signal {
        let value = signal.get_ref().trim();
        let valid = !value.is_empty()
            && value.len() <= MAX_CONTENT_SIGNAL_LEN
            && value
                .bytes()
                .all(|b| b == b' ' || b == b'\t' || b.is_ascii_graphic());
        if valid {
            config.content_signal = Some(value.to_string());
        } else {
            d.at(
                ProblemKind::Invalid,
                signal.span(),
                format!(
                    "content_signal must be 1 to {MAX_CONTENT_SIGNAL_LEN} printable ASCII characters, e.g. \"ai-train=no, search=yes, ai-input=yes\""
                ),
            );
        }
    }
    config
}

/// `cache = true` turns the cache on at its default size; `cache_bytes` sizes it, and without
/// `cache = true` is refused: a size given for a cache left off is a mistake to show, not to guess.
fn compile_cache(d: &mut Diagnostics<'_>, file: &MarkdownFile, config: &mut MarkdownConfig) {
    let on = file.cache.unwrap_or(false);
    let mut bytes = DEFAULT_MARKDOWN_CACHE_BYTES;
    if let Some(size) = &file.cache_bytes {
        match usize::try_from(*size.get_ref()) {
            Ok(_) if !on => {
                d.at(
                    ProblemKind::Invalid,
                    size.span(),
                    "cache_bytes sizes the converted-page cache: add `cache = true` to turn it on"
                        .to_string(),
                );
            }
            Ok(n) if (MIN_MARKDOWN_CACHE_BYTES..=MAX_MARKDOWN_CACHE_BYTES).contains(&n) => {
                bytes = n;
            }
            _ => d.at(
                ProblemKind::Invalid,
                size.span(),
                format!(
                    "cache_bytes must be between {MIN_MARKDOWN_CACHE_BYTES} (64 KiB) and {MAX_MARKDOWN_CACHE_BYTES} (4 GiB)"
                ),
            ),
        }
    }
    config.cache_bytes = on.then_some(bytes);
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::CompiledPolicy;

    use super::*;

    fn zone_markdown(table: &str) -> Result<MarkdownConfig, String> {
        let text = format!(
            "[[zone]]\nname = \"z\"\nhosts = [\"*\"]\norigin = \"127.0.0.1:8000\"\n{table}"
        );
        CompiledPolicy::from_toml(&text, "t.toml", Path::new("."), None)
            .map(|p| p.zones()[0].markdown.clone())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn off_unless_turned_on() {
        assert_eq!(zone_markdown("").unwrap(), MarkdownConfig::default());
        assert!(!zone_markdown("[zone.markdown]\n").unwrap().enabled);
        let on = zone_markdown(
            "[zone.markdown]\nenabled = true\nmax_bytes = 1000\ncontent_signal = \"ai-train=no, search=yes\"\ntoken_count_header = true\n",
        )
        .unwrap();
        assert_eq!(
            on,
            MarkdownConfig {
                enabled: true,
                max_bytes: 1000,
                content_signal: Some("ai-train=no, search=yes".into()),
                token_count_header: true,
                cache_bytes: None,
                link: true,
            }
        );
        assert!(
            !zone_markdown("[zone.markdown]\nenabled = true\nlink = false\n")
                .unwrap()
                .link
        );
    }

    #[test]
    fn cache_is_opt_in_with_a_default_size() {
        assert_eq!(
            zone_markdown("[zone.markdown]\nenabled = true\ncache = true\n")
                .unwrap()
                .cache_bytes,
            Some(DEFAULT_MARKDOWN_CACHE_BYTES)
        );
        assert_eq!(
            zone_markdown("[zone.markdown]\nenabled = true\ncache = true\ncache_bytes = 65536\n")
                .unwrap()
                .cache_bytes,
            Some(65536)
        );
        assert_eq!(
            zone_markdown("[zone.markdown]\nenabled = true\ncache = false\n")
                .unwrap()
                .cache_bytes,
            None
        );
        let e = zone_markdown("[zone.markdown]\ncache = true\ncache_bytes = 65535\n").unwrap_err();
        assert!(e.contains("t.toml:7:") && e.contains("(64 KiB)"), "{e}");
        let e =
            zone_markdown("[zone.markdown]\ncache = true\ncache_bytes = 4294967297\n").unwrap_err();
        assert!(e.contains("(4 GiB)"), "{e}");
        let e = zone_markdown("[zone.markdown]\ncache_bytes = 1048576\n").unwrap_err();
        assert!(e.contains("cache = true"), "{e}");
    }

    #[test]
    fn bad_values_are_located() {
        let e = zone_markdown("[zone.markdown]\nmax_bytes = 0\n").unwrap_err();
        assert!(e.contains("t.toml:6:") && e.contains("max_bytes"), "{e}");
        let e = zone_markdown("[zone.markdown]\nmax_bytes = 8388609\n").unwrap_err();
        assert!(e.contains("max_bytes") && e.contains("(8 MiB)"), "{e}");
        assert!(zone_markdown("[zone.markdown]\nmax_bytes = 8388608\n").is_ok());
        let e = zone_markdown("[zone.markdown]\ncontent_signal = \"a\\nb\"\n").unwrap_err();
        assert!(e.contains("content_signal"), "{e}");
        let e = zone_markdown("[zone.markdown]\nenable = true\n").unwrap_err();
        assert!(e.contains("enable"), "{e}");
    }
}
