//! The memory a conversion allocates at its peak stays within [`working_bytes`], the figure
//! the edge reserves in its budget before converting, on real pages and on the shapes that cost
//! the most per byte. Counted by a wrapping allocator (this file is its own test binary).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use signpost_markdown::{Limits, convert_html, working_bytes};

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

/// The most allocated at once while converting `html`, beyond what was allocated before.
fn peak_of(html: &str) -> usize {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let out = convert_html(html, None, &Limits::default());
    let peak = PEAK.load(Ordering::Relaxed) - before;
    drop(out);
    peak
}

#[test]
fn conversions_stay_within_the_working_memory_reserved() {
    let n = 200_000;
    let mut pages: Vec<(&str, String)> = vec![
        ("paragraphs", "<p>a".repeat(n)),
        ("list items", format!("<ul>{}</ul>", "<li>a".repeat(n))),
        ("cells", format!("<table><tr>{}</table>", "<td>a".repeat(n))),
        (
            "quoted paragraphs",
            format!("{}{}", "<blockquote>".repeat(100), "<p>a</p>".repeat(n)),
        ),
        (
            "nested lists",
            format!(
                "{}{}",
                "<ul><li>".repeat(16),
                "<li>xxxxxxxxxxxxxxxxxxxx".repeat(n)
            ),
        ),
        ("emphasis", format!("<p>{}</p>", "<em>a</em> ".repeat(n))),
        (
            "links",
            format!("<p>{}</p>", "<a href=\"x\">y</a>".repeat(n)),
        ),
        (
            "images",
            format!("<p>{}</p>", "<img src=x alt=y>".repeat(n)),
        ),
        (
            "code spans",
            format!("<p>{}</p>", "<code>a</code>".repeat(n)),
        ),
        // Code cut at its links (one cut per 128 bytes of page at most), densely and with
        // room for every one to be cut.
        (
            "links in code spans, every one cut",
            format!(
                "<p>{}</p>",
                format!(
                    "<code> a <a href=x>b</a> c </code>{}",
                    "<em>a</em> ".repeat(9)
                )
                .repeat(n / 8)
            ),
        ),
        (
            "links in code spans",
            format!(
                "<p>{}</p>",
                "<code> a <a href=x>b</a> c </code>".repeat(n / 2)
            ),
        ),
        ("text", format!("<p>{}</p>", "word ".repeat(1_000_000))),
        ("entities", format!("<p>{}</p>", "a&amp;".repeat(600_000))),
        (
            "code block",
            format!("<pre><code>{}</code></pre>", "a\n".repeat(2_000_000)),
        ),
    ];
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
    let mut worst = 0.0f64;
    for (shape, html) in &pages {
        let peak = peak_of(html);
        let reserved = working_bytes(html.as_bytes());
        let share = peak as f64 / reserved as f64;
        worst = worst.max(share);
        println!(
            "{shape}: {} bytes, peak {peak}, reserved {reserved} ({:.2})",
            html.len(),
            share
        );
        assert!(
            peak <= reserved,
            "{shape}: peak {peak} > reserved {reserved}"
        );
    }
    println!("worst share of the reservation used: {worst:.2}");
}
