//! The token filter between html5ever's tokenizer and its tree builder: the page is tokenized
//! once, and what agents do not read never reaches the tree. It drops scripts, styles,
//! navigation, the page's header and footer (by element or by ARIA role), hidden elements,
//! form controls, embedded media, comments and Sphinx's `¶` header permalinks; keeps only the
//! attributes the conversion uses; keeps `<span>` tags (meaningless in Markdown once their
//! attributes are gone, and many in highlighted code) out of the tree; and bounds what the tree builder and the converter will see:
//! nesting is flattened past [`Limits::max_depth`], and a page with more than
//! [`Limits::max_elements`] elements, or more than [`MAX_ELEMENT_NAMES`] distinct element
//! names, is refused.
//!
//! Every token costs O(1) here (amortized: an end tag pops the entries it closes, each pushed
//! once), so the pass is linear in the page whatever its shape. The bounded nesting is what
//! keeps the tree builder linear too: its scope checks walk its stack of open elements.
//!
//! Memory: the stack of open elements and the per-name counts hold at most one entry per
//! element, and elements are capped ([`Limits::max_elements`]); the tokenizer's buffers hold at
//! most one token, which is bounded by the page ([`Limits::max_bytes`]).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::time::Instant;

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::states::RawKind;
use html5ever::tokenizer::{
    BufferQueue, Tag, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
};
use html5ever::tree_builder::{TreeBuilder, TreeBuilderOpts};
use html5ever::{LocalName, TokenizerResult, local_name};
use markup5ever_rcdom::{Handle, RcDom};

use crate::options::{Error, Limits, PARSE_CHUNK_BYTES};

/// Attribute values longer than this are dropped (a `data:` image or a tracking blob in an
/// `href`); a link or image without its URL still leaves its text.
pub const MAX_ATTRIBUTE_BYTES: usize = 8 * 1024;

/// Lists, block quotes, definition lists and tables nested deeper than this lose their tags
/// (their content stays). The converter indents or prefixes every line of such an element once
/// per level, so its work is the page's size times this nesting: 100,000 nested `<ul><li>`
/// took seconds at the general depth limit. Real documents nest lists a handful of levels.
pub const MAX_BLOCK_NESTING: usize = 16;

/// A page with more distinct element names than this is refused. The tokenizer interns each
/// name in string_cache's process-wide set, whose buckets are chosen by a hash that is not
/// keyed: a page can put every name it invents in one bucket, and each name the tokenizer
/// reads then walks past every other one alive (a 1 MB page of 60,000 such names ran into the
/// parse deadline, 2 s, where a page of as many ordinary names took 74 ms). The names of a
/// page's elements stay alive while it is parsed, and this bounds how many. HTML has about 150
/// element names; real pages add a few custom ones.
pub const MAX_ELEMENT_NAMES: usize = 1024;

/// Parses UTF-8 `html` through the filter into a tree.
pub fn parse(html: &str, limits: &Limits) -> Result<RcDom, Error> {
    let builder = TreeBuilder::new(RcDom::default(), TreeBuilderOpts::default());
    let filter = Filter {
        builder,
        limits: *limits,
        state: RefCell::new(State::default()),
        refused: Cell::new(false),
        text: RefCell::new(None),
    };
    let tokenizer = Tokenizer::new(filter, TokenizerOpts::default());
    let input = BufferQueue::default();
    let started = Instant::now();
    let mib = u32::try_from(html.len() >> 20).unwrap_or(u32::MAX);
    let deadline = limits
        .max_parse_time
        .saturating_add(limits.parse_time_per_mib.saturating_mul(mib));
    let mut rest = html;
    while !rest.is_empty() {
        let mut cut = rest.len().min(PARSE_CHUNK_BYTES);
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        let (piece, after) = rest.split_at(cut);
        rest = after;
        input.push_back(StrTendril::from_slice(piece));
        // A `</script>` or a `<meta charset>` suspends the tokenizer; it resumes where it
        // stopped. `Done` means this piece is used up (an unfinished token waits for more).
        while !matches!(tokenizer.feed(&input), TokenizerResult::Done) {}
        if tokenizer.sink.refused() {
            return Err(Error::TooComplex("too many elements or element names"));
        }
        if started.elapsed() > deadline {
            return Err(Error::TooComplex("parse deadline"));
        }
    }
    tokenizer.end();
    let filter = tokenizer.sink;
    if filter.refused() {
        return Err(Error::TooComplex("too many elements or element names"));
    }
    Ok(filter.builder.sink)
}

/// Tokenizes `html` with a sink that drops every token: the tokenizer's share of [`parse`], for
/// the throughput example.
pub fn tokenize_only(html: &str) {
    struct Drop;
    impl TokenSink for Drop {
        type Handle = ();
        fn process_token(&self, _: Token, _: u64) -> TokenSinkResult<()> {
            TokenSinkResult::Continue
        }
    }
    let tokenizer = Tokenizer::new(Drop, TokenizerOpts::default());
    let input = BufferQueue::default();
    input.push_back(StrTendril::from_slice(html));
    while !matches!(tokenizer.feed(&input), TokenizerResult::Done) {}
    tokenizer.end();
}

struct Filter {
    builder: TreeBuilder<Handle, RcDom>,
    limits: Limits,
    state: RefCell<State>,
    /// Set past [`Limits::max_elements`]: the rest of the page is read as plain text and dropped.
    refused: Cell<bool>,
    /// Text not yet given to the tree builder. The tokenizer hands text over in pieces (one
    /// per character reference, such as each `&lt;`, and more); the tree builder would take
    /// each through its insertion mode and append it to the text node. Here consecutive
    /// pieces are joined and given as one (the HTML standard's tree construction reads text a
    /// character at a time, so how it is cut changes nothing). At most the text between two
    /// tags, bounded by the page ([`Limits::max_bytes`]).
    text: RefCell<Option<StrTendril>>,
}

/// An element name as a key of [`State::open_by_name`], hashed by its text. `LocalName`'s own
/// `Hash` gives the hasher only string_cache's 32-bit hash of the name, which is not keyed, and
/// for a name of up to seven bytes is the name's bytes folded in half: a page can give
/// thousands of names one hash (`abcxabc`, `abdxabd`, ...), and every lookup among them would
/// compare them all (a 1 MB page of them ran past the parse deadline). By its text, through
/// std's keyed hasher, the page cannot choose collisions.
#[derive(PartialEq, Eq)]
struct NameKey(LocalName);

impl std::hash::Hash for NameKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As `str` hashes, so that a `&str` finds its key (see the `Borrow`).
        (*self.0).hash(state);
    }
}

/// Two atoms are equal exactly when their texts are (atoms are interned).
impl std::borrow::Borrow<str> for NameKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

#[derive(Default)]
struct State {
    elements: usize,
    /// Counted open elements (see [`counted`]) and the element being dropped, innermost last.
    open: Vec<Open>,
    /// How many entries of `open` have each name, so a stray end tag is ignored in O(1).
    /// Keyed by the name's text with std's keyed hasher: names are the page's to choose (see
    /// [`NameKey`]). An entry per distinct name, so at most [`Limits::max_elements`].
    open_by_name: HashMap<NameKey, usize>,
    /// Set when a name would have been past [`MAX_ELEMENT_NAMES`]: the next start tag refuses
    /// the page.
    too_many_names: bool,
    /// Open `<article>`, `<main>` or `role="main"` elements: a `<header>` or `<footer>` inside
    /// one is the article's own (its title, its byline) and is kept.
    content_depth: usize,
    /// Open (and not flattened) lists, block quotes, definition lists and tables.
    block_depth: usize,
    /// The index in `open` of the element being dropped with its content. Elements opened
    /// inside it are still tracked, so that its end is found as the tree builder would find it:
    /// its own end tag, or the end tag of an element around it.
    skipping: Option<usize>,
}

struct Open {
    name: LocalName,
    /// Past the depth limit: its tags are dropped, its content kept.
    flattened: bool,
    content: bool,
    /// A list, block quote, definition list or table (see [`MAX_BLOCK_NESTING`]).
    block: bool,
}

/// Elements removed with their content.
fn dropped_element(name: &LocalName) -> bool {
    matches!(
        *name,
        local_name!("style")
            | local_name!("noscript")
            | local_name!("template")
            | local_name!("svg")
            | local_name!("math")
            | local_name!("iframe")
            | local_name!("object")
            | local_name!("embed")
            | local_name!("canvas")
            | local_name!("nav")
            | local_name!("button")
            | local_name!("input")
            | local_name!("select")
            | local_name!("textarea")
            | local_name!("dialog")
            | local_name!("audio")
            | local_name!("video")
            | local_name!("map")
            | local_name!("link")
    )
}

/// Elements that have no content, so no end tag to wait for.
fn void(name: &LocalName) -> bool {
    matches!(
        *name,
        local_name!("area")
            | local_name!("base")
            | local_name!("br")
            | local_name!("col")
            | local_name!("embed")
            | local_name!("hr")
            | local_name!("img")
            | local_name!("input")
            | local_name!("link")
            | local_name!("meta")
            | local_name!("source")
            | local_name!("track")
            | local_name!("wbr")
            | local_name!("param")
            | local_name!("keygen")
            | local_name!("frame")
    )
}

/// Whether an element counts for nesting. Elements whose end tag HTML lets authors omit are
/// not counted, since the tree builder closes them implicitly; it cannot nest these inside
/// themselves without a counted element between, so the tree's depth stays within about twice
/// the counted depth.
fn counted(name: &LocalName) -> bool {
    !void(name)
        && !matches!(
            *name,
            local_name!("p")
                | local_name!("li")
                | local_name!("dt")
                | local_name!("dd")
                | local_name!("tr")
                | local_name!("td")
                | local_name!("th")
                | local_name!("thead")
                | local_name!("tbody")
                | local_name!("tfoot")
                | local_name!("option")
                | local_name!("optgroup")
                | local_name!("rt")
                | local_name!("rp")
                | local_name!("colgroup")
                | local_name!("caption")
                | local_name!("html")
                | local_name!("head")
                | local_name!("body")
        )
}

/// How the tokenizer must read the content of an element it enters, as the tree builder would
/// tell it: text-only elements end only at their own end tag.
fn raw_kind(name: &LocalName) -> Option<RawKind> {
    match *name {
        local_name!("script") => Some(RawKind::ScriptData),
        local_name!("style")
        | local_name!("xmp")
        | local_name!("iframe")
        | local_name!("noembed")
        | local_name!("noframes")
        | local_name!("noscript") => Some(RawKind::Rawtext),
        local_name!("textarea") | local_name!("title") => Some(RawKind::Rcdata),
        _ => None,
    }
}

/// Attributes the conversion reads; every other one is removed here.
fn keep_attribute(tag: &LocalName, name: &LocalName) -> bool {
    match *name {
        local_name!("href") => matches!(*tag, local_name!("a") | local_name!("base")),
        // A link to the page in another language: how the walk knows a language bar.
        local_name!("hreflang") => *tag == local_name!("a"),
        local_name!("src") | local_name!("alt") => *tag == local_name!("img"),
        // A link's title is a tooltip, not text the page shows (Sphinx puts one on every
        // reference, mostly the link's text again); an image's title may be its caption.
        local_name!("title") => *tag == local_name!("img"),
        local_name!("colspan") | local_name!("rowspan") => {
            matches!(*tag, local_name!("td") | local_name!("th"))
        }
        local_name!("start") => *tag == local_name!("ol"),
        local_name!("class") => matches!(*tag, local_name!("code") | local_name!("pre")),
        local_name!("name") | local_name!("property") | local_name!("content") => {
            *tag == local_name!("meta")
        }
        local_name!("type") => *tag == local_name!("script"),
        _ => false,
    }
}

/// What the attributes of a start tag decide.
#[derive(Default)]
struct Verdict {
    hidden: bool,
    json_ld: bool,
    /// ARIA landmarks that mean navigation or search, and the classes that mean navigation in
    /// generators older than `<nav>` (see [`NAVIGATION_CLASSES`]).
    role_nav: bool,
    /// ARIA landmarks that mean the page's header or footer.
    role_chrome: bool,
    /// Sphinx's (and others') `¶` link that makes a heading linkable: nothing to read.
    permalink: bool,
    /// `class="footer"` or `id="footer"`: how generators older than `<footer>` (Sphinx,
    /// AsciiDoc, Doxygen) mark the page's footer. Treated as `<footer>`.
    footer: bool,
    /// `role="main"`: the page's content, as `<main>`.
    role_main: bool,
    /// An `<img>` whose `alt` is empty: HTML's mark of an image that is not content (a bullet,
    /// a spacer, a logo beside the site's name), which a reader of the Markdown could only see
    /// as `![](url)`.
    decorative: bool,
}

/// Classes that mark navigation where a page has no `<nav>`: DocBook XSL's links to the
/// previous, next and parent pages above and below each page (PostgreSQL's manual, the GNU and
/// FreeBSD documentation), and trails of breadcrumbs (Bootstrap and the themes built on it).
/// Whole class names, compared without case; what merely contains them (`navheader-title`) stays.
const NAVIGATION_CLASSES: [&str; 4] = ["navheader", "navfooter", "breadcrumb", "breadcrumbs"];

fn judge(tag: &Tag) -> Verdict {
    let mut v = Verdict::default();
    for attr in &tag.attrs {
        let value = attr.value.trim();
        match attr.name.local {
            local_name!("hidden") => v.hidden = true,
            local_name!("aria-hidden") => v.hidden |= value.eq_ignore_ascii_case("true"),
            local_name!("role") => {
                v.role_nav |= value.eq_ignore_ascii_case("navigation")
                    || value.eq_ignore_ascii_case("search");
                v.role_chrome = value.eq_ignore_ascii_case("banner")
                    || value.eq_ignore_ascii_case("contentinfo");
                v.role_main = value.eq_ignore_ascii_case("main");
            }
            local_name!("id") => v.footer |= value.eq_ignore_ascii_case("footer"),
            local_name!("alt") => v.decorative = tag.name == local_name!("img") && value.is_empty(),
            local_name!("type") if tag.name == local_name!("script") => {
                v.json_ld = value.eq_ignore_ascii_case("application/ld+json");
            }
            local_name!("class") => {
                for class in value.split_ascii_whitespace() {
                    v.permalink |= class == "headerlink" && tag.name == local_name!("a");
                    v.footer |= class.eq_ignore_ascii_case("footer");
                    v.role_nav |= NAVIGATION_CLASSES
                        .iter()
                        .any(|nav| class.eq_ignore_ascii_case(nav));
                }
            }
            _ => {}
        }
    }
    v
}

impl Filter {
    /// Whether the page is refused: too many elements, or too many names.
    fn refused(&self) -> bool {
        self.refused.get() || self.state.borrow().too_many_names
    }

    fn forward(&self, token: Token, line: u64) -> TokenSinkResult<Handle> {
        self.flush_text(line);
        self.builder.process_token(token, line)
    }

    /// Joins `text` to the text held for the tree builder.
    fn hold_text(&self, text: StrTendril) -> TokenSinkResult<Handle> {
        let mut held = self.text.borrow_mut();
        match held.as_mut() {
            // A tendril right after another in the same buffer extends it without a copy.
            Some(held) => held.push_tendril(&text),
            None => *held = Some(text),
        }
        TokenSinkResult::Continue
    }

    /// Gives the held text to the tree builder, before any other token.
    fn flush_text(&self, line: u64) {
        let held = self.text.borrow_mut().take();
        if let Some(text) = held {
            // The tree builder answers text with `Continue`: it never changes the tokenizer's
            // state.
            let _ = self
                .builder
                .process_token(Token::CharacterTokens(text), line);
        }
    }

    fn start_tag(&self, mut tag: Tag, line: u64) -> TokenSinkResult<Handle> {
        let mut state = self.state.borrow_mut();
        state.elements += 1;
        if state.elements > self.limits.max_elements || state.too_many_names {
            self.refused.set(true);
            // Nothing after this is read as markup; the caller refuses the page.
            return TokenSinkResult::Plaintext;
        }
        // Self-closing is honoured only for foreign elements, which are dropped here anyway.
        let closes_itself =
            tag.self_closing && matches!(tag.name, local_name!("svg") | local_name!("math"));
        let has_content = !void(&tag.name) && !closes_itself;
        // While skipping, the dropped element is at `at` (end tags that pop it end the skip);
        // `get` rather than indexing, so a broken invariant ends the skip instead of panicking.
        let skipped = state
            .skipping
            .and_then(|at| Some((at, state.open.get(at)?.name.clone())));
        if skipped.is_none() {
            state.skipping = None;
        }
        if let Some((at, root)) = skipped {
            let root = &root;
            // A dropped `<li>`, `<p>`, `<tr>`... ends where the next one starts.
            let sibling = !counted(root) && *root == tag.name && state.open.len() == at + 1;
            if !sibling {
                let foreign = matches!(*root, local_name!("svg") | local_name!("math"));
                // A script or style inside dropped HTML is still read as text, so markup in
                // its text cannot end the dropped element early.
                let raw = raw_kind(&tag.name).filter(|_| !foreign && has_content);
                if has_content && counted(&tag.name) {
                    state.push(tag.name, false, false, false);
                }
                return match raw {
                    Some(kind) => TokenSinkResult::RawData(kind),
                    None => TokenSinkResult::Continue,
                };
            }
            state.pop();
            state.skipping = None;
        }
        let v = judge(&tag);
        let name = &tag.name;
        let dropped = v.hidden
            || v.role_nav
            || v.permalink
            || v.decorative
            || dropped_element(name)
            || ((v.role_chrome
                || v.footer
                || matches!(*name, local_name!("header") | local_name!("footer")))
                && state.content_depth == 0)
            || (*name == local_name!("script") && !v.json_ld);
        if dropped {
            if !has_content {
                return TokenSinkResult::Continue;
            }
            state.skipping = Some(state.open.len());
            state.push(tag.name.clone(), false, false, false);
            return match raw_kind(&tag.name) {
                Some(kind) => TokenSinkResult::RawData(kind),
                None => TokenSinkResult::Continue,
            };
        }
        let tag_name = tag.name.clone();
        tag.attrs.retain(|a| {
            // `role="main"` marks the content for the walk's search for navigation
            // (`navigation.rs`), as `<main>` does.
            let main = v.role_main && a.name.local == local_name!("role");
            (keep_attribute(&tag_name, &a.name.local) || main)
                && a.value.len() <= MAX_ATTRIBUTE_BYTES
                && !(a.name.local == local_name!("src")
                    && a.value.trim_start().starts_with("data:"))
        });
        if !has_content || !counted(&tag_name) {
            drop(state);
            return self.forward(Token::TagToken(tag), line);
        }
        let block = matches!(
            tag_name,
            local_name!("ul")
                | local_name!("ol")
                | local_name!("blockquote")
                | local_name!("dl")
                | local_name!("table")
        );
        // A `<span>` has no attributes left here and means nothing in Markdown: its tags never
        // reach the tree (Sphinx and syntax highlighters put a few on every line).
        let flattened = state.open.len() >= self.limits.max_depth
            || (block && state.block_depth >= MAX_BLOCK_NESTING)
            || tag_name == local_name!("span");
        let content =
            v.role_main || matches!(tag_name, local_name!("article") | local_name!("main"));
        state.push(tag_name, flattened, content, block && !flattened);
        drop(state);
        if flattened {
            // The text stays; only the element's own tags go.
            return TokenSinkResult::Continue;
        }
        self.forward(Token::TagToken(tag), line)
    }

    fn end_tag(&self, tag: Tag, line: u64) -> TokenSinkResult<Handle> {
        let mut state = self.state.borrow_mut();
        if state.open_by_name.get(&*tag.name).is_none_or(|&n| n == 0) {
            // Stray, void or uncounted: the tree builder knows what to do with it.
            if state.skipping.is_some() {
                return TokenSinkResult::Continue;
            }
            drop(state);
            return self.forward(Token::TagToken(tag), line);
        }
        // Close everything opened inside it (as the tree builder will), then the element.
        let mut matched = None;
        while let Some(open) = state.pop() {
            if open.name == tag.name {
                matched = Some(open);
                break;
            }
        }
        if let Some(at) = state.skipping {
            if state.open.len() > at {
                return TokenSinkResult::Continue;
            }
            state.skipping = None;
            if state.open.len() == at {
                // The dropped element's own end tag.
                return TokenSinkResult::Continue;
            }
        }
        drop(state);
        if matched.is_some_and(|open| open.flattened) {
            return TokenSinkResult::Continue;
        }
        self.forward(Token::TagToken(tag), line)
    }
}

impl State {
    fn push(&mut self, name: LocalName, flattened: bool, content: bool, block: bool) {
        if content {
            self.content_depth += 1;
        }
        if block {
            self.block_depth += 1;
        }
        let names = self.open_by_name.len();
        match self.open_by_name.entry(NameKey(name.clone())) {
            Entry::Occupied(mut seen) => *seen.get_mut() += 1,
            Entry::Vacant(_) if names >= MAX_ELEMENT_NAMES => self.too_many_names = true,
            Entry::Vacant(new) => {
                new.insert(1);
            }
        }
        self.open.push(Open {
            name,
            flattened,
            content,
            block,
        });
    }

    fn pop(&mut self) -> Option<Open> {
        let open = self.open.pop()?;
        if let Some(n) = self.open_by_name.get_mut(&*open.name) {
            *n = n.saturating_sub(1);
        }
        if open.content {
            self.content_depth = self.content_depth.saturating_sub(1);
        }
        if open.block {
            self.block_depth = self.block_depth.saturating_sub(1);
        }
        Some(open)
    }
}

impl TokenSink for Filter {
    type Handle = Handle;

    fn process_token(&self, token: Token, line: u64) -> TokenSinkResult<Handle> {
        if self.refused.get() {
            return TokenSinkResult::Continue;
        }
        match token {
            Token::TagToken(tag) => match tag.kind {
                TagKind::StartTag => self.start_tag(tag, line),
                TagKind::EndTag => self.end_tag(tag, line),
            },
            Token::EOFToken => self.forward(token, line),
            // Comments are not read by the converter, and parse errors are not reported.
            Token::CommentToken(_) | Token::ParseError(_) => TokenSinkResult::Continue,
            _ if self.state.borrow().skipping.is_some() => TokenSinkResult::Continue,
            Token::CharacterTokens(text) if crate::options::reduce_tree() => self.hold_text(text),
            other => self.forward(other, line),
        }
    }

    fn end(&self) {
        self.flush_text(0);
        self.builder.end();
    }

    fn adjusted_current_node_present_but_not_in_html_namespace(&self) -> bool {
        // Text can move the tree builder's current node (text before `<body>` opens it).
        self.flush_text(0);
        self.builder
            .adjusted_current_node_present_but_not_in_html_namespace()
    }
}

#[cfg(test)]
mod tests {
    use html5ever::serialize::{SerializeOpts, TraversalScope, serialize};
    use markup5ever_rcdom::{NodeData, SerializableHandle};

    use super::*;

    fn limits() -> Limits {
        Limits::default()
    }

    /// The `<body>`'s content (or the document's, with `head`) as HTML.
    fn run(html: &str, limits: &Limits) -> Result<String, Error> {
        let dom = parse(html, limits)?;
        Ok(inner_html(&dom.document, "body"))
    }

    fn find(node: &Handle, wanted: &str) -> Option<Handle> {
        let mut stack = vec![node.clone()];
        while let Some(n) = stack.pop() {
            if let NodeData::Element { name, .. } = &n.data
                && &*name.local == wanted
            {
                return Some(n);
            }
            stack.extend(n.children.borrow().iter().rev().cloned());
        }
        None
    }

    fn inner_html(document: &Handle, element: &str) -> String {
        let node = find(document, element).expect("element");
        let mut out = Vec::new();
        let opts = SerializeOpts {
            traversal_scope: TraversalScope::ChildrenOnly(None),
            ..SerializeOpts::default()
        };
        serialize(&mut out, &SerializableHandle::from(node), opts).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn drops_chrome_and_scripts_but_keeps_json_ld_and_article_headers() {
        let html = r#"<html><head><script>alert(1)</script><style>p{}</style>
            <script type="application/ld+json">{"a":1}</script></head><body>
            <header>site header</header><nav>menu</nav><div hidden>cookie banner</div>
            <div role="navigation">sidebar</div><div role="banner">banner</div>
            <article><header><h1>Title</h1></header><p onclick="x" class="c">Text</p></article>
            <footer>site footer</footer></body></html>"#;
        let dom = parse(html, &limits()).unwrap();
        let head = inner_html(&dom.document, "head");
        let out = inner_html(&dom.document, "body");
        assert!(!head.contains("alert") && !out.contains("alert"));
        assert!(!head.contains("p{}"));
        assert!(head.contains(r#"<script type="application/ld+json">{"a":1}</script>"#));
        assert!(!out.contains("site header"));
        assert!(!out.contains("menu"));
        assert!(!out.contains("cookie banner"));
        assert!(!out.contains("sidebar") && !out.contains(">banner<"));
        assert!(!out.contains("site footer"));
        assert!(out.contains("<header><h1>Title</h1></header>"));
        assert!(out.contains("<p>Text</p>"));
    }

    #[test]
    fn markup_inside_dropped_scripts_and_styles_does_not_end_them() {
        let html = r#"<p>a</p><script>var s = "</nav><p>in script</p>";</script>
            <nav><style>x</nav>{}</style><p>in nav</p></nav><p>b</p>
            <svg/><p>after svg</p><nav><nav>inner</nav>still nav</nav><p>c</p>"#;
        let out = run(html, &limits()).unwrap();
        assert!(!out.contains("script") && !out.contains("in nav"), "{out}");
        assert!(
            !out.contains("inner") && !out.contains("still nav"),
            "{out}"
        );
        assert!(
            out.contains("<p>b</p>") && out.contains("<p>after svg</p>"),
            "{out}"
        );
        assert!(out.contains("<p>c</p>"), "{out}");
    }

    #[test]
    fn sphinx_header_permalinks_are_dropped() {
        let html = r##"<h2>Options<a class="headerlink" href="#options" title="Link">¶</a></h2>
            <p><a class="reference" href="x.html">x</a></p>"##;
        let out = run(html, &limits()).unwrap();
        assert_eq!(
            out.split_whitespace().collect::<String>(),
            r#"<h2>Options</h2><p><ahref="x.html">x</a></p>"#
        );
    }

    #[test]
    fn footers_marked_by_class_or_id_go_unless_inside_the_content() {
        let html = r#"<div class="body" role="main"><p>Text</p>
            <div class="footer">Note footer</div></div>
            <div class="footer">&copy; Site</div><div id="footer">Last updated</div>
            <div class="card-footer">card</div>"#;
        let out = run(html, &limits()).unwrap();
        assert!(out.contains("Note footer") && out.contains("card"), "{out}");
        assert!(
            !out.contains("Site") && !out.contains("Last updated"),
            "{out}"
        );
    }

    #[test]
    fn navigation_marked_by_class_goes() {
        // DocBook XSL's page header and footer (PostgreSQL's manual), and a Bootstrap trail.
        let html = r#"<div class="navheader"><table summary="Navigation header"><tr>
            <td><a href="prev.html">Prev</a></td><td><a href="next.html">Next</a></td></tr>
            </table></div><div class="refentry"><h2>RESET</h2><p>Text</p></div>
            <div class="NAVFOOTER"><a href="up.html">Up</a></div>
            <main><ol class="breadcrumb"><li><a href="/">Home</a></li></ol><p>Body</p></main>
            <p class="navheader-title">kept</p>"#;
        let out = run(html, &limits()).unwrap();
        assert!(
            out.contains("<h2>RESET</h2>") && out.contains("Body"),
            "{out}"
        );
        assert!(out.contains("kept"), "{out}");
        for gone in ["Prev", "Next", "Up", "Home"] {
            assert!(!out.contains(gone), "{gone}: {out}");
        }
    }

    #[test]
    fn spans_never_reach_the_tree() {
        let html = r#"<p><em><span class="n"><span class="pre">h</span></span><span class="o">=</span>None</em> <span hidden>x</span></p>"#;
        assert_eq!(run(html, &limits()).unwrap(), "<p><em>h=None</em> </p>");
        // As one text node, `=` is not escaped as if it could start a line.
        let url = url::Url::parse("https://e.example/").unwrap();
        let md = crate::convert_html(html, Some(&url), &limits()).unwrap();
        assert_eq!(md, "*h=None*\n");
    }

    #[test]
    fn attributes_are_reduced_and_data_urls_dropped() {
        let long = "x".repeat(MAX_ATTRIBUTE_BYTES + 1);
        let html = format!(
            r#"<a href="/a" style="x" data-long="{long}">a</a><img src="data:image/png;base64,AAA" alt="pic"><a href="/{long}">b</a>"#
        );
        let out = run(&html, &limits()).unwrap();
        assert_eq!(out, r#"<a href="/a">a</a><img alt="pic"><a>b</a>"#);
    }

    #[test]
    fn nesting_past_the_limit_is_flattened() {
        let depth = 100_000;
        let html = format!("{}deep{}", "<div>".repeat(depth), "</div>".repeat(depth));
        let limits = Limits {
            max_depth: 64,
            ..Limits::default()
        };
        let out = run(&html, &limits).unwrap();
        assert_eq!(out.matches("<div>").count(), 64);
        assert!(out.contains("deep"));
        // Siblings after the deep part are back at depth 1 and keep their tags.
        let html = format!(
            "{}{}<div><b>after</b></div>",
            "<div>".repeat(200),
            "</div>".repeat(200)
        );
        let out = run(&html, &limits).unwrap();
        assert!(out.ends_with("<div><b>after</b></div>"), "{out}");
    }

    #[test]
    fn lists_and_quotes_nest_at_most_max_block_nesting_deep() {
        let html = format!("{}deep", "<ul><li><blockquote>".repeat(100));
        let out = run(&html, &limits()).unwrap();
        let (lists, quotes) = (
            out.matches("<ul>").count(),
            out.matches("<blockquote>").count(),
        );
        assert_eq!(lists + quotes, MAX_BLOCK_NESTING, "{out}");
        assert!(out.contains("deep"));
        // Divs do not count: the general depth limit applies to them.
        let html = format!("{}<ul><li>x</li></ul>", "<div>".repeat(100));
        assert!(
            run(&html, &limits())
                .unwrap()
                .contains("<ul><li>x</li></ul>")
        );
    }

    #[test]
    fn stray_end_tags_cost_nothing_and_misnesting_closes_inner_elements() {
        // A deep stack and many end tags that match nothing: linear, not quadratic.
        let html = format!("{}{}x", "<div>".repeat(100_000), "</span>".repeat(100_000));
        let started = std::time::Instant::now();
        run(&html, &limits()).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        let out = run("<div><blockquote><i>x</div><div>y</div>", &limits()).unwrap();
        // The tree builder reopens the unclosed `<i>` (HTML's formatting rules); the filter's
        // own stack closed `<blockquote>` and `<i>` with the `<div>`.
        assert_eq!(
            out,
            "<div><blockquote><i>x</i></blockquote></div><div><i>y</i></div>"
        );
    }

    #[test]
    fn element_cap_refuses() {
        let html = "<i>x</i>".repeat(1000);
        let limits = Limits {
            max_elements: 999,
            ..Limits::default()
        };
        assert!(matches!(run(&html, &limits), Err(Error::TooComplex(_))));
        let limits = Limits {
            max_elements: 1000,
            ..Limits::default()
        };
        assert!(run(&html, &limits).is_ok());
    }

    /// `pqrXpqr` for every three letters: names of seven bytes, which string_cache packs into
    /// the atom itself and hashes by folding in half, so all 17,576 have one hash.
    fn names_of_one_atom_hash() -> Vec<String> {
        let letters = || b'a'..=b'z';
        let mut names = Vec::new();
        for a in letters() {
            for b in letters() {
                for c in letters() {
                    let three = String::from_utf8(vec![a, b, c]).unwrap();
                    names.push(format!("{three}x{three}"));
                }
            }
        }
        names
    }

    /// The open elements are counted by name in a map keyed by the name's text: keyed by the
    /// atom, the map would hash only the atom's own hash, which a page can make the same for
    /// thousands of names.
    #[test]
    fn names_the_page_makes_collide_do_not_collide_in_the_open_elements_map() {
        use std::hash::BuildHasher;
        let names: Vec<LocalName> = names_of_one_atom_hash()
            .iter()
            .map(|n| LocalName::from(n.as_str()))
            .collect();
        let atom_hashes: std::collections::HashSet<u32> =
            names.iter().map(LocalName::get_hash).collect();
        assert_eq!(atom_hashes.len(), 1, "the atoms share one hash");
        let hasher = std::collections::hash_map::RandomState::new();
        let keys: std::collections::HashSet<u64> = names
            .iter()
            .map(|n| hasher.hash_one(NameKey(n.clone())))
            .collect();
        // 17,576 random 64-bit values: a repeat has a chance of about one in 10^11.
        assert_eq!(keys.len(), names.len());
    }

    /// Every distinct element name stays interned while the page is parsed, so a page may
    /// have only so many; those of one bucket would make each name read walk the others.
    #[test]
    fn pages_with_more_element_names_than_the_cap_are_refused() {
        let page = |names: &[String]| {
            let mut html = String::from("<body>");
            for name in names {
                html.push_str(&format!("<{name}>"));
            }
            html + "text"
        };
        let ordinary: Vec<String> = (0..=MAX_ELEMENT_NAMES).map(|i| format!("n{i}")).collect();
        let dom = parse(&page(&ordinary[..MAX_ELEMENT_NAMES]), &limits()).expect("at the cap");
        assert!(find(&dom.document, "n0").is_some());
        assert!(inner_html(&dom.document, "body").contains("text"));
        // One more, even as the page's last tag, is refused.
        for names in [&ordinary[..], &names_of_one_atom_hash()[..]] {
            let result = parse(&page(names), &limits());
            assert!(
                matches!(result, Err(Error::TooComplex(_))),
                "{} names",
                names.len()
            );
        }
    }
}
