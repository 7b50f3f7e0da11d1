//! One iterative walk over the parsed tree (html5ever builds it without recursion): collects the
//! page's title, description, image, `<base href>` and JSON-LD blocks, detaches `<head>` and
//! the JSON-LD scripts, makes link and image URLs absolute, unwraps block wrappers (see
//! [`unwrap_block_wrappers`]), joins neighbouring inline elements as htmd would (see
//! [`join_inline_runs`]), and refuses a tree deeper than
//! [`crate::MAX_TREE_DEPTH`] so htmd's recursive walk has a bounded stack.

use std::cell::RefCell;
use std::rc::Rc;

use html5ever::tendril::StrTendril;
use html5ever::{Attribute, LocalName, QualName, local_name, ns};
use markup5ever_rcdom::{Handle, Node, NodeData};
use url::Url;

use crate::options::{Error, LinkForm, MAX_JSON_LD_BLOCKS, MAX_TREE_DEPTH};

/// What the walk found.
#[derive(Default, Debug)]
pub struct Meta {
    pub title: Option<String>,
    pub og_title: Option<String>,
    pub description: Option<String>,
    pub og_description: Option<String>,
    pub image: Option<String>,
    /// The page URL, when a link was written root-relative to it (see [`LinkForm`]).
    pub url: Option<String>,
    pub json_ld: Vec<String>,
}

/// Frontmatter values longer than this are cut (at a character boundary).
const MAX_META_CHARS: usize = 1024;

/// [`walk_with`] writing every link absolute, with no bound on the code elements cut.
#[cfg(test)]
pub fn walk(document: &Handle, request_url: Option<&Url>) -> Result<Meta, Error> {
    walk_with(document, request_url, LinkForm::Absolute, usize::MAX)
}

/// Code elements cut at their links (see [`links_outside_code`]): at most one per this many
/// bytes of page.
pub const PAGE_BYTES_PER_CUT: usize = 128;

/// `page_bytes` is the size of the page parsed, which bounds the code elements cut.
pub fn walk_with(
    document: &Handle,
    request_url: Option<&Url>,
    link_form: LinkForm,
    page_bytes: usize,
) -> Result<Meta, Error> {
    let mut meta = Meta::default();
    let mut cuts_left = page_bytes / PAGE_BYTES_PER_CUT;
    let mut base: Option<String> = None;
    let mut links: Vec<(Handle, &'static str)> = Vec::new();
    let mut detach: Vec<Handle> = Vec::new();
    let mut pres: Vec<Handle> = Vec::new();
    let mut tables: Vec<Handle> = Vec::new();
    // Entries: a node, its depth, and whether it is inside a `<pre>` or `<code>` (whose
    // whitespace counts).
    let mut stack: Vec<(Handle, usize, bool)> = vec![(Rc::clone(document), 0, false)];
    while let Some((node, depth, mut in_pre)) = stack.pop() {
        if depth > MAX_TREE_DEPTH {
            return Err(Error::TooComplex("tree too deep"));
        }
        if let NodeData::Text { contents } = &node.data
            && !in_pre
        {
            plain_spaces(&mut contents.borrow_mut());
            continue;
        }
        if let NodeData::Element { name, attrs, .. } = &node.data {
            // htmd writes the content of both verbatim (see `is_pre` in its walker).
            in_pre |= matches!(name.local, local_name!("pre") | local_name!("code"));
            if !in_pre && wrapper_parent(&name.local) && crate::options::reduce_tree() {
                unwrap_block_wrappers(&node);
            }
            if !in_pre {
                links_outside_code(&node, &mut cuts_left);
            }
            join_inline_runs(&node);
            let attr = |wanted: &str| {
                attrs
                    .borrow()
                    .iter()
                    .find(|a| &*a.name.local == wanted)
                    .map(|a| a.value.to_string())
            };
            match &*name.local {
                "head" => detach.push(Rc::clone(&node)),
                "title" if meta.title.is_none() => meta.title = Some(text_of(&node)),
                "base" if base.is_none() => base = attr("href"),
                "meta" => {
                    let key = attr("property")
                        .or_else(|| attr("name"))
                        .map(|k| k.trim().to_ascii_lowercase());
                    let content = attr("content");
                    if let (Some(key), Some(content)) = (key, content) {
                        let slot = match key.as_str() {
                            "description" => &mut meta.description,
                            "og:description" => &mut meta.og_description,
                            "og:title" => &mut meta.og_title,
                            "og:image" | "og:image:url" | "og:image:secure_url" => &mut meta.image,
                            _ => &mut None,
                        };
                        if slot.is_none() && !content.trim().is_empty() {
                            *slot = Some(content);
                        }
                    }
                }
                "script" => {
                    if meta.json_ld.len() < MAX_JSON_LD_BLOCKS {
                        meta.json_ld.push(text_of(&node));
                    }
                    detach.push(Rc::clone(&node));
                    continue;
                }
                "a" => links.push((Rc::clone(&node), "href")),
                "img" => {
                    for a in attrs.borrow_mut().iter_mut() {
                        if matches!(a.name.local, local_name!("alt") | local_name!("title")) {
                            plain_spaces(&mut a.value);
                        }
                    }
                    links.push((Rc::clone(&node), "src"));
                }
                "pre" => pres.push(Rc::clone(&node)),
                "table" => tables.push(Rc::clone(&node)),
                _ => {}
            }
        }
        let children = node.children.borrow();
        // Reverse so the walk meets elements in document order (the first title wins).
        for child in children.iter().rev() {
            stack.push((Rc::clone(child), depth + 1, in_pre));
        }
    }

    let base_url = match (base.as_deref().map(str::trim), request_url) {
        (Some(b), Some(r)) => r.join(b).ok().or_else(|| Some(r.clone())),
        (Some(b), None) => Url::parse(b).ok(),
        (None, r) => r.cloned(),
    };
    // A link to a fragment of this same page (a table of contents, a "back to top", a
    // heading's own anchor) leads nowhere an agent can go: its text stays, its target goes.
    let page = request_url.map(without_fragment);
    // Whether a target was written root-relative, which puts the page URL in the frontmatter.
    let mut shortened = false;
    for (node, attr_name) in links {
        // Whether the link's target was a fragment of this page (and is gone).
        let mut to_this_page = false;
        if let NodeData::Element { attrs, .. } = &node.data {
            let is_link = attr_name == "href";
            let mut attrs = attrs.borrow_mut();
            attrs.retain(|a| {
                let is_url = &*a.name.local == attr_name;
                let value = a.value.trim_start();
                let fragment = is_link && page.is_none() && value.starts_with('#');
                to_this_page |= is_url && fragment;
                // A script URL is nothing an agent should follow.
                !(is_url && (value.to_ascii_lowercase().starts_with("javascript:") || fragment))
            });
            if let Some(base_url) = &base_url {
                let mut same_page = false;
                for a in attrs.iter_mut().filter(|a| &*a.name.local == attr_name) {
                    if let Ok(absolute) = base_url.join(a.value.trim()) {
                        same_page = is_link
                            && absolute.fragment().is_some()
                            && page == Some(without_fragment(&absolute));
                        let target = match (link_form, request_url) {
                            (LinkForm::RootRelative, Some(request_url)) => {
                                root_relative(&absolute, request_url)
                            }
                            _ => None,
                        };
                        shortened |= target.is_some() && !same_page;
                        let target = target.unwrap_or_else(|| as_written(&a.value, &absolute));
                        a.value = StrTendril::from(target);
                    }
                }
                if same_page {
                    attrs.retain(|a| &*a.name.local != attr_name);
                    to_this_page = true;
                }
            }
        }
        if attr_name == "href" && (!has_content(&node) || (to_this_page && !has_text(&node))) {
            // An empty link (an icon drawn by CSS) would be `[](url)`: nothing to read. An
            // image that led to a part of this page ("back to top", an arrow to the next
            // section) is an icon whose use went with the target.
            detach.push(node);
        }
    }
    for pre in pres {
        make_code_block(&pre);
    }
    for table in tables {
        even_out_cells(&table);
    }
    if let (Some(image), Some(base_url)) = (&meta.image, &base_url)
        && let Ok(absolute) = base_url.join(image.trim())
    {
        meta.image = Some(absolute.into());
    }
    remove_all(&detach);
    if shortened {
        meta.url = page.map(str::to_owned);
    }
    for field in [
        &mut meta.title,
        &mut meta.og_title,
        &mut meta.description,
        &mut meta.og_description,
        &mut meta.image,
    ] {
        if let Some(value) = field.take() {
            let value = clean(&value);
            if !value.is_empty() {
                *field = Some(value);
            }
        }
    }
    Ok(meta)
}

/// Elements whose children may take the place of a wrapper among them (see
/// [`unwrap_block_wrappers`]): htmd writes their content the same whatever nests it.
fn wrapper_parent(name: &LocalName) -> bool {
    matches!(
        *name,
        local_name!("body")
            | local_name!("div")
            | local_name!("section")
            | local_name!("article")
            | local_name!("main")
            | local_name!("header")
            | local_name!("footer")
            | local_name!("aside")
            | local_name!("dd")
    )
}

/// Elements htmd writes as a block with a blank line before and after whatever they hold
/// (the others of [`wrapper_parent`], as htmd's generic block handler, and these).
fn always_block(name: &LocalName) -> bool {
    (wrapper_parent(name) && *name != local_name!("body"))
        || matches!(
            *name,
            local_name!("p")
                | local_name!("h1")
                | local_name!("h2")
                | local_name!("h3")
                | local_name!("h4")
                | local_name!("h5")
                | local_name!("h6")
                | local_name!("pre")
                | local_name!("dl")
                | local_name!("dt")
                | local_name!("hr")
        )
}

/// Whether `node` is a `<div>` (or `<section>`, ...) holding only blocks: the blocks of its
/// first and last child already give the blank lines the wrapper would add (lists and tables,
/// which htmd may write without them, only in between), and whitespace between blocks is
/// dropped by htmd anyway.
fn is_block_wrapper(node: &Handle) -> bool {
    let NodeData::Element { name, .. } = &node.data else {
        return false;
    };
    // `<body>` holds the page: it is a parent of wrappers, never one itself.
    if !wrapper_parent(&name.local) || name.local == local_name!("body") {
        return false;
    }
    let children = node.children.borrow();
    let mut blocks = children.iter().filter(|child| match &child.data {
        NodeData::Text { contents } => !contents.borrow().bytes().all(|b| b.is_ascii_whitespace()),
        _ => true,
    });
    let mut first_last = (None, None);
    for child in blocks.by_ref() {
        let NodeData::Element { name, .. } = &child.data else {
            return false;
        };
        let inner = matches!(
            name.local,
            local_name!("ul") | local_name!("ol") | local_name!("table")
        );
        if !always_block(&name.local) && !inner {
            return false;
        }
        if first_last.0.is_none() {
            first_last.0 = Some(always_block(&name.local));
        }
        first_last.1 = Some(always_block(&name.local));
    }
    first_last == (Some(true), Some(true))
}

/// htmd writes each element's content into a string of its own and copies it into its
/// parent's, so every level of nesting copies the page's text once more; documentation
/// generators nest each paragraph in several `<div>`s (AsciiDoc: `div.sect1 >
/// div.sectionbody > div.paragraph > p`). A wrapper that holds only blocks (see
/// [`is_block_wrapper`]) is replaced by its blocks, which htmd writes the same. The parent's
/// children are rebuilt once, so the work is linear in the nodes moved.
fn unwrap_block_wrappers(parent: &Handle) {
    if !parent.children.borrow().iter().any(is_block_wrapper) {
        return;
    }
    let old = std::mem::take(&mut *parent.children.borrow_mut());
    let mut new = Vec::with_capacity(old.len());
    // Children still to place, last first; a wrapper's children are placed in its stead
    // (and may be wrappers themselves).
    let mut pending: Vec<Handle> = old.into_iter().rev().collect();
    while let Some(child) = pending.pop() {
        if is_block_wrapper(&child) {
            let inner = std::mem::take(&mut *child.children.borrow_mut());
            child.parent.set(None);
            pending.extend(inner.into_iter().rev().filter(|c| {
                !matches!(&c.data, NodeData::Text { contents }
                    if contents.borrow().bytes().all(|b| b.is_ascii_whitespace()))
            }));
        } else {
            child.parent.set(Some(Rc::downgrade(parent)));
            new.push(child);
        }
    }
    *parent.children.borrow_mut() = new;
}

/// `target` as a root-relative reference (its path, query and fragment) when it is on the
/// page's origin and reads back as itself against the page URL (see [`LinkForm::RootRelative`]).
fn root_relative<'a>(target: &'a Url, page: &Url) -> Option<&'a str> {
    let reference = &target[url::Position::BeforePath..];
    // Only a tuple origin (http, https, ws, wss, ftp) can be equal to another: `file:` and
    // opaque URLs never are. A path that starts with `//` would read as a host name.
    (matches!(target.scheme(), "http" | "https")
        && target.origin() == page.origin()
        && reference.starts_with('/')
        && !reference.starts_with("//"))
    .then_some(reference)
}

/// An absolute target as the page wrote it when that differs from the URL's serialization only
/// by the `/` the serializer gives an empty path (`http://example.org`, RFC 3986 section
/// 6.2.3: the same URL): the author's form, a character shorter, and the string a reader of
/// the page finds. Any other difference (case, escapes, dot segments) keeps the serialization.
fn as_written<'a>(written: &'a str, absolute: &'a Url) -> &'a str {
    let written = written.trim();
    match absolute.as_str().strip_suffix('/') {
        Some(bare) if bare == written && absolute.path() == "/" => written,
        _ => absolute.as_str(),
    }
}

/// A no-break space (U+00A0, `&nbsp;`) becomes a plain space. It keeps words on one line in a
/// browser, which Markdown's reader does not lay out; it is a token of its own (two bytes in
/// UTF-8, which cl100k_base does not join to the word after it, as it does a plain space), and
/// pages put it between words by the thousand (3% of the tokens of some corpora). Outside
/// `<pre>` and `<code>` only: there it may be what the code says. In the Markdown a plain space
/// reads the same but for layout: where a page has several in a row, htmd writes one space.
fn plain_spaces(text: &mut StrTendril) {
    if text.contains('\u{a0}') {
        *text = StrTendril::from(text.replace('\u{a0}', " "));
    }
}

/// The URL up to its fragment.
fn without_fragment(url: &Url) -> &str {
    let s = url.as_str();
    s.split_once('#').map_or(s, |(before, _)| before)
}

/// Whether a link holds text or an image. Links nest only through tables (a cell is a new
/// formatting scope), so a node is looked at for at most as many links as the tree is deep,
/// and the search stops at the first text.
fn has_content(link: &Handle) -> bool {
    let mut stack: Vec<Handle> = link.children.borrow().iter().rev().cloned().collect();
    while let Some(node) = stack.pop() {
        match &node.data {
            NodeData::Text { contents } if !contents.borrow().trim().is_empty() => return true,
            NodeData::Element { name, .. } if &*name.local == "img" => return true,
            _ => stack.extend(node.children.borrow().iter().rev().cloned()),
        }
    }
    false
}

/// Whether a link holds text (not only images); bounded as [`has_content`] is.
fn has_text(link: &Handle) -> bool {
    let mut stack: Vec<Handle> = link.children.borrow().iter().rev().cloned().collect();
    while let Some(node) = stack.pop() {
        match &node.data {
            NodeData::Text { contents } if !contents.borrow().trim().is_empty() => return true,
            _ => stack.extend(node.children.borrow().iter().rev().cloned()),
        }
    }
    false
}

/// htmd writes a fenced code block only for `<pre><code>`; Sphinx, AsciiDoc and many others
/// write a bare `<pre>`, which htmd would give as a paragraph, its lines run together. And a
/// code block shows its text verbatim, so markup inside (`<em>` in a synopsis, a link in
/// highlighted code) would come out as literal `*` or `[..](..)`. The `<pre>` becomes one
/// `<code>` (the page's own, keeping its language class, or a new one) holding the text a
/// browser shows.
fn make_code_block(pre: &Handle) {
    let existing = {
        let children = pre.children.borrow();
        match children.as_slice() {
            [only] if matches!(&only.data, NodeData::Element { name, .. } if &*name.local == "code") => {
                Some(Rc::clone(only))
            }
            _ => None,
        }
    };
    let code = existing.unwrap_or_else(|| new_element(local_name!("code"), Vec::new()));
    let mut text = StrTendril::new();
    let mut stack: Vec<Handle> = pre.children.borrow().iter().rev().cloned().collect();
    while let Some(node) = stack.pop() {
        match &node.data {
            NodeData::Text { contents } => text.push_tendril(&contents.borrow()),
            NodeData::Element { name, .. } if &*name.local == "br" => text.push_char('\n'),
            _ => stack.extend(node.children.borrow().iter().rev().cloned()),
        }
    }
    let text_node = Node::new(NodeData::Text {
        contents: RefCell::new(text),
    });
    adopt(&code, vec![text_node]);
    adopt(pre, vec![code]);
}

/// An HTML element, not yet in the tree.
fn new_element(tag: LocalName, attrs: Vec<Attribute>) -> Handle {
    Node::new(NodeData::Element {
        name: QualName::new(None, ns!(html), tag),
        attrs: RefCell::new(attrs),
        template_contents: RefCell::new(None),
        mathml_annotation_xml_integration_point: false,
    })
}

/// `children` become all of `parent`'s children.
fn adopt(parent: &Handle, children: Vec<Handle>) {
    for child in &children {
        child.parent.set(Some(Rc::downgrade(parent)));
    }
    *parent.children.borrow_mut() = children;
}

/// htmd reads a table's header from the first row of `<thead>`, or else from the first row that
/// has a `<th>`, and keeps only that row's `<th>` cells and every other row's `<td>` cells. A
/// row header (`<th>` beside `<td>`, as in the key-value tables of reference pages) or a `<td>`
/// in the header row would be lost with its text. So in the row htmd takes for the header every
/// cell becomes `<th>`, and in every other row every cell becomes `<td>`.
fn even_out_cells(table: &Handle) {
    let elements = |node: &Handle| -> Vec<Handle> {
        node.children
            .borrow()
            .iter()
            .filter(|c| matches!(c.data, NodeData::Element { .. }))
            .cloned()
            .collect()
    };
    let is = |node: &Handle, tag: LocalName| matches!(&node.data, NodeData::Element { name, .. } if name.local == tag);
    let has_th = |row: &Handle| elements(row).iter().any(|c| is(c, local_name!("th")));
    let mut header_found = false;
    for section in elements(table) {
        let NodeData::Element { name, .. } = &section.data else {
            continue;
        };
        match name.local {
            local_name!("thead") => {
                header_found = true;
                // htmd reads the first row (or the section itself, when it has no row).
                let row = elements(&section)
                    .into_iter()
                    .find(|r| is(r, local_name!("tr")))
                    .unwrap_or(Rc::clone(&section));
                if has_th(&row) {
                    rename_cells(&row, local_name!("td"), local_name!("th"));
                }
            }
            local_name!("tbody") | local_name!("tfoot") | local_name!("tr") => {
                let rows = if name.local == local_name!("tr") {
                    vec![Rc::clone(&section)]
                } else {
                    elements(&section)
                        .into_iter()
                        .filter(|r| is(r, local_name!("tr")))
                        .collect()
                };
                for row in rows {
                    if !header_found && has_th(&row) {
                        header_found = true;
                        rename_cells(&row, local_name!("td"), local_name!("th"));
                    } else {
                        rename_cells(&row, local_name!("th"), local_name!("td"));
                    }
                }
            }
            _ => {}
        }
    }
}

/// `<code><a href>name</a></code>` (a reference to a documented name) among `parent`'s
/// children becomes `<a href><code>name</code></a>`: htmd writes a code span's content
/// verbatim, so the link would come out as the literal text `` `[name](url)` ``, which no
/// reader takes for a link. A code element that holds links among other content
/// (`<code>void* <a href>apr_palloc</a>(apr_pool_t *p)</code>`, a signature whose names link to
/// their documentation; `<code><code><a href>Allow</a></code> from env</code>`) is cut at its
/// links: each link (or a code element that holds only a link) becomes a link around code, and
/// each run of content between them a code element of its own. The whitespace between a run
/// and a link goes outside both (htmd trims a code span's ends, which would join the words).
/// One pass over the children, made when the walk reaches the parent, so the walk then meets
/// the links (and resolves them) and the code elements.
///
/// A cut adds nodes (two code elements and two spaces for `<code>a <a>b</a> c</code>`, some
/// 1 KB on a page made of nothing else), which the memory the edge reserves per start tag does
/// not cover: `cuts_left` (one per [`PAGE_BYTES_PER_CUT`] of page) bounds them. Real pages are
/// far below it (17 cuts on the 1,016 pages of the Apache, Python and git manuals, at most 1%
/// of a page's bound); past it a code element stays whole, its links written as text.
fn links_outside_code(parent: &Handle, cuts_left: &mut usize) {
    let cut = |child: &Handle| {
        is_element(child, local_name!("code"))
            && child
                .children
                .borrow()
                .iter()
                .any(|c| code_link(c).is_some() || is_link(c))
    };
    if !parent.children.borrow().iter().any(cut) {
        return;
    }
    let old = std::mem::take(&mut *parent.children.borrow_mut());
    let mut new = Vec::with_capacity(old.len());
    for child in old {
        if !cut(&child) {
            new.push(child);
            continue;
        }
        let NodeData::Element { attrs, .. } = &child.data else {
            continue;
        };
        let whole = matches!(child.children.borrow().as_slice(), [only] if is_link(only));
        if !whole {
            if *cuts_left == 0 {
                new.push(child);
                continue;
            }
            *cuts_left -= 1;
        }
        let attrs = attrs.borrow().clone();
        let content = std::mem::take(&mut *child.children.borrow_mut());
        let mut run: Vec<Handle> = Vec::new();
        let mut after_link = false;
        for inner in content {
            let (link, code) = match code_link(&inner) {
                // A code element holding only a link: turned round as it stands.
                Some(link) => (link, inner),
                // The code element itself around the first link's text.
                None if is_link(&inner) && whole => (inner, Rc::clone(&child)),
                None if is_link(&inner) => (inner, new_element(local_name!("code"), attrs.clone())),
                None => {
                    run.push(inner);
                    continue;
                }
            };
            code_run(&mut new, std::mem::take(&mut run), &attrs, after_link, true);
            after_link = true;
            let text = std::mem::take(&mut *link.children.borrow_mut());
            if matches!(text.as_slice(), [only] if is_element(only, local_name!("code"))) {
                // Already code inside the link (`<code>see <a><code>x</code></a></code>`).
                adopt(&link, text);
            } else {
                adopt(&code, text);
                adopt(&link, vec![code]);
            }
            new.push(link);
        }
        code_run(&mut new, run, &attrs, true, false);
    }
    adopt(parent, new);
}

/// The link a `<code>` element holds as its one child.
fn code_link(node: &Handle) -> Option<Handle> {
    if !is_element(node, local_name!("code")) {
        return None;
    }
    match node.children.borrow().as_slice() {
        [only] if is_link(only) => Some(Rc::clone(only)),
        _ => None,
    }
}

fn is_link(node: &Handle) -> bool {
    matches!(&node.data, NodeData::Element { name, attrs, .. }
        if name.local == local_name!("a")
            && attrs.borrow().iter().any(|a| a.name.local == local_name!("href")))
}

fn is_element(node: &Handle, tag: LocalName) -> bool {
    matches!(&node.data, NodeData::Element { name, .. } if name.local == tag)
}

/// The content of a code element between its links, as a code element with `attrs` pushed to
/// `out`. Whitespace at an end that meets a link (`after_link`, `before_link`) goes outside it;
/// at the code element's own ends it stays, as in any code span.
fn code_run(
    out: &mut Vec<Handle>,
    mut run: Vec<Handle>,
    attrs: &[Attribute],
    after_link: bool,
    before_link: bool,
) {
    let text_of_run = |node: &Handle| match &node.data {
        NodeData::Text { contents } => Some(contents.borrow().clone()),
        _ => None,
    };
    let mut after = None;
    if before_link && let Some(text) = run.last().and_then(text_of_run) {
        let kept = text.trim_end().len();
        if kept < text.len() {
            after = Some(text_node(
                text.subtendril(kept as u32, (text.len() - kept) as u32),
            ));
            if kept == 0 {
                run.pop();
            } else {
                set_text(&run[run.len() - 1], text.subtendril(0, kept as u32));
            }
        }
    }
    if after_link && let Some(text) = run.first().and_then(text_of_run) {
        let kept = text.trim_start().len();
        let cut = text.len() - kept;
        if cut > 0 {
            out.push(text_node(text.subtendril(0, cut as u32)));
            if kept == 0 {
                run.remove(0);
            } else {
                set_text(&run[0], text.subtendril(cut as u32, kept as u32));
            }
        }
    }
    if !run.is_empty() {
        let code = new_element(local_name!("code"), attrs.to_vec());
        adopt(&code, run);
        out.push(code);
    }
    out.extend(after);
}

fn text_node(text: StrTendril) -> Handle {
    Node::new(NodeData::Text {
        contents: RefCell::new(text),
    })
}

fn set_text(node: &Handle, text: StrTendril) {
    if let NodeData::Text { contents } = &node.data {
        *contents.borrow_mut() = text;
    }
}

/// Every `from` cell of `row` replaced by a `to` cell with the same attributes and children.
fn rename_cells(row: &Handle, from: LocalName, to: LocalName) {
    let mut children = row.children.borrow_mut();
    for child in children.iter_mut() {
        let NodeData::Element { name, attrs, .. } = &child.data else {
            continue;
        };
        if name.local != from {
            continue;
        }
        let cell = new_element(to.clone(), attrs.take());
        adopt(&cell, std::mem::take(&mut *child.children.borrow_mut()));
        cell.parent.set(Some(Rc::downgrade(row)));
        *child = cell;
    }
}

/// Whitespace runs become one space, and the value is cut at [`MAX_META_CHARS`].
fn clean(value: &str) -> String {
    let mut out = String::with_capacity(value.len().min(MAX_META_CHARS));
    for (i, word) in value.split_whitespace().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word);
        if out.chars().count() > MAX_META_CHARS {
            out = out.chars().take(MAX_META_CHARS).collect();
            break;
        }
    }
    out
}

/// The concatenated text of a node's direct text children (title and script are raw text).
fn text_of(node: &Handle) -> String {
    let mut out = String::new();
    for child in node.children.borrow().iter() {
        if let NodeData::Text { contents } = &child.data {
            out.push_str(&contents.borrow());
        }
    }
    out
}

/// Detaches `nodes` from their parents, each parent's children rebuilt once: one at a time, a
/// paragraph of 200,000 empty links cost 200,000 passes over its children (11 s for 3 MB).
pub(crate) fn remove_all(nodes: &[Handle]) {
    let doomed: std::collections::HashSet<*const Node> = nodes.iter().map(Rc::as_ptr).collect();
    let mut parents: Vec<Handle> = Vec::new();
    let mut seen: std::collections::HashSet<*const Node> = std::collections::HashSet::new();
    for node in nodes {
        if let Some(parent) = node.parent.take().and_then(|weak| weak.upgrade())
            && seen.insert(Rc::as_ptr(&parent))
        {
            parents.push(parent);
        }
    }
    for parent in &parents {
        parent
            .children
            .borrow_mut()
            .retain(|child| !doomed.contains(&Rc::as_ptr(child)));
    }
    // Neighbours of a removed node may now join, and so may a parent left holding only text
    // with its own neighbours; each parent's children are looked at once.
    let mut grandparents = Vec::new();
    for parent in &parents {
        join_inline_runs(parent);
        if let Some(grandparent) = parent_of(parent)
            && seen.insert(Rc::as_ptr(&grandparent))
        {
            grandparents.push(grandparent);
        }
    }
    for grandparent in &grandparents {
        join_inline_runs(grandparent);
    }
}

fn parent_of(node: &Handle) -> Option<Handle> {
    let weak = node.parent.take()?;
    let parent = weak.upgrade();
    node.parent.set(Some(weak));
    parent
}

/// htmd joins neighbouring inline elements of one kind that each hold only text
/// (`<code>a</code><code>b</code>` is one code span) before it writes an element's children,
/// with a `Vec::remove` and a copy of the text so far for each join: 200,000 neighbouring
/// `<code>`s (2.8 MB) took 4.4 s. The same joins made here in one pass leave it none to make.
/// `<ol>` is left as it is: htmd writes its children without joining them.
pub(crate) fn join_inline_runs(parent: &Handle) {
    if !crate::options::reduce_tree()
        || matches!(&parent.data, NodeData::Element { name, .. } if name.local == local_name!("ol"))
    {
        return;
    }
    {
        let children = parent.children.borrow();
        if !children.windows(2).any(|pair| joins(&pair[0], &pair[1])) {
            return;
        }
    }
    let old = std::mem::take(&mut *parent.children.borrow_mut());
    let mut new: Vec<Handle> = Vec::with_capacity(old.len());
    for child in old {
        if let Some(last) = new.last()
            && joins(last, &child)
        {
            if let (Some(into), Some(from)) = (only_text(last), only_text(&child))
                && let (NodeData::Text { contents: into }, NodeData::Text { contents: from }) =
                    (&into.data, &from.data)
            {
                into.borrow_mut().push_tendril(&from.borrow());
            }
            child.parent.set(None);
        } else {
            new.push(child);
        }
    }
    *parent.children.borrow_mut() = new;
}

/// Whether htmd would join `second` into `first` (its `can_combine`): both inline elements of
/// one kind (`i` and `em`, `b` and `strong` count as one), not links, with the same attributes,
/// each holding one text node and nothing else.
pub(crate) fn joins(first: &Handle, second: &Handle) -> bool {
    let (
        NodeData::Element {
            name: name1,
            attrs: attrs1,
            template_contents: template1,
            mathml_annotation_xml_integration_point: mathml1,
        },
        NodeData::Element {
            name: name2,
            attrs: attrs2,
            template_contents: template2,
            mathml_annotation_xml_integration_point: mathml2,
        },
    ) = (&first.data, &second.data)
    else {
        return false;
    };
    let same_kind = name1 == name2
        || matches!(
            (&name1.local, &name2.local),
            (&local_name!("i"), &local_name!("em"))
                | (&local_name!("em"), &local_name!("i"))
                | (&local_name!("b"), &local_name!("strong"))
                | (&local_name!("strong"), &local_name!("b"))
        );
    same_kind
        && !htmd_block(&name1.local)
        && name1.local != local_name!("a")
        && only_text(first).is_some()
        && only_text(second).is_some()
        && template1.borrow().is_none()
        && template2.borrow().is_none()
        && *attrs1.borrow() == *attrs2.borrow()
        && mathml1 == mathml2
}

/// The node's one child when that is a text node.
fn only_text(node: &Handle) -> Option<Handle> {
    let children = node.children.borrow();
    match children.as_slice() {
        [only] if matches!(only.data, NodeData::Text { .. }) => Some(Rc::clone(only)),
        _ => None,
    }
}

/// The elements htmd treats as blocks (its `BLOCK_ELEMENTS`), which it never joins.
fn htmd_block(name: &LocalName) -> bool {
    matches!(
        &**name,
        "address"
            | "article"
            | "aside"
            | "base"
            | "basefont"
            | "blockquote"
            | "body"
            | "caption"
            | "center"
            | "col"
            | "colgroup"
            | "dd"
            | "details"
            | "dialog"
            | "dir"
            | "div"
            | "dl"
            | "dt"
            | "fieldset"
            | "figcaption"
            | "figure"
            | "footer"
            | "form"
            | "frame"
            | "frameset"
            | "h1"
            | "h2"
            | "h3"
            | "h4"
            | "h5"
            | "h6"
            | "head"
            | "header"
            | "hr"
            | "html"
            | "iframe"
            | "legend"
            | "li"
            | "link"
            | "main"
            | "menu"
            | "menuitem"
            | "nav"
            | "noframes"
            | "ol"
            | "optgroup"
            | "option"
            | "p"
            | "param"
            | "pre"
            | "script"
            | "search"
            | "section"
            | "style"
            | "summary"
            | "table"
            | "tbody"
            | "td"
            | "textarea"
            | "tfoot"
            | "th"
            | "thead"
            | "title"
            | "tr"
            | "track"
            | "ul"
    )
}
