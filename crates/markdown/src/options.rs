//! What a conversion is given and why it may refuse: the bounds of one conversion ([`Limits`]
//! and the constants behind them), the form of link targets ([`LinkForm`]), and [`Error`]. A leaf
//! module: the filter, the tree walk and the decoder read these, and the crate root re-exports
//! them.

/// The default cap on the decoded page, as Cloudflare's: 6 MiB.
pub const DEFAULT_MAX_BYTES: usize = 6 * 1024 * 1024;

/// The parsed tree may be at most this deep when handed to the converter, which recurses per
/// element (a few frames each). The token filter keeps real pages far below it; the check is the
/// guarantee. Tested on a 2 MiB thread stack in a debug build, the smallest the edge uses.
pub const MAX_TREE_DEPTH: usize = 512;

/// The default [`Limits::max_elements`].
pub const DEFAULT_MAX_ELEMENTS: usize = 250_000;

/// At most this many JSON-LD blocks are collected; more are dropped.
pub const MAX_JSON_LD_BLOCKS: usize = 32;

/// Bounds on one conversion.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The largest decoded (decompressed) page converted; larger ones pass through.
    pub max_bytes: usize,
    /// Nesting (of elements with a required end tag) kept by the token filter; deeper elements lose
    /// their tags but keep their text.
    pub max_depth: usize,
    /// Pages with more elements than this are not converted.
    pub max_elements: usize,
    /// The longest the tokenizer and tree builder may take (wall time, checked after each
    /// [`PARSE_CHUNK_BYTES`] of the page), plus [`Limits::parse_time_per_mib`] for each MiB.
    /// html5ever checks each attribute of a tag against the tag's earlier ones, so one tag with
    /// 160,000 attributes (1.2 MB) took a minute; past the deadline the page passes through.
    pub max_parse_time: std::time::Duration,
    /// Added to [`Limits::max_parse_time`] per MiB of page.
    pub parse_time_per_mib: std::time::Duration,
}

const DEBUG_FACTOR: u64 = if cfg!(debug_assertions) { 10 } else { 1 };

/// The page is fed to the tokenizer in pieces of this size, and the parse deadline checked
/// between them: the most one piece can add to a tag is this many bytes of attributes.
pub const PARSE_CHUNK_BYTES: usize = 16 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_BYTES,
            max_depth: 128,
            max_elements: DEFAULT_MAX_ELEMENTS,
            // Real pages parse at 20 MB/s or more (bench/README.md): a 6 MiB page in about
            // 0.3 s, so this leaves room for a loaded machine. Debug builds (tests) are about
            // ten times slower.
            max_parse_time: std::time::Duration::from_millis(DEBUG_FACTOR * 1000),
            parse_time_per_mib: std::time::Duration::from_millis(DEBUG_FACTOR * 500),
        }
    }
}

/// Why a page was not converted (the caller passes the HTML through).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The decoded page is larger than [`Limits::max_bytes`].
    #[error("page larger than the cap")]
    TooLarge,
    /// The content coding is unknown, stacked too deep, or the body does not decode.
    #[error("content coding: {0}")]
    Encoding(String),
    /// The page has too many elements or too deep a tree, or took too long to parse.
    #[error("page too complex: {0}")]
    TooComplex(&'static str),
    /// The HTML rewriter failed.
    #[error("rewriter: {0}")]
    Rewrite(String),
    /// The caller's memory budget had no room for the conversion (see [`convert_within`](crate::convert_within)).
    #[error("no room in the memory budget")]
    NoRoom,
}

/// How the Markdown writes the targets of links and images.
///
/// Either way a relative reference in the page is first resolved against `<base href>` or the
/// page URL, so the target is the one a browser would follow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LinkForm {
    /// Every target as an absolute URL (`https://example.com/docs/a.html`), readable without
    /// knowing where the page came from.
    #[default]
    Absolute,
    /// Targets on the page's own origin (same scheme, host and port as the page URL) as
    /// root-relative references (`/docs/a.html`), targets elsewhere absolute; the page URL is
    /// then in the frontmatter as `url`. What the edge sends. The same targets for fewer
    /// tokens: a site's own links are most of a documentation page's links, and their
    /// `https://host` is a tenth of its tokens on the Apache and Python manuals.
    ///
    /// An agent resolves them right by RFC 3986 reference resolution (section 5.2): a reference
    /// that starts with one `/` keeps the base URI's scheme and authority and takes its own path,
    /// query and fragment, whatever the base URI's path. The base URI is the URL the Markdown
    /// was retrieved from (section 5.1.3), which is the page URL, and the frontmatter's `url`
    /// says it again for a reader that was handed the Markdown without it. A target whose path
    /// starts with `//` would read as a network-path reference (a host name), so it stays
    /// absolute; so does every target when there is no page URL.
    RootRelative,
}

#[cfg(test)]
thread_local! {
    /// Set by tests to convert without the steps that must not change the Markdown (block
    /// wrappers unwrapped, neighbouring inline elements joined in the walk rather than by htmd,
    /// pieces of text joined before the tree builder), to compare against.
    pub(crate) static UNREDUCED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the reductions that do not change the Markdown are on (always, but in tests that
/// compare against the unreduced tree).
pub(crate) fn reduce_tree() -> bool {
    #[cfg(test)]
    if UNREDUCED.with(std::cell::Cell::get) {
        return false;
    }
    true
}
