//! The policy crate's modules import each other without a circle: neither its top-level modules
//! (a folder counted as one) nor the files inside one folder. A circle makes every module in it
//! depend on all the others; this test keeps the next change from quietly making one.
//!
//! What counts as an import: every `crate::…`, `super::…` and `self::…` path of a file's
//! production code (`use` declarations, braces expanded, and paths written inline), and in a
//! folder's `mod.rs` the paths that start with one of its files' names. Comments and
//! `#[cfg(test)]` modules are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use regex::Regex;

/// A module path from the crate root (`[]` for `lib.rs`, `["expr", "compile"]`).
type ModPath = Vec<String>;

struct Crate {
    /// Each production file's module path and text (comments and test modules cut out).
    files: BTreeMap<ModPath, (bool, String)>,
}

fn module_path(rel: &Path) -> ModPath {
    let mut parts: Vec<String> = rel
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn read(dir: &Path, root: &Path, out: &mut Vec<(ModPath, bool, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            read(&path, root, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(root).unwrap();
            let is_mod = matches!(
                rel.file_name().and_then(|n| n.to_str()),
                Some("mod.rs" | "lib.rs")
            );
            out.push((
                module_path(rel),
                is_mod,
                std::fs::read_to_string(&path).unwrap(),
            ));
        }
    }
}

impl Crate {
    fn load(src: &Path) -> Crate {
        let mut raw = Vec::new();
        read(src, src, &mut raw);
        let comment = Regex::new(r"(?s)//[^\n]*|/\*.*?\*/").unwrap();
        let test_file =
            Regex::new(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;").unwrap();
        let test_block = Regex::new(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{").unwrap();
        let mut test_only = BTreeSet::new();
        for (path, _, text) in &raw {
            for m in test_file.captures_iter(text) {
                let mut p = path.clone();
                p.push(m[1].to_owned());
                test_only.insert(p);
            }
        }
        let mut files = BTreeMap::new();
        for (path, is_mod, text) in raw {
            if test_only.contains(&path) {
                continue;
            }
            let text = comment.replace_all(&text, "").into_owned();
            let text = match test_block.find(&text) {
                Some(m) => text[..m.start()].to_owned(),
                None => text,
            };
            files.insert(path, (is_mod, text));
        }
        Crate { files }
    }

    /// The paths a file names: `use` trees expanded, and inline `crate::`/`super::`/`self::`.
    fn paths(text: &str) -> Vec<String> {
        let uses = Regex::new(r"\buse\s+([^;]+);").unwrap();
        let inline = Regex::new(r"(?:^|[^\w:])((?:crate|super|self)(?:::\w+)+)").unwrap();
        let mut out = Vec::new();
        for m in uses.captures_iter(text) {
            expand("", &m[1].replace(char::is_whitespace, ""), &mut out);
        }
        out.extend(inline.captures_iter(text).map(|m| m[1].to_owned()));
        out
    }

    /// The module a path names from `here`: the longest prefix that is a file of the crate.
    fn resolve(&self, here: &ModPath, is_mod: bool, path: &str) -> Option<ModPath> {
        let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        let (mut base, rest) = match *segs.first()? {
            "crate" => (Vec::new(), &segs[1..]),
            "self" => (here.clone(), &segs[1..]),
            "super" => {
                let mut base = here.clone();
                base.pop();
                let mut rest = &segs[1..];
                while rest.first() == Some(&"super") {
                    base.pop();
                    rest = &rest[1..];
                }
                (base, rest)
            }
            // A bare path in a folder's mod.rs may name one of its files.
            _ if is_mod => (here.clone(), &segs[..]),
            _ => return None,
        };
        for seg in rest {
            let mut next = base.clone();
            next.push((*seg).to_owned());
            if !self.files.contains_key(&next) {
                break;
            }
            base = next;
        }
        Some(base)
    }
}

/// Expands a `use` tree (`a::{b, c::{d, e}}`) into its paths.
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    for part in split_top(tree) {
        let part = part.split(" as ").next().unwrap_or("");
        match part.find('{') {
            Some(open) => {
                let close = part.rfind('}').unwrap_or(part.len());
                expand(
                    &format!("{prefix}{}", &part[..open]),
                    &part[open + 1..close],
                    out,
                );
            }
            None if !part.is_empty() => out.push(format!("{prefix}{part}")),
            None => {}
        }
    }
}

/// `tree` split at its commas outside braces.
fn split_top(tree: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in tree.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&tree[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&tree[start..]);
    parts
}

/// The strongly connected components of more than one node (Tarjan).
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        for w in s.edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let low = s.low[v].min(s.low[w.as_str()]);
                s.low.insert(v, low);
            } else if s.stack.contains(&w.as_str()) {
                let low = s.low[v].min(s.index[w.as_str()]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let at = s.stack.iter().rposition(|x| *x == v).unwrap();
            let component: Vec<String> = s.stack.drain(at..).map(str::to_owned).collect();
            if component.len() > 1 {
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.found
}

/// The import graphs: top-level modules, and the files of each folder.
fn graphs(krate: &Crate) -> Vec<(String, BTreeMap<String, BTreeSet<String>>)> {
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut folders: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let folder_names: BTreeSet<&str> = krate
        .files
        .keys()
        .filter(|p| p.len() > 1)
        .map(|p| p[0].as_str())
        .collect();
    for (here, (is_mod, text)) in &krate.files {
        let Some(first) = here.first() else { continue };
        top.entry(first.clone()).or_default();
        for path in Crate::paths(text) {
            let Some(target) = krate.resolve(here, *is_mod, &path) else {
                continue;
            };
            let Some(target_first) = target.first() else {
                continue;
            };
            if target_first != first {
                top.entry(first.clone())
                    .or_default()
                    .insert(target_first.clone());
            } else if folder_names.contains(first.as_str()) {
                let (a, b) = (
                    here[..here.len().min(2)].join("::"),
                    target[..target.len().min(2)].join("::"),
                );
                if a != b {
                    folders
                        .entry(first.clone())
                        .or_default()
                        .entry(a)
                        .or_default()
                        .insert(b);
                }
            }
        }
    }
    let mut out = vec![("the crate".to_owned(), top)];
    out.extend(folders.into_iter().map(|(f, g)| (format!("folder {f}"), g)));
    out
}

#[test]
fn no_module_circle_in_the_crate_nor_in_a_folder() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let krate = Crate::load(&src);
    let mut found = Vec::new();
    for (scope, graph) in graphs(&krate) {
        for circle in circles(&graph) {
            found.push(format!("{scope}: {}", circle.join(", ")));
        }
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

/// The check finds a circle where there is one: two top-level modules naming each other, and
/// two files of a folder through its mod.rs.
#[test]
fn a_circle_is_found() {
    let file = |path: &[&str], is_mod: bool, text: &str| {
        (
            path.iter().map(|s| (*s).to_owned()).collect::<ModPath>(),
            (is_mod, text.to_owned()),
        )
    };
    let krate = Crate {
        files: BTreeMap::from([
            file(&[], true, "mod a; mod b; mod f;"),
            file(&["a"], false, "use crate::b::{X, y::Z};"),
            file(&["b"], false, "fn f() { crate::a::g(); }"),
            file(&["f"], true, "mod x; mod y; pub use x::X;"),
            file(&["f", "x"], false, "use super::Shared;"),
            file(&["f", "y"], false, "use super::x::X;"),
        ]),
    };
    let found: Vec<Vec<String>> = graphs(&krate)
        .iter()
        .flat_map(|(_, g)| circles(g))
        .collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found
            .iter()
            .any(|c| c.contains(&"a".to_owned()) && c.contains(&"b".to_owned()))
    );
    assert!(
        found
            .iter()
            .any(|c| c.contains(&"f".to_owned()) && c.contains(&"f::x".to_owned()))
    );
}
