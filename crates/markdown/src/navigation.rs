//! Navigation recognised by its shape, where the page does not mark it (no `<nav>`, no ARIA
//! role, no class the token filter knows): blocks of links with next to no other text, in the
//! places where pages put their chrome. One pass over the tree before the walk, linear in it.
//!
//! A block (`<div>`, `<p>`, a list, a table or one of its rows or cells, ...) is a *link list*
//! when it holds links to other pages and at most two words outside them (`|`, `>` and other
//! separators are not words), and holds no heading, code block, table header cell or image of
//! its own. Such a
//! block is dropped, the outermost one that qualifies, when it is
//!
//! 1. outside the page's content where the page marks its content (`<main>` or
//!    `role="main"`): a sidebar or a footer of links;
//! 2. where the page does not mark it, before the page's first `<h1>`: the site's menu and the
//!    breadcrumb trail above the title (the Apache manual's, and the menu column of a layout
//!    table on older sites). A page without an `<h1>` keeps such blocks;
//! 3. anywhere, a *language bar*: at least two links that say which language they lead to
//!    (`hreflang`), at most one link that does not, and at most three words besides
//!    ("Available Languages:");
//! 4. outside marked content, a *breadcrumb trail*: at least two links with nothing between
//!    them but `>`, `»`, `›`, `→` or `/`.
//!
//! What stays: every block with words of its own (a paragraph that cites pages, a list of
//! links with a description each), every heading, code block and image, and within the
//! content everything but language bars, so a table of contents or an index page of links keeps
//! all its links. Links to a fragment of the page itself (`href="#..."`, a table of contents)
//! do not count as links: the walk writes them as their text.
//!
//! Words are counted over the text in document order, so how the text is cut into nodes (the
//! token filter joins pieces the tokenizer cuts at character references) changes nothing, and
//! the pass decides the same on the tree the walk's reductions would make.

use std::rc::Rc;

use markup5ever_rcdom::{Handle, NodeData};

/// What a subtree holds, for the decision on the block at its root.
#[derive(Default, Clone, Copy)]
struct Holds {
    /// Links with a target that is not a fragment of this page.
    links: u32,
    /// Those of them with `hreflang`.
    language_links: u32,
    /// Words outside links (runs of letters or digits).
    words: u32,
    /// Characters outside links that are neither space, a word's, nor a breadcrumb arrow.
    other_marks: u32,
    /// Breadcrumb arrows outside links.
    arrows: u32,
    /// A heading, a code block, a table's header cell or an image outside a link: content
    /// that stays.
    content: bool,
    /// `<h1>`, `<main>` or `role="main"`: what decides the places of the rules.
    landmark: bool,
}

impl Holds {
    fn add(&mut self, other: &Holds) {
        self.links += other.links;
        self.language_links += other.language_links;
        self.words += other.words;
        self.other_marks += other.other_marks;
        self.arrows += other.arrows;
        self.content |= other.content;
        self.landmark |= other.landmark;
    }

    fn link_list(&self) -> bool {
        !self.content && !self.landmark && self.links >= 1 && self.words <= 2
    }

    fn language_bar(&self) -> bool {
        !self.content
            && !self.landmark
            && self.language_links >= 2
            && self.links - self.language_links <= 1
            && self.words <= 3
    }

    fn breadcrumbs(&self) -> bool {
        !self.content
            && !self.landmark
            && self.links >= 2
            && self.words == 0
            && self.arrows >= 1
            && self.other_marks == 0
    }
}

fn is_arrow(c: char) -> bool {
    matches!(c, '>' | '»' | '›' | '→' | '/')
}

/// Elements that may be dropped as navigation: blocks a page builds menus of.
fn block(name: &str) -> bool {
    matches!(
        name,
        "div"
            | "p"
            | "ul"
            | "ol"
            | "li"
            | "dl"
            | "table"
            | "tbody"
            | "tr"
            | "td"
            | "th"
            | "section"
            | "aside"
            | "header"
            | "footer"
            | "center"
            | "menu"
    )
}

fn is_main(name: &str, attrs: &[html5ever::Attribute]) -> bool {
    name == "main"
        || attrs
            .iter()
            .any(|a| &*a.name.local == "role" && a.value.trim().eq_ignore_ascii_case("main"))
}

/// Whether the page marks its content, and whether it has an `<h1>` (elements only, no text).
fn landmarks(document: &Handle) -> (bool, bool) {
    let (mut main, mut h1) = (false, false);
    let mut stack = vec![Rc::clone(document)];
    while let Some(node) = stack.pop() {
        if let NodeData::Element { name, attrs, .. } = &node.data {
            main |= is_main(&name.local, &attrs.borrow());
            h1 |= &*name.local == "h1";
            if main && h1 {
                break;
            }
        }
        stack.extend(node.children.borrow().iter().cloned());
    }
    (main, h1)
}

/// The blocks of `document` that are navigation by their shape (see the module's comment),
/// none inside another.
pub fn find(document: &Handle) -> Vec<Handle> {
    let (has_main, has_h1) = landmarks(document);
    let mut dropped: Vec<Handle> = Vec::new();
    // Open elements: the node, what its subtree holds so far, where `dropped` stood when it was
    // entered, and whether it is a link. A node is entered, then its children, then left.
    struct Open {
        node: Handle,
        holds: Holds,
        dropped_before: usize,
        link: bool,
    }
    let mut open: Vec<Open> = Vec::new();
    let mut pending: Vec<(Handle, bool)> = vec![(Rc::clone(document), false)];
    let (mut in_main, mut in_link) = (0usize, 0usize);
    let mut seen_h1 = false;
    // Whether the text so far ends inside a word (a word cut by a node boundary is one word).
    let mut in_word = false;
    while let Some((node, leaving)) = pending.pop() {
        if leaving {
            let Some(left) = open.pop() else { break };
            let NodeData::Element { name, attrs, .. } = &left.node.data else {
                continue;
            };
            let name = &*name.local;
            let main = is_main(name, &attrs.borrow());
            in_main -= usize::from(main);
            in_link -= usize::from(left.link);
            let holds = left.holds;
            let outside = in_main == 0;
            let navigation = block(name)
                && (holds.language_bar()
                    || (outside && has_main && holds.link_list())
                    || (outside && !has_main && has_h1 && !seen_h1 && holds.link_list())
                    || (outside && holds.breadcrumbs()));
            if navigation {
                // It replaces whatever was dropped inside it.
                dropped.truncate(left.dropped_before);
                dropped.push(Rc::clone(&left.node));
            }
            if let Some(parent) = open.last_mut() {
                parent.holds.add(&holds);
            }
            continue;
        }
        let mut holds = Holds::default();
        let mut link = false;
        match &node.data {
            NodeData::Text { contents } => {
                if let Some(parent) = open.last_mut() {
                    count_text(
                        &contents.borrow(),
                        in_link > 0,
                        &mut in_word,
                        &mut parent.holds,
                    );
                }
                continue;
            }
            NodeData::Element { name, attrs, .. } => {
                let attrs = attrs.borrow();
                let name = &*name.local;
                let href = attrs
                    .iter()
                    .find(|a| &*a.name.local == "href")
                    .map(|a| a.value.trim_start());
                if name == "a" && href.is_some_and(|h| !h.starts_with('#')) {
                    link = true;
                    holds.links = 1;
                    holds.language_links =
                        u32::from(attrs.iter().any(|a| &*a.name.local == "hreflang"));
                }
                let heading = matches!(name, "h1" | "h2" | "h3" | "h4" | "h5" | "h6");
                // A header cell makes a data table (layout tables of menus have none).
                holds.content =
                    heading || matches!(name, "pre" | "th") || (name == "img" && in_link == 0);
                holds.landmark = name == "h1" || is_main(name, &attrs);
                seen_h1 |= name == "h1";
                in_main += usize::from(is_main(name, &attrs));
                in_link += usize::from(link);
                // A block starts a new word.
                in_word &= !block(name);
            }
            _ => {}
        }
        open.push(Open {
            node: Rc::clone(&node),
            holds,
            dropped_before: dropped.len(),
            link,
        });
        pending.push((Rc::clone(&node), true));
        for child in node.children.borrow().iter().rev() {
            pending.push((Rc::clone(child), false));
        }
    }
    dropped
}

/// Adds a text's words and marks to `holds` (inside a link only its word boundaries are
/// followed: link text is the link's).
fn count_text(text: &str, quiet: bool, in_word: &mut bool, holds: &mut Holds) {
    for c in text.chars() {
        if c.is_alphanumeric() || c == '_' {
            if !*in_word && !quiet {
                holds.words += 1;
            }
            *in_word = true;
            continue;
        }
        *in_word = false;
        if quiet || c.is_whitespace() {
            continue;
        }
        if is_arrow(c) {
            holds.arrows += 1;
        } else if !matches!(
            c,
            '|' | '·' | '•' | ',' | ':' | '-' | '–' | '—' | '[' | ']' | '(' | ')'
        ) {
            holds.other_marks += 1;
        }
    }
}
