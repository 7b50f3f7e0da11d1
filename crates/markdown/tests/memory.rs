//! The memory a conversion allocates at its peak stays within [`working_bytes`], the figure
//! the edge reserves in its budget before converting, on real pages and on the shapes that cost
//! the most per byte, each with as many elements as the cap admits and each checked to have
//! converted (a refused page is passed through and proves nothing about the bound). Counted by
//! a wrapping allocator (this file is its own test binary).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use signpost_markdown::{DEFAULT_MAX_ELEMENTS, Error, Limits, convert_html, working_bytes};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Held by each test while it converts: the counts are the whole process's, so a conversion
/// on another test thread would be counted in this one's peak.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The most allocated at once while converting `html`, beyond what was allocated before, and
/// what the conversion gave.
fn peak_of(html: &str) -> (usize, Result<String, Error>) {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let out = convert_html(html, None, &Limits::default());
    let peak = PEAK.load(Ordering::Relaxed) - before;
    (peak, out)
}

/// Start tags in `html`, counted as the token filter counts elements.
fn start_tags(html: &str) -> usize {
    html.as_bytes()
        .windows(2)
        .filter(|pair| pair[0] == b'<' && pair[1].is_ascii_alphabetic())
        .count()
}

/// A page of `unit` repeated as often as the element cap admits, between `open` and `close`:
/// the shape at its costliest, since every element costs the working memory of a tree node.
fn at_the_element_cap(open: &str, unit: &str, close: &str) -> String {
    let fixed = start_tags(open) + start_tags(close);
    let times = (DEFAULT_MAX_ELEMENTS - fixed) / start_tags(unit);
    format!("{open}{}{close}", unit.repeat(times))
}

/// One unit more than [`at_the_element_cap`] admits: refused.
fn over_the_element_cap(open: &str, unit: &str, close: &str) -> String {
    let fixed = start_tags(open) + start_tags(close);
    let times = (DEFAULT_MAX_ELEMENTS - fixed) / start_tags(unit) + 1;
    format!("{open}{}{close}", unit.repeat(times))
}

/// Code cut at its links (at most one cut per 128 bytes of page): with room for every `<code>`
/// to be cut (133 bytes each, 11 start tags), and densely (34 bytes each, about one in four
/// cut). Each cut adds elements after the parse, which the per-tag figure does not count.
const CUT_EVERY_CODE: &str = "<code> a <a href=x>b</a> c </code><em>a</em> <em>a</em> <em>a</em> <em>a</em> <em>a</em> <em>a</em> <em>a</em> <em>a</em> <em>a</em> ";
const DENSE_LINKS_IN_CODE: &str = "<code> a <a href=x>b</a> c </code>";

/// The shapes that cost the most per byte, each at the element cap, so that the per-tag figure
/// is tested where it is largest; the links in code spans (the costliest, since their cuts add
/// elements) also one unit over it, where they are refused.
fn shapes() -> Vec<(&'static str, String)> {
    let cap = at_the_element_cap;
    vec![
        ("paragraphs", cap("", "<p>a", "")),
        ("list items", cap("<ul>", "<li>a", "</ul>")),
        ("cells", cap("<table><tr>", "<td>a", "</table>")),
        (
            "quoted paragraphs",
            cap(&"<blockquote>".repeat(100), "<p>a</p>", ""),
        ),
        (
            "nested lists",
            cap(&"<ul><li>".repeat(16), "<li>xxxxxxxxxxxxxxxxxxxx", ""),
        ),
        ("emphasis", cap("<p>", "<em>a</em> ", "</p>")),
        ("links", cap("<p>", "<a href=\"x\">y</a>", "</p>")),
        ("images", cap("<p>", "<img src=x alt=y>", "</p>")),
        ("code spans", cap("<p>", "<code>a</code>", "</p>")),
        (
            "links in code spans, every one cut",
            cap("<p>", CUT_EVERY_CODE, "</p>"),
        ),
        (
            "links in code spans",
            cap("<p>", DENSE_LINKS_IN_CODE, "</p>"),
        ),
        ("text", format!("<p>{}</p>", "word ".repeat(1_000_000))),
        ("entities", format!("<p>{}</p>", "a&amp;".repeat(600_000))),
        (
            "code block",
            format!("<pre><code>{}</code></pre>", "a\n".repeat(2_000_000)),
        ),
    ]
}

#[test]
fn conversions_stay_within_the_working_memory_reserved() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut pages: Vec<(&str, String)> = shapes();
    let own = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/e2e/pages");
    for entry in std::fs::read_dir(own).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "html") {
            let bytes = std::fs::read(path).unwrap();
            pages.push((
                "the e2e tests' page",
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
    }
    // The two largest pages of git-doc (`.ci/run` installs it).
    let git_doc: Vec<String> = ["git-config.html", "user-manual.html"]
        .iter()
        .filter_map(|name| std::fs::read_to_string(format!("/usr/share/doc/git-doc/{name}")).ok())
        .collect();
    if git_doc.len() < 2 {
        assert!(
            std::env::var_os("SIGNPOST_NO_SKIP").is_none(),
            "SIGNPOST_NO_SKIP is set but git-doc is not installed"
        );
        eprintln!("git-doc is not installed: its pages are left out (SIGNPOST_NO_SKIP=1 fails)");
    }
    pages.extend(git_doc.into_iter().map(|html| ("git-doc page", html)));
    let mut worst = (0.0f64, "");
    for (shape, html) in &pages {
        let (peak, out) = peak_of(html);
        // A refused page is passed through, so its peak proves nothing about the bound.
        let markdown = out.unwrap_or_else(|e| panic!("{shape} was not converted: {e}"));
        assert!(!markdown.is_empty(), "{shape}");
        if *shape == "links in code spans, every one cut" {
            // Each `<code>` was cut at its link: the link is written outside the code.
            let codes = html.matches("<code>").count();
            assert_eq!(markdown.matches("[`b`](x)").count(), codes, "{shape}");
        }
        drop(markdown);
        let reserved = working_bytes(html.as_bytes());
        let share = peak as f64 / reserved as f64;
        if share > worst.0 {
            worst = (share, shape);
        }
        println!(
            "{shape}: {} bytes, {} start tags, peak {peak}, reserved {reserved} ({:.2})",
            html.len(),
            start_tags(html),
            share
        );
        assert!(
            peak <= reserved,
            "{shape}: peak {peak} > reserved {reserved}"
        );
    }
    println!(
        "worst share of the reservation used: {:.2} ({})",
        worst.0, worst.1
    );
}

/// The links in code spans above are the costliest shapes that are converted: one unit more
/// and the page is over the element cap, refused before it is converted (and passed through by
/// the edge, costing no working memory).
#[test]
fn links_in_code_spans_one_unit_over_the_cap_are_refused() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for unit in [CUT_EVERY_CODE, DENSE_LINKS_IN_CODE] {
        let html = over_the_element_cap("<p>", unit, "</p>");
        assert!(start_tags(&html) > DEFAULT_MAX_ELEMENTS);
        let (_, out) = peak_of(&html);
        assert!(
            matches!(out, Err(Error::TooComplex(_))),
            "{unit}: {:?}",
            out.map(|md| md.len())
        );
        let admitted = at_the_element_cap("<p>", unit, "</p>");
        assert!(start_tags(&admitted) <= DEFAULT_MAX_ELEMENTS);
        assert!(start_tags(&admitted) + start_tags(unit) > DEFAULT_MAX_ELEMENTS);
    }
}
