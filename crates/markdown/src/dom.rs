//! One iterative walk over the parsed tree (html5ever builds it without recursion): collects the
//! page's title, description, image, `<base href>` and JSON-LD blocks, detaches `<head>` and
//! the JSON-LD scripts, makes link and image URLs absolute, and refuses a tree deeper than
//! [`crate::MAX_TREE_DEPTH`] so htmd's recursive walk has a bounded stack.

use std::rc::Rc;

use html5ever::tendril::StrTendril;
use markup5ever_rcdom::{Handle, NodeData};
use url::Url;

use crate::{Error, MAX_JSON_LD_BLOCKS, MAX_TREE_DEPTH};

/// What the walk found.
#[derive(Default, Debug)]
pub struct Meta {
    pub title: Option<String>,
    pub og_title: Option<String>,
    pub description: Option<String>,
    pub og_description: Option<String>,
    pub image: Option<String>,
    pub json_ld: Vec<String>,
}

/// Frontmatter values longer than this are cut (at a character boundary).
const MAX_META_CHARS: usize = 1024;

pub fn walk(document: &Handle, request_url: Option<&Url>) -> Result<Meta, Error> {
    let mut meta = Meta::default();
    let mut base: Option<String> = None;
    let mut links: Vec<(Handle, &'static str)> = Vec::new();
    let mut detach: Vec<Handle> = Vec::new();
    let mut stack: Vec<(Handle, usize)> = vec![(Rc::clone(document), 0)];
    while let Some((node, depth)) = stack.pop() {
        if depth > MAX_TREE_DEPTH {
            return Err(Error::TooComplex("tree too deep"));
        }
        if let NodeData::Element { name, attrs, .. } = &node.data {
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
                "img" => links.push((Rc::clone(&node), "src")),
                _ => {}
            }
        }
        let children = node.children.borrow();
        // Reverse so the walk meets elements in document order (the first title wins).
        for child in children.iter().rev() {
            stack.push((Rc::clone(child), depth + 1));
        }
    }

    let base_url = match (base.as_deref().map(str::trim), request_url) {
        (Some(b), Some(r)) => r.join(b).ok().or_else(|| Some(r.clone())),
        (Some(b), None) => Url::parse(b).ok(),
        (None, r) => r.cloned(),
    };
    for (node, attr_name) in links {
        if let NodeData::Element { attrs, .. } = &node.data {
            let mut attrs = attrs.borrow_mut();
            attrs.retain(|a| {
                let is_url = &*a.name.local == attr_name;
                // A script URL is nothing an agent should follow.
                !(is_url
                    && a.value
                        .trim_start()
                        .to_ascii_lowercase()
                        .starts_with("javascript:"))
            });
            if let Some(base_url) = &base_url {
                for a in attrs.iter_mut().filter(|a| &*a.name.local == attr_name) {
                    if let Ok(absolute) = base_url.join(a.value.trim()) {
                        a.value = StrTendril::from(absolute.as_str());
                    }
                }
            }
        }
    }
    if let (Some(image), Some(base_url)) = (&meta.image, &base_url)
        && let Ok(absolute) = base_url.join(image.trim())
    {
        meta.image = Some(absolute.into());
    }
    for node in detach {
        remove_from_parent(&node);
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

fn remove_from_parent(node: &Handle) {
    let parent = node.parent.take().and_then(|weak| weak.upgrade());
    if let Some(parent) = parent {
        parent
            .children
            .borrow_mut()
            .retain(|child| !Rc::ptr_eq(child, node));
    }
}
