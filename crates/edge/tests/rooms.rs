//! The rooms stay rooms: no crate of the workspace keeps an import circle, and no feature file of
//! the edge imports the hubs (the request context, the reloaded state, the metrics registry, the
//! pipeline). A feature owns its request state, its runtime and its metric families; the hubs only
//! hold them.
//!
//! The graph is read from the sources: a file is a module (`src/a.rs` and `src/a/mod.rs` are `a`,
//! `src/a/b.rs` is `a::b`, `lib.rs`/`main.rs` the crate root), and a module imports another when
//! its production code names it: `crate::a::..` (and `use crate::{a::X, b::Y}`), `super::..`,
//! `self::..`, or, in a file with modules under it, `child::..`. Comments, string literals and
//! `#[cfg(test)]` items are left out: tests may reach anywhere. A module's `pub use` re-exports
//! are its public face, not imports (the crate root's, a folder's `mod.rs`): `crate::Name` or
//! `super::Name` of a re-exported name is an import of the module that defines it, and a module
//! imports another only where its own code uses it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The edge's hubs: they hold what each feature owns, so a feature that imports one is plugged
/// into every other feature through it.
const HUBS: &[&str] = &["ctx", "reload", "metrics", "pipeline"];

/// The edge's modules that may import the hubs, and why.
const MAY_IMPORT_HUBS: &[(&str, &str)] = &[
    ("ctx", "a hub: holds each feature's per-request state"),
    (
        "reload",
        "a hub: builds and holds each feature's runtime for a loaded policy",
    ),
    (
        "metrics",
        "a hub: registers and holds each feature's metric families",
    ),
    (
        "pipeline",
        "the request path's wiring: calls each feature at its step",
    ),
    (
        "server",
        "the process's wiring: builds the hubs, the listeners and the services",
    ),
    (
        "crate",
        "the crate root (main.rs): the command line, which starts the wiring",
    ),
    (
        "operator::admin",
        "the operator's listener: exposes the registry and the loaded state (trace, purge) as they are",
    ),
    (
        "origin::route",
        "the one way to the origin: hands each origin-facing feature its own piece of the request's state, on every route",
    ),
];

// One test per crate, so that a crate without circles stays so while another is untangled.

#[test]
fn the_edge_has_no_import_circle() {
    assert_no_circle("edge");
}

#[test]
fn the_policy_has_no_import_circle() {
    assert_no_circle("policy");
}

#[test]
fn the_problem_catalog_has_no_import_circle() {
    assert_no_circle("problem");
}

#[test]
fn the_markdown_converter_has_no_import_circle() {
    assert_no_circle("markdown");
}

#[test]
fn web_bot_auth_has_no_import_circle() {
    assert_no_circle("webbotauth");
}

#[test]
fn identification_has_no_import_circle() {
    assert_no_circle("identify");
}

fn assert_no_circle(krate: &str) {
    let graph = Graph::read(&workspace().join("crates").join(krate).join("src"));
    let report: String = graph
        .circles()
        .iter()
        .map(|circle| graph.describe(krate, circle))
        .collect();
    assert!(report.is_empty(), "import circles:\n{report}");
}

#[test]
fn no_feature_file_of_the_edge_imports_a_hub() {
    let graph = Graph::read(&workspace().join("crates/edge/src"));
    let offenders = graph.hub_imports();
    assert!(
        offenders.is_empty(),
        "feature files that import a hub ({}):\n{}",
        HUBS.join(", "),
        offenders.join("\n")
    );
}

/// The check finds what it is for: a planted circle (through `use crate::{..}`, `super::` and a
/// child path in a folder module) and a planted hub import, and is not fooled by comments,
/// strings or test modules.
#[test]
fn the_check_finds_a_planted_circle_and_a_hub_import() {
    let graph = Graph::from_sources(&[
        ("main.rs", "mod a; mod b; mod ctx; mod room;\nfn main() {}"),
        ("a.rs", "use crate::{b::X, room::Y};\npub struct A;"),
        ("b.rs", "pub struct X;\nfn f() { let _ = crate::a::A; }"),
        ("room/mod.rs", "mod inner;\npub use inner::Y;"),
        (
            "room/inner.rs",
            "pub struct Y;\nuse super::super::ctx::Ctx;",
        ),
        (
            "ctx.rs",
            "// crate::room is only mentioned\nconst S: &str = \"crate::room\";\npub struct Ctx;\n\
             #[cfg(test)]\nmod tests { use crate::a::A; }",
        ),
    ]);
    let circles = graph.circles();
    assert_eq!(circles, vec![vec!["a".to_string(), "b".to_string()]]);
    let described = graph.describe("planted", &circles[0]);
    assert!(described.contains("a -> b (src/a.rs:1)"), "{described}");
    assert!(described.contains("b -> a (src/b.rs:2)"), "{described}");
    let hubs = graph.hub_imports();
    assert_eq!(hubs.len(), 1, "{hubs:?}");
    assert!(hubs[0].starts_with("src/room/inner.rs:2"), "{hubs:?}");
}

fn workspace() -> PathBuf {
    // A checkout other than this one (to measure it) may be named in ROOMS_WORKSPACE.
    std::env::var_os("ROOMS_WORKSPACE").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
        PathBuf::from,
    )
}

/// One crate's modules and the imports between them, each with where it is first made.
struct Graph {
    /// Module path (`crate` for the root) -> its file, relative to the crate (`src/a.rs`).
    files: BTreeMap<String, String>,
    /// (from, to) -> the line of the first reference.
    edges: BTreeMap<(String, String), usize>,
}

impl Graph {
    fn read(src: &Path) -> Graph {
        let mut sources = Vec::new();
        collect(src, src, &mut sources);
        assert!(!sources.is_empty(), "no sources under {}", src.display());
        let borrowed: Vec<(&str, &str)> = sources
            .iter()
            .map(|(p, s)| (p.as_str(), s.as_str()))
            .collect();
        Graph::from_sources(&borrowed)
    }

    /// `sources`: (path under `src/`, text).
    fn from_sources(sources: &[(&str, &str)]) -> Graph {
        let mut files = BTreeMap::new();
        let mut tokens = BTreeMap::new();
        let mut test_only = BTreeSet::new();
        for (path, text) in sources {
            let Some(module) = module_of(path) else {
                continue;
            };
            let (kept, test_children) = strip_test_items(tokenize(text));
            for child in test_children {
                test_only.insert(join(&module, &child));
            }
            files.insert(module.clone(), format!("src/{path}"));
            tokens.insert(module, kept);
        }
        // A module declared only under #[cfg(test)] is test code, and so is what it holds.
        let is_test = |m: &str| {
            test_only
                .iter()
                .any(|t| m == t || m.starts_with(&format!("{t}::")))
        };
        files.retain(|m, _| !is_test(m));
        let modules: BTreeSet<String> = files.keys().cloned().collect();
        let named: BTreeMap<&String, Vec<Named>> = tokens
            .iter()
            .filter(|(m, _)| modules.contains(*m))
            .map(|(m, toks)| (m, paths(toks)))
            .collect();
        // Each module's re-exports: (module, name) -> the module that defines it. Read in two
        // rounds, so that a re-export of a re-export resolves too.
        let mut reexports = BTreeMap::new();
        for _ in 0..2 {
            let mut found = BTreeMap::new();
            for (module, paths) in &named {
                for n in paths.iter().filter(|n| n.reexport) {
                    if let Some(last) = n.path.last()
                        && let Some(to) = resolve(module, &n.path, &modules, &reexports)
                        && to != **module
                    {
                        let name = n.alias.clone().unwrap_or_else(|| last.clone());
                        found.insert(((*module).clone(), name), to);
                    }
                }
            }
            reexports = found;
        }
        let mut edges = BTreeMap::new();
        for (module, paths) in &named {
            for n in paths {
                if n.reexport {
                    continue;
                }
                if let Some(to) = resolve(module, &n.path, &modules, &reexports)
                    && to != **module
                {
                    edges.entry(((*module).clone(), to)).or_insert(n.line);
                }
            }
        }
        Graph { files, edges }
    }

    /// The strongly connected components of more than one module (Tarjan), each sorted.
    fn circles(&self) -> Vec<Vec<String>> {
        let names: Vec<&String> = self.files.keys().collect();
        let index_of: BTreeMap<&String, usize> =
            names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let mut next = vec![Vec::new(); names.len()];
        for (from, to) in self.edges.keys() {
            if let (Some(&f), Some(&t)) = (index_of.get(from), index_of.get(to)) {
                next[f].push(t);
            }
        }
        let mut tarjan = Tarjan {
            next: &next,
            index: vec![None; names.len()],
            low: vec![0; names.len()],
            on_stack: vec![false; names.len()],
            stack: Vec::new(),
            counter: 0,
            found: Vec::new(),
        };
        for v in 0..names.len() {
            if tarjan.index[v].is_none() {
                tarjan.visit(v);
            }
        }
        let mut circles: Vec<Vec<String>> = tarjan
            .found
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|c| {
                let mut members: Vec<String> = c.into_iter().map(|i| names[i].clone()).collect();
                members.sort();
                members
            })
            .collect();
        circles.sort();
        circles
    }

    /// A circle, its members' files and the imports inside it, each with where it is made.
    fn describe(&self, krate: &str, circle: &[String]) -> String {
        let mut out = format!(
            "crate {krate}: a circle of {} modules: {}\n",
            circle.len(),
            circle.join(", ")
        );
        for ((from, to), line) in &self.edges {
            if circle.contains(from) && circle.contains(to) {
                out.push_str(&format!("  {from} -> {to} ({}:{line})\n", self.files[from]));
            }
        }
        out
    }

    /// Every import of a hub by a module not allowed to make one: `file:line imports hub`.
    fn hub_imports(&self) -> Vec<String> {
        let hub_of = |m: &str| {
            HUBS.iter()
                .find(|h| m == **h || m.starts_with(&format!("{h}::")))
                .copied()
        };
        let allowed = |m: &str| {
            MAY_IMPORT_HUBS
                .iter()
                .any(|(a, _)| m == *a || (*a != "crate" && m.starts_with(&format!("{a}::"))))
        };
        self.edges
            .iter()
            .filter(|((from, _), _)| !allowed(from))
            .filter_map(|((from, to), line)| {
                hub_of(to).map(|hub| {
                    format!(
                        "{}:{line} imports crate::{to} (the hub {hub})",
                        self.files[from]
                    )
                })
            })
            .collect()
    }
}

struct Tarjan<'a> {
    next: &'a [Vec<usize>],
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    counter: usize,
    found: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    fn visit(&mut self, v: usize) {
        self.index[v] = Some(self.counter);
        self.low[v] = self.counter;
        self.counter += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for &w in &self.next[v] {
            match self.index[w] {
                None => {
                    self.visit(w);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.index[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                self.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            self.found.push(component);
        }
    }
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            out.push((relative, std::fs::read_to_string(&path).unwrap()));
        }
    }
}

/// `a.rs` -> `a`, `a/mod.rs` -> `a`, `a/b.rs` -> `a::b`, `lib.rs`/`main.rs` -> `crate`;
/// `bin/` holds other crates' roots and is not a module.
fn module_of(path: &str) -> Option<String> {
    if path.starts_with("bin/") {
        return None;
    }
    if path == "lib.rs" || path == "main.rs" {
        return Some("crate".into());
    }
    let stem = path.strip_suffix(".rs")?;
    let stem = stem.strip_suffix("/mod").unwrap_or(stem);
    Some(stem.replace('/', "::"))
}

fn join(module: &str, child: &str) -> String {
    if module == "crate" {
        child.to_string()
    } else {
        format!("{module}::{child}")
    }
}

fn parent(module: &str) -> Option<String> {
    match module {
        "crate" => None,
        m => Some(
            m.rsplit_once("::")
                .map_or("crate".into(), |(p, _)| p.to_string()),
        ),
    }
}

/// A token of code: an identifier, `::`, or one punctuation character; with its line.
#[derive(Clone, Debug, PartialEq)]
struct Token {
    text: String,
    line: usize,
}

/// The code's tokens, without comments, string, byte-string and character literals (whose text
/// could name anything).
fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let at = |k: usize| chars.get(i + k).copied().unwrap_or('\0');
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at_of(&chars, i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at_of(&chars, i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_string(&chars, i + 1, &mut line);
        } else if (c == 'r' || (c == 'b' && at(1) == 'r')) && (i == 0 || !ident(chars[i - 1])) && {
            let start = if c == 'b' { i + 2 } else { i + 1 };
            let mut j = start;
            while at_of(&chars, j) == '#' {
                j += 1;
            }
            at_of(&chars, j) == '"'
        } {
            // A raw string: r"..", r#".."#, br#".."#.
            let mut j = if c == 'b' { i + 2 } else { i + 1 };
            let mut hashes = 0;
            while chars[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|h| at_of(&chars, j + 1 + h) == '#') {
                    j += 1 + hashes;
                    break;
                }
                line += usize::from(chars[j] == '\n');
                j += 1;
            }
            i = j;
        } else if c == 'b' && at(1) == '"' {
            i = skip_string(&chars, i + 2, &mut line);
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}'), or a lifetime ('a), which is kept out too.
            if at(1) == '\\' {
                let mut j = i + 2;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
            } else if at(2) == '\'' {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && ident(chars[i]) {
                    i += 1;
                }
            }
        } else if ident(c) {
            let start = i;
            while i < chars.len() && ident(chars[i]) {
                i += 1;
            }
            tokens.push(Token {
                text: chars[start..i].iter().collect(),
                line,
            });
        } else if c == ':' && at(1) == ':' {
            tokens.push(Token {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            tokens.push(Token {
                text: c.to_string(),
                line,
            });
            i += 1;
        }
    }
    tokens
}

fn at_of(chars: &[char], i: usize) -> char {
    chars.get(i).copied().unwrap_or('\0')
}

/// Past the closing quote of a string whose text starts at `i`.
fn skip_string(chars: &[char], mut i: usize, line: &mut usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                *line += usize::from(at_of(chars, i + 1) == '\n');
                i += 2;
            }
            '"' => return i + 1,
            c => {
                *line += usize::from(c == '\n');
                i += 1;
            }
        }
    }
    i
}

/// The tokens without the items under `#[cfg(test)]`, and the names of the modules declared
/// there (`#[cfg(test)] mod x;`).
fn strip_test_items(tokens: Vec<Token>) -> (Vec<Token>, Vec<String>) {
    let text = |i: usize| tokens.get(i).map_or("", |t| t.text.as_str());
    let is_cfg_test = |i: usize| {
        ["#", "[", "cfg", "(", "test", ")", "]"]
            .iter()
            .enumerate()
            .all(|(k, want)| text(i + k) == *want)
    };
    let mut kept = Vec::new();
    let mut test_modules = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if !is_cfg_test(i) {
            kept.push(tokens[i].clone());
            i += 1;
            continue;
        }
        i += 7;
        // Further attributes of the same item.
        while text(i) == "#" && text(i + 1) == "[" {
            let mut depth = 0;
            i += 1;
            loop {
                match text(i) {
                    "[" => depth += 1,
                    "]" => {
                        depth -= 1;
                        if depth == 0 {
                            i += 1;
                            break;
                        }
                    }
                    "" => break,
                    _ => {}
                }
                i += 1;
            }
        }
        let mut j = i;
        if text(j) == "pub" {
            j += 1;
            if text(j) == "(" {
                while text(j) != ")" && !text(j).is_empty() {
                    j += 1;
                }
                j += 1;
            }
        }
        if text(j) == "mod" && text(j + 2) == ";" {
            test_modules.push(text(j + 1).to_string());
        }
        // The item: up to its `;`, or the `}` closing its first block.
        let mut depth = 0;
        while i < tokens.len() {
            match text(i) {
                "{" | "(" | "[" => depth += 1,
                "}" | ")" | "]" => {
                    depth -= 1;
                    if depth == 0 && text(i) == "}" {
                        i += 1;
                        break;
                    }
                }
                ";" if depth == 0 => {
                    i += 1;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
    }
    (kept, test_modules)
}

/// Every path the code names that starts at `crate`, `super`, `self` or a bare name followed by
/// `::` (use trees expanded), with its line. A bare name's path is resolved later: only a child
/// module's name makes it an import.
fn paths(tokens: &[Token]) -> Vec<Named> {
    let text = |i: usize| tokens.get(i).map_or("", |t| t.text.as_str());
    let mut out = Vec::new();
    let mut i = 0;
    // Whether the statement being read is a `pub use` (also `pub(crate) use`).
    let mut reexport = false;
    while i < tokens.len() {
        match text(i) {
            ";" | "{" | "}" => reexport = false,
            "use" => {
                reexport = text(i.wrapping_sub(1)) == "pub"
                    || (text(i.wrapping_sub(1)) == ")"
                        && text(i.wrapping_sub(3)) == "("
                        && text(i.wrapping_sub(4)) == "pub");
            }
            _ => {}
        }
        let starts = text(i + 1) == "::"
            && tokens[i]
                .text
                .chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
            && !matches!(text(i.wrapping_sub(1)), "::" | "$" | ".")
            && !(i > 0 && text(i - 1) == "::");
        if starts {
            let line = tokens[i].line;
            let prefix = vec![tokens[i].text.clone()];
            let mut found = Vec::new();
            i = tree(tokens, i + 2, prefix, line, &mut found);
            out.extend(found.into_iter().map(|(path, alias, line)| Named {
                path,
                alias,
                line,
                reexport,
            }));
        } else {
            i += 1;
        }
    }
    out
}

/// A path the code names.
struct Named {
    path: Vec<String>,
    /// The name a `use .. as name` gives it.
    alias: Option<String>,
    line: usize,
    /// Named by a `pub use`.
    reexport: bool,
}

/// Reads a use tree (or a plain path) from `i`, just past a `::`; pushes each full path, with
/// its `as` name.
fn tree(
    tokens: &[Token],
    mut i: usize,
    mut prefix: Vec<String>,
    line: usize,
    out: &mut Vec<(Vec<String>, Option<String>, usize)>,
) -> usize {
    let text = |i: usize| tokens.get(i).map_or("", |t| t.text.as_str());
    loop {
        if text(i) == "{" {
            i += 1;
            loop {
                match text(i) {
                    "}" => return i + 1,
                    "," => i += 1,
                    "" => return i,
                    "self" => {
                        out.push((prefix.clone(), None, line));
                        i += 1;
                    }
                    _ => {
                        // One subtree: a name, maybe followed by `::` and more.
                        let mut sub = prefix.clone();
                        sub.push(text(i).to_string());
                        if text(i + 1) == "::" {
                            i = tree(tokens, i + 2, sub, line, out);
                        } else {
                            i += 1;
                            let alias = (text(i) == "as").then(|| text(i + 1).to_string());
                            out.push((sub, alias, line));
                            // Anything else up to the next `,` or `}`.
                            while !matches!(text(i), "," | "}" | "") {
                                i += 1;
                            }
                        }
                    }
                }
            }
        }
        let name = text(i);
        if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
            out.push((prefix, None, line));
            return i;
        }
        prefix.push(name.to_string());
        if text(i + 1) == "::" {
            i += 2;
        } else {
            let alias = (text(i + 1) == "as").then(|| text(i + 2).to_string());
            out.push((prefix, alias, line));
            return i + 1;
        }
    }
}

/// The module `path`, named in `from`, refers to: the longest known module it starts with, or,
/// for a name the root re-exports, the module that defines it.
fn resolve(
    from: &str,
    path: &[String],
    modules: &BTreeSet<String>,
    reexports: &BTreeMap<(String, String), String>,
) -> Option<String> {
    let (mut base, rest) = match path.first().map(String::as_str) {
        Some("crate") => ("crate".to_string(), &path[1..]),
        Some("self") => (from.to_string(), &path[1..]),
        Some("super") => {
            let mut base = from.to_string();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base = parent(&base)?;
                rest = &rest[1..];
            }
            (base, rest)
        }
        // A bare name: an import only when it is a child module of `from`.
        Some(name) if modules.contains(&join(from, name)) => (from.to_string(), path),
        _ => return None,
    };
    for segment in rest {
        let deeper = join(&base, segment);
        if modules.contains(&deeper) {
            base = deeper;
        } else if let Some(defined) = reexports.get(&(base.clone(), segment.clone())) {
            return Some(defined.clone());
        } else {
            break;
        }
    }
    Some(base)
}
