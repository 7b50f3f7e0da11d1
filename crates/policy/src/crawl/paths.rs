//! The paths crawl control leaves alone ([`ALWAYS_FREE_PATHS`]) and the path patterns of
//! `free_paths` (and of robots.txt rules): `*` for any run of characters.

/// The paths pay per crawl never charges and crawl control never refuses, as Cloudflare lists
/// them: a blocked crawler must still be able to read why and where.
pub const ALWAYS_FREE_PATHS: [&str; 5] = [
    "/robots.txt",
    "/sitemap.xml",
    "/security.txt",
    "/.well-known/security.txt",
    "/crawlers.json",
];

/// Whether crawl control leaves `path` alone whatever the crawler: the paths of
/// [`ALWAYS_FREE_PATHS`] (`/robots.txt` among them), compared after normalisation.
pub fn is_always_free(path: &str) -> bool {
    let path = crate::path::normalized_path(path);
    ALWAYS_FREE_PATHS.contains(&path.as_ref())
}

/// A path pattern: `*` stands for any run of characters, everything else for itself, and the
/// pattern covers the whole path (`/public/*` matches `/public/` and `/public/a/b`, not
/// `/publication`). Matching is linear in the path: the literal pieces between stars are found
/// left to right, first occurrence first, which finds a match whenever one exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathGlob {
    pub(super) pattern: String,
}

impl PathGlob {
    /// A pattern as written (checked by the caller: it starts with `/` or `*`).
    pub(crate) fn new(pattern: impl Into<String>) -> PathGlob {
        PathGlob {
            pattern: pattern.into(),
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether the pattern covers all of `path`.
    pub fn matches(&self, path: &str) -> bool {
        glob_matches(&self.pattern, path, true)
    }
}

/// Whether `pattern` (with `*` for any run) matches `text` from its start; with `to_end`, the
/// match must also cover the end of `text`. The pieces between stars are matched greedily, left
/// to right at their first occurrence: any match can be moved to that one, so this finds a match
/// iff one exists, in time linear in `text` per piece. robots.txt rules match this way too
/// (RFC 9309 §2.2.3: `*` for any run, `$` at the end for the end of the path).
pub fn glob_matches(pattern: &str, text: &str, to_end: bool) -> bool {
    let mut pieces = pattern.split('*');
    let first = pieces.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let middle: Vec<&str> = pieces.collect();
    let Some((last, middle)) = middle.split_last() else {
        // No star: the pattern is a literal.
        return !to_end || rest.is_empty();
    };
    for piece in middle {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    if to_end {
        rest.ends_with(last)
    } else {
        rest.contains(last)
    }
}
