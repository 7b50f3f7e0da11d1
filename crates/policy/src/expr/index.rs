//! An index over a list of filters: for one request, which filters can possibly match.
//!
//! Evaluating every custom rule one by one costs tens of nanoseconds each, and a benign request
//! matches none of them. Most rules, though, require a literal test on one request field: the path
//! equals `"/x"`, starts with `"/wp-"`, the method is one of a set, the user agent contains
//! `"BadBot"`. Such a test is a *necessary condition*: when it fails, the rule cannot match. The
//! index collects one necessary condition per filter (an any-of list of literal tests), reads each
//! field the conditions mention once per request, answers all tests on that field at once (one
//! walk down a byte trie for equality and prefixes, one Aho-Corasick scan for substrings), and yields the filters whose condition held, plus
//! the filters that have no usable condition, in their original order. The caller still evaluates
//! each candidate in full, so the index only ever skips filters that would have returned false:
//! order and first-match semantics are unchanged.
//!
//! What counts as a necessary condition of a node:
//! - `field eq "lit"`, `field in {"a" "b"}`: the field's value is one of the literals;
//! - `starts_with(field, "lit")`, `field matches "^lit..."`: the value starts with a literal (the
//!   regex's possible literal prefixes, when it is anchored at the start of the text);
//! - `field contains "lit"`, and `lower(field)`/`upper(field) contains "lit"` (tested without
//!   regard to ASCII case, and assumed to hold for a non-ASCII value, whose case mapping may
//!   change lengths or turn non-ASCII letters into ASCII ones);
//! - `field ne ""` on a header: the header is present;
//! - `a and b`: the condition of either side (the more selective one);
//! - `a or b`: the conditions of both sides, either of which may hold.
//!
//! `not`, `xor`, and anything else give no condition: such a filter is always a candidate. The
//! client's country and the full URI are never used as index keys, so that the index never costs a
//! database lookup or an allocation.

use std::collections::HashMap;

use aho_corasick::{AhoCorasick, MatchKind};
use http::header::HeaderName;
use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Hir, HirKind, Look};

use super::compile::{Filter, Node, Ord6, Val};
use super::cx::Cx;
use super::fields::Field;

/// One literal test on a request field.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Atom {
    /// The value equals the literal.
    Exact(Field, Box<str>),
    /// The value starts with the literal (bytes: a regex prefix may end inside a character).
    Prefix(Field, Box<[u8]>),
    /// The value contains the literal; `fold`: ASCII case ignored, and any non-ASCII value passes.
    Contains(Field, Box<str>, bool),
    /// The header is present.
    Header(HeaderName),
}

impl Atom {
    /// Lower is more selective, and preferred when an `and` offers a choice.
    fn rank(&self) -> u8 {
        match self {
            Atom::Exact(..) => 0,
            Atom::Prefix(..) => 1,
            Atom::Contains(..) => 2,
            Atom::Header(_) => 3,
        }
    }
}

/// A necessary condition: at least one atom holds whenever the node is true.
struct Need {
    any_of: Vec<Atom>,
}

impl Need {
    fn one(a: Atom) -> Option<Need> {
        Some(Need { any_of: vec![a] })
    }

    fn rank(&self) -> u8 {
        self.any_of.iter().map(Atom::rank).max().unwrap_or(0)
    }
}

/// The necessary condition of a node, if it has one the index can test.
fn need(n: &Node) -> Option<Need> {
    match n {
        Node::And(a, b) => match (need(a), need(b)) {
            (Some(x), Some(y)) => {
                // Fewer, cheaper atoms first; on a tie keep the left side.
                let key = |n: &Need| (n.rank(), n.any_of.len());
                Some(if key(&y) < key(&x) { y } else { x })
            }
            (x, y) => x.or(y),
        },
        Node::Or(a, b) => {
            let mut x = need(a)?;
            x.any_of.extend(need(b)?.any_of);
            Some(x)
        }
        Node::Cmp(Ord6::Eq, Val::Field(f), Val::Str(s))
        | Node::Cmp(Ord6::Eq, Val::Str(s), Val::Field(f)) => {
            Need::one(Atom::Exact(key_field(f)?, s.clone()))
        }
        Node::Cmp(Ord6::Ne, Val::Field(f), Val::Str(s))
        | Node::Cmp(Ord6::Ne, Val::Str(s), Val::Field(f))
            if s.is_empty() =>
        {
            Need::one(Atom::Header(header_name(f)?))
        }
        Node::InStr(Val::Field(f), set) if !set.is_empty() => {
            let f = key_field(f)?;
            let mut any_of: Vec<Atom> = set
                .iter()
                .map(|s| Atom::Exact(f.clone(), s.clone()))
                .collect();
            // A set's order is arbitrary; sort so the index is the same on every load.
            any_of.sort_by(|a, b| match (a, b) {
                (Atom::Exact(_, x), Atom::Exact(_, y)) => x.cmp(y),
                _ => std::cmp::Ordering::Equal,
            });
            Some(Need { any_of })
        }
        Node::Truthy(Val::StartsWith(a, b)) => match (a.as_ref(), b.as_ref()) {
            (Val::Field(f), Val::Str(s)) if !s.is_empty() => {
                Need::one(Atom::Prefix(key_field(f)?, s.as_bytes().into()))
            }
            _ => None,
        },
        Node::Contains(a, Val::Str(s)) if !s.is_empty() => {
            let (f, fold) = folded_field(a)?;
            Need::one(Atom::Contains(key_field(f)?, s.clone(), fold))
        }
        Node::Matches(Val::Field(f), re) => {
            let f = key_field(f)?;
            let prefixes = anchored_prefixes(re.as_str())?;
            Some(Need {
                any_of: prefixes
                    .into_iter()
                    .map(|p| Atom::Prefix(f.clone(), p.into()))
                    .collect(),
            })
        }
        _ => None,
    }
}

/// A field under any number of `lower`/`upper` calls, and whether there was one.
fn folded_field(v: &Val) -> Option<(&Field, bool)> {
    match v {
        Val::Field(f) => Some((f, false)),
        Val::Lower(a) | Val::Upper(a) => Some((folded_field(a)?.0, true)),
        _ => None,
    }
}

/// The field as an index key: a string read without a lookup or an allocation.
fn key_field(f: &Field) -> Option<Field> {
    f.index_key().then(|| f.clone())
}

/// The header a header field reads, if it is one.
fn header_name(f: &Field) -> Option<HeaderName> {
    f.header()
}

/// The literals one of which starts every text a regex matches, when it can only match at the
/// start of the text (`^` or `\A`, not the multi-line `(?m)^`). `None` when there is no such
/// finite list of non-empty literals.
fn anchored_prefixes(pattern: &str) -> Option<Vec<Vec<u8>>> {
    // Same syntax options as `RegexBuilder`'s defaults, which compile() uses.
    let hir = regex_syntax::ParserBuilder::new()
        .nest_limit(64)
        .build()
        .parse(pattern)
        .ok()?;
    let mut out = Vec::new();
    collect_anchored(&hir, &mut out)?;
    Some(out)
}

fn collect_anchored(hir: &Hir, out: &mut Vec<Vec<u8>>) -> Option<()> {
    match hir.kind() {
        HirKind::Capture(c) => collect_anchored(&c.sub, out),
        HirKind::Alternation(alts) => alts.iter().try_for_each(|a| collect_anchored(a, out)),
        HirKind::Concat(subs) if matches!(subs.first()?.kind(), HirKind::Look(Look::Start)) => {
            let rest = Hir::concat(subs[1..].to_vec());
            let seq = Extractor::new().kind(ExtractKind::Prefix).extract(&rest);
            for lit in seq.literals()? {
                if lit.as_bytes().is_empty() {
                    return None;
                }
                out.push(lit.as_bytes().to_vec());
            }
            Some(())
        }
        _ => None,
    }
}

/// Filter numbers, as `u32` to keep the lists small.
type Ids = Vec<u32>;

/// Equality and prefix tests on one field, answered by one walk down a byte trie (no hashing;
/// a value that shares no prefix with any literal stops after a byte or two).
#[derive(Debug, Default)]
struct Trie {
    /// Node 0 is the root.
    nodes: Vec<TrieNode>,
}

#[derive(Debug, Default)]
struct TrieNode {
    /// Sorted by byte.
    edges: Vec<(u8, u32)>,
    /// Filters that need the value to start with the bytes leading here.
    prefix: Ids,
    /// Filters that need the value to be exactly the bytes leading here.
    exact: Ids,
}

impl Trie {
    fn node_for(&mut self, key: &[u8]) -> &mut TrieNode {
        if self.nodes.is_empty() {
            self.nodes.push(TrieNode::default());
        }
        let mut at = 0usize;
        for &b in key {
            let next = self.nodes.len() as u32;
            let edges = &mut self.nodes[at].edges;
            at = match edges.binary_search_by_key(&b, |e| e.0) {
                Ok(i) => edges[i].1 as usize,
                Err(i) => {
                    edges.insert(i, (b, next));
                    self.nodes.push(TrieNode::default());
                    next as usize
                }
            };
        }
        &mut self.nodes[at]
    }

    fn walk(&self, value: &[u8], bits: &mut [u64]) {
        let Some(mut node) = self.nodes.first() else {
            return;
        };
        for &b in value {
            set_all(bits, &node.prefix);
            match node.edges.binary_search_by_key(&b, |e| e.0) {
                Ok(i) => node = &self.nodes[node.edges[i].1 as usize],
                Err(_) => return,
            }
        }
        set_all(bits, &node.prefix);
        set_all(bits, &node.exact);
    }
}

/// Substring tests on one field, all answered by one scan.
#[derive(Debug)]
struct Substrings {
    /// Answers "may any pattern be here?" quickly: see `quick_patterns`.
    any: AhoCorasick,
    /// Overlapping search finds every pattern that occurs, for the rare value that has one.
    finder: AhoCorasick,
    /// Per pattern, the filters that need it.
    ids: Vec<Ids>,
    /// Patterns are matched without regard to ASCII case, and a non-ASCII value passes them all.
    fold: bool,
}

impl Substrings {
    fn build(patterns: Vec<(Box<str>, Ids)>, fold: bool) -> Option<Substrings> {
        if patterns.is_empty() {
            return None;
        }
        let build = |kind| {
            AhoCorasick::builder()
                .match_kind(kind)
                .ascii_case_insensitive(fold)
                .build(patterns.iter().map(|p| p.0.as_bytes()))
                // Cannot fail for a few short literals; if it ever did, the caller keeps every
                // filter that needed them as a candidate.
                .ok()
        };
        let any = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostFirst)
            .ascii_case_insensitive(fold)
            .build(quick_patterns(&patterns, fold))
            .ok()?;
        let finder = build(MatchKind::Standard)?;
        Some(Substrings {
            any,
            finder,
            ids: patterns.into_iter().map(|p| p.1).collect(),
            fold,
        })
    }

    fn scan(&self, value: &str, bits: &mut [u64]) {
        if self.fold && !value.is_ascii() {
            for ids in &self.ids {
                set_all(bits, ids);
            }
            return;
        }
        // Most requests contain none of the patterns: a plain search settles that quickly.
        if !self.any.is_match(value) {
            return;
        }
        for m in self.finder.find_overlapping_iter(value) {
            set_all(bits, &self.ids[m.pattern().as_usize()]);
        }
    }
}

/// Shorter stand-ins for `patterns`, for a first check: a value containing a pattern contains
/// that pattern's prefix. Rule sets often share a stem (`BadBot/1`, `BadBot/2`...); one stem is
/// searched far faster than many patterns, whose rare bytes may be common in real values (`/` in a
/// user agent). The prefixes are as long as possible without making more distinct ones than
/// 4-byte prefixes would.
fn quick_patterns(patterns: &[(Box<str>, Ids)], fold: bool) -> Vec<Vec<u8>> {
    let prefixes = |len: usize| {
        let mut out: Vec<Vec<u8>> = patterns
            .iter()
            .map(|(p, _)| {
                let p = &p.as_bytes()[..len.min(p.len())];
                if fold {
                    p.to_ascii_lowercase()
                } else {
                    p.to_vec()
                }
            })
            .collect();
        out.sort();
        out.dedup();
        out
    };
    let longest = patterns.iter().map(|(p, _)| p.len()).max().unwrap_or(0);
    let short = 4.min(longest);
    let want = prefixes(short).len();
    // Distinct prefixes only grow with their length: find the longest length that keeps `want`.
    let (mut lo, mut hi) = (short, longest);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if prefixes(mid).len() == want {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    prefixes(lo)
}

/// Every test on one field.
#[derive(Debug)]
struct FieldTests {
    field: Field,
    trie: Trie,
    contains: Option<Substrings>,
    contains_folded: Option<Substrings>,
}

/// Which of a list of filters can match a request. See the module comment.
#[derive(Debug, Default)]
pub(crate) struct FilterIndex {
    /// Filters without a usable condition, as a bit set over filter numbers.
    always: Vec<u64>,
    fields: Vec<FieldTests>,
    /// Filters that need a header to be present, by header, in first-use order.
    headers: Vec<(HeaderName, Ids)>,
    /// Positions in `headers`, when there are too many to search one by one.
    header_pos: HashMap<HeaderName, usize>,
}

/// Up to this many header names are searched one by one (a few byte comparisons each), which is
/// cheaper than hashing every header name of the request.
const HEADER_SCAN: usize = 16;

impl FilterIndex {
    /// Indexes `filters`; candidates are numbered by their position in it.
    pub(crate) fn new<'f>(filters: impl IntoIterator<Item = &'f Filter>) -> FilterIndex {
        let mut always = Vec::new();
        let mut by_field: Vec<(Field, Vec<(Atom, u32)>)> = Vec::new();
        let mut headers: Vec<(HeaderName, Ids)> = Vec::new();
        let mut count = 0u32;
        for (i, f) in filters.into_iter().enumerate() {
            let id = u32::try_from(i).expect("fewer than 2^32 filters");
            count = id + 1;
            if always.len() * 64 <= i {
                always.push(0);
            }
            let Some(need) = need(&f.root) else {
                always[i / 64] |= 1 << (i % 64);
                continue;
            };
            for atom in need.any_of {
                let field = match &atom {
                    Atom::Exact(f, _) | Atom::Prefix(f, _) | Atom::Contains(f, _, _) => f.clone(),
                    Atom::Header(h) => {
                        match headers.iter_mut().find(|(n, _)| n == h) {
                            Some((_, ids)) => push_id(ids, id),
                            None => headers.push((h.clone(), vec![id])),
                        }
                        continue;
                    }
                };
                match by_field.iter_mut().find(|(f, _)| *f == field) {
                    Some((_, atoms)) => atoms.push((atom, id)),
                    None => by_field.push((field, vec![(atom, id)])),
                }
            }
        }
        debug_assert!(always.len() * 64 >= count as usize);
        let mut fields = Vec::new();
        for (field, atoms) in by_field {
            let mut t = FieldTests {
                field,
                trie: Trie::default(),
                contains: None,
                contains_folded: None,
            };
            let mut subs: [Vec<(Box<str>, Ids)>; 2] = Default::default();
            for (atom, id) in atoms {
                match atom {
                    Atom::Exact(_, s) => push_id(&mut t.trie.node_for(s.as_bytes()).exact, id),
                    Atom::Prefix(_, p) => push_id(&mut t.trie.node_for(&p).prefix, id),
                    Atom::Contains(_, s, fold) => {
                        let list = &mut subs[usize::from(fold)];
                        match list.iter_mut().find(|(p, _)| *p == s) {
                            Some((_, ids)) => push_id(ids, id),
                            None => list.push((s, vec![id])),
                        }
                    }
                    Atom::Header(_) => unreachable!("headers are indexed apart"),
                }
            }
            let [plain, folded] = subs;
            for (list, fold) in [(plain, false), (folded, true)] {
                if list.is_empty() {
                    continue;
                }
                let all: Vec<u32> = list.iter().flat_map(|p| p.1.iter().copied()).collect();
                match Substrings::build(list, fold) {
                    Some(s) if fold => t.contains_folded = Some(s),
                    Some(s) => t.contains = Some(s),
                    None => {
                        for id in all {
                            always[id as usize / 64] |= 1 << (id % 64);
                        }
                    }
                }
            }
            fields.push(t);
        }
        let header_pos = if headers.len() > HEADER_SCAN {
            headers
                .iter()
                .enumerate()
                .map(|(i, (n, _))| (n.clone(), i))
                .collect()
        } else {
            HashMap::new()
        };
        FilterIndex {
            always,
            fields,
            headers,
            header_pos,
        }
    }

    /// The filters that may match, in order: every filter that matches is among them.
    pub(crate) fn candidates(&self, cx: &Cx<'_>) -> Candidates {
        let mut bits = Bits::new(&self.always);
        let words = bits.as_mut();
        for t in &self.fields {
            let value = t.field.read_str(cx);
            t.trie.walk(value.as_bytes(), words);
            if let Some(s) = &t.contains {
                s.scan(&value, words);
            }
            if let Some(s) = &t.contains_folded {
                s.scan(&value, words);
            }
        }
        if !self.headers.is_empty() {
            let present = cx.facts.headers;
            if present.keys_len() < self.headers.len() {
                // A request has fewer headers than the rules name: look up each of its own.
                for name in present.keys() {
                    let at = if self.header_pos.is_empty() {
                        self.headers.iter().position(|(n, _)| n == name)
                    } else {
                        self.header_pos.get(name).copied()
                    };
                    if let Some(i) = at {
                        set_all(words, &self.headers[i].1);
                    }
                }
            } else {
                for (name, ids) in &self.headers {
                    if present.contains_key(name) {
                        set_all(words, ids);
                    }
                }
            }
        }
        Candidates {
            bits,
            word: 0,
            current: 0,
            started: false,
        }
    }
}

fn push_id(ids: &mut Ids, id: u32) {
    if ids.last() != Some(&id) {
        ids.push(id);
    }
}

fn set_all(bits: &mut [u64], ids: &[u32]) {
    for &id in ids {
        bits[id as usize / 64] |= 1 << (id % 64);
    }
}

/// Up to 512 filters are tracked on the stack; more take one allocation per request.
const INLINE_WORDS: usize = 8;

enum Bits {
    Inline([u64; INLINE_WORDS], usize),
    Heap(Vec<u64>),
}

impl Bits {
    fn new(init: &[u64]) -> Bits {
        if init.len() <= INLINE_WORDS {
            let mut w = [0; INLINE_WORDS];
            w[..init.len()].copy_from_slice(init);
            Bits::Inline(w, init.len())
        } else {
            Bits::Heap(init.to_vec())
        }
    }

    fn as_mut(&mut self) -> &mut [u64] {
        match self {
            Bits::Inline(w, n) => &mut w[..*n],
            Bits::Heap(v) => v,
        }
    }

    fn words(&self) -> &[u64] {
        match self {
            Bits::Inline(w, n) => &w[..*n],
            Bits::Heap(v) => v,
        }
    }
}

/// Candidate filter numbers, in increasing order.
pub(crate) struct Candidates {
    bits: Bits,
    word: usize,
    current: u64,
    started: bool,
}

impl Iterator for Candidates {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if !self.started {
            self.started = true;
            self.current = *self.bits.words().first()?;
        }
        loop {
            if self.current != 0 {
                let bit = self.current.trailing_zeros() as usize;
                self.current &= self.current - 1;
                return Some(self.word * 64 + bit);
            }
            self.word += 1;
            self.current = *self.bits.words().get(self.word)?;
        }
    }
}
