use proptest::prelude::*;
use pulldown_cmark::{Event, Options as CmOptions, Parser, Tag, TagEnd};

use super::*;

fn md(html: &str, url: &str) -> String {
    let url = Url::parse(url).unwrap();
    convert_html(html, Some(&url), &Limits::default()).unwrap()
}

/// Splits the frontmatter off and reads it with a YAML parser.
fn frontmatter(md: &str) -> (serde_norway::Mapping, &str) {
    let rest = md.strip_prefix("---\n").expect("frontmatter");
    let (yaml, body) = rest.split_once("\n---\n").expect("frontmatter end");
    (serde_norway::from_str(yaml).unwrap(), body)
}

fn links(md: &str) -> Vec<String> {
    Parser::new_ext(
        md,
        CmOptions::ENABLE_YAML_STYLE_METADATA_BLOCKS | CmOptions::ENABLE_TABLES,
    )
    .filter_map(|e| match e {
        Event::Start(Tag::Link { dest_url, .. }) | Event::Start(Tag::Image { dest_url, .. }) => {
            Some(dest_url.to_string())
        }
        _ => None,
    })
    .collect()
}

#[test]
fn blog_post_with_open_graph_and_json_ld() {
    let html = r#"<!doctype html><html><head>
        <title>  A "quoted": title
        </title>
        <meta name="description" content="yes">
        <meta property="og:title" content="OG title">
        <meta property="og:image" content="/img/cover.png">
        <script type="application/ld+json">{"@type":"BlogPosting","headline":"Has ``` fence"}</script>
        <script type="application/ld+json">{"@type":"Person","name":"A"}</script>
        <script type="application/ld+json">{not json</script>
        <script>var x = "<p>nope</p>";</script>
        </head><body><header><a href="/">Home</a></header><nav><a href="/x">x</a></nav>
        <article><h1>Post</h1><p>Read <a href="../other?q=1#f">this</a> and
        <img src="pic.jpg" alt="a pic">.</p><ul><li>one<li>two</ul></article>
        <footer>© site</footer></body></html>"#;
    let out = md(html, "https://blog.example/posts/2026/hello.html");
    let (yaml, body) = frontmatter(&out);
    assert_eq!(yaml["title"].as_str(), Some("A \"quoted\": title"));
    assert_eq!(yaml["description"].as_str(), Some("yes"));
    assert_eq!(
        yaml["image"].as_str(),
        Some("https://blog.example/img/cover.png")
    );
    assert!(body.contains("# Post"));
    assert!(body.contains("- one\n- two"), "{body}");
    assert!(!body.contains("Home") && !body.contains("© site") && !body.contains("nope"));
    assert_eq!(
        links(&out),
        [
            "https://blog.example/posts/other?q=1#f",
            "https://blog.example/posts/2026/pic.jpg"
        ]
    );
    // One fenced json block holding both valid blocks, its fence longer than any run inside.
    let fenced: Vec<(String, String)> = {
        let mut blocks = Vec::new();
        let mut current: Option<(String, String)> = None;
        for event in Parser::new_ext(&out, CmOptions::ENABLE_YAML_STYLE_METADATA_BLOCKS) {
            match event {
                Event::Start(Tag::CodeBlock(pulldown_cmark::CodeBlockKind::Fenced(info))) => {
                    current = Some((info.to_string(), String::new()));
                }
                Event::Text(t) => {
                    if let Some((_, text)) = current.as_mut() {
                        text.push_str(&t);
                    }
                }
                Event::End(TagEnd::CodeBlock) => blocks.extend(current.take()),
                _ => {}
            }
        }
        blocks
    };
    assert_eq!(fenced.len(), 1);
    assert_eq!(fenced[0].0, "json");
    let value: serde_json::Value = serde_json::from_str(&fenced[0].1).unwrap();
    assert_eq!(value[0]["headline"], "Has ``` fence");
    assert_eq!(value[1]["name"], "A");
}

#[test]
fn base_href_wins_over_the_request_url() {
    let html = r#"<head><base href="https://cdn.example/docs/"></head><a href="page">p</a>
        <a href="javascript:alert(1)">js</a>"#;
    let out = md(html, "https://site.example/x/y");
    assert_eq!(links(&out), ["https://cdn.example/docs/page"]);
    assert!(out.contains("js"));
    assert!(!out.contains("javascript"));
}

#[test]
fn tables_become_pipe_tables() {
    let html = "<table><tr><th>Name</th><th>Size</th></tr><tr><td>a|b</td><td>1</td></tr></table>";
    let out = md(html, "https://e.example/");
    let mut cells = Vec::new();
    let mut in_cell = false;
    for event in Parser::new_ext(&out, CmOptions::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::TableCell) => {
                in_cell = true;
                cells.push(String::new());
            }
            Event::End(TagEnd::TableCell) => in_cell = false,
            Event::Text(t) | Event::Code(t) if in_cell => cells.last_mut().unwrap().push_str(&t),
            _ => {}
        }
    }
    assert_eq!(cells, ["Name", "Size", "a|b", "1"], "{out}");
}

#[test]
fn no_metadata_means_no_frontmatter() {
    assert_eq!(md("<p>plain</p>", "https://e.example/"), "plain\n");
}

#[test]
fn frontmatter_is_yaml_safe_for_hostile_titles() {
    for title in [
        "yes",
        "2026-01-01",
        "1.0",
        "null",
        "a: b",
        "- x",
        "#x",
        "&anchor",
        "*alias",
        "'q'",
    ] {
        let html = format!("<title>{}</title><p>x</p>", title.replace('&', "&amp;"));
        let out = md(&html, "https://e.example/");
        let (yaml, _) = frontmatter(&out);
        assert_eq!(yaml["title"].as_str(), Some(title), "{out}");
    }
}

#[test]
fn convert_decodes_and_caps() {
    let page = "<title>Caf\u{e9}</title><p>x</p>";
    let (latin1, _, _) = encoding_rs::WINDOWS_1252.encode(page);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &latin1).unwrap();
    let gz = gz.finish().unwrap();
    let source = Source {
        body: &gz,
        content_type: Some("text/html; charset=iso-8859-1"),
        content_encoding: Some("gzip"),
    };
    let out = convert(&source, None, &Limits::default()).unwrap();
    assert!(out.starts_with("---\ntitle: \"Café\"\n---\n"), "{out}");
    let small = Limits {
        max_bytes: 10,
        ..Limits::default()
    };
    assert!(matches!(
        convert(&source, None, &small),
        Err(Error::TooLarge)
    ));
}

#[test]
fn content_types() {
    assert!(is_html("text/html"));
    assert!(is_html("Text/HTML; charset=utf-8"));
    assert!(is_html("application/xhtml+xml"));
    assert!(!is_html("application/json"));
    assert!(!is_html("text/htmlx"));
}

/// A 100,000-deep page converts on a 2 MiB stack (the size of the edge's blocking threads):
/// the token filter flattens it, so the converter never recurses deeply.
#[test]
fn hostile_depth_converts_on_a_small_stack() {
    let handle = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(|| {
            let depth = 100_000;
            let mut shapes = Vec::new();
            for open in [
                "<div>",
                "<span>",
                "<blockquote>",
                "<ul><li>",
                "<table><tr><td>",
                "<b><i>",
            ] {
                let html = format!("{}deep{}", open.repeat(depth), "</x>".repeat(10));
                let start = std::time::Instant::now();
                let out = convert_html(&html, None, &Limits::default());
                shapes.push((open, out.map(|s| s.contains("deep")), start.elapsed()));
            }
            shapes
        })
        .unwrap();
    for (open, result, elapsed) in handle.join().expect("no stack overflow") {
        // Converted (text kept) or refused; either way quickly.
        match result {
            Ok(kept) => assert!(kept, "{open}"),
            Err(e) => assert!(matches!(e, Error::TooComplex(_)), "{open}: {e}"),
        }
        assert!(elapsed.as_secs() < 20, "{open}: {elapsed:?}");
    }
}

/// The converter itself copes with the deepest tree the walk lets through, on a 2 MiB stack.
#[test]
fn max_tree_depth_fits_a_small_stack() {
    let handle = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(|| {
            let limits = Limits {
                max_depth: MAX_TREE_DEPTH,
                ..Limits::default()
            };
            // html, body, then divs: within MAX_TREE_DEPTH once parsed.
            let n = MAX_TREE_DEPTH - 4;
            let html = format!(
                "{}<b>deep</b>{}",
                "<blockquote>".repeat(n),
                "</blockquote>".repeat(n)
            );
            convert_html(&html, None, &limits).map(|s| s.contains("deep"))
        })
        .unwrap();
    assert!(handle.join().expect("no stack overflow").unwrap());
}

#[test]
fn one_tag_with_many_attributes_meets_the_parse_deadline() {
    // html5ever's tokenizer compares each attribute with the tag's earlier ones: quadratic.
    let mut html = String::from("<p");
    for i in 0..1_000_000 {
        html.push_str(&format!(" a{i}"));
    }
    html.push_str(">x</p>");
    // The release build's deadline for a 1 MiB page; the default is ten times longer in a
    // debug build.
    let limits = Limits {
        max_bytes: 16 << 20,
        max_parse_time: std::time::Duration::from_secs(1),
        parse_time_per_mib: std::time::Duration::from_millis(500),
        ..Limits::default()
    };
    let start = std::time::Instant::now();
    let result = convert_html(&html, None, &limits);
    assert!(matches!(result, Err(Error::TooComplex(_))), "{result:?}");
    // The deadline for this 7.9 MB page is 4.5 s; one more piece of the page is at most a few
    // seconds more even in a debug build (without the deadline: over an hour).
    assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
}

#[test]
fn many_elements_and_huge_attributes_are_bounded() {
    let start = std::time::Instant::now();
    let million = "<br>".repeat(1_000_000);
    let result = convert_html(&million, None, &Limits::default());
    assert!(matches!(result, Err(Error::TooComplex(_))), "{result:?}");
    let attrs = format!(
        "<p title=\"{}\" data-x=\"{}\">text</p>",
        "a".repeat((3 << 20) - 64),
        "b".repeat((3 << 20) - 64)
    );
    assert_eq!(
        convert_html(&attrs, None, &Limits::default()).unwrap(),
        "text\n"
    );
    assert!(start.elapsed().as_secs() < 30, "{:?}", start.elapsed());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary text never panics and always ends in one newline.
    #[test]
    fn arbitrary_input_never_panics(s in ".{0,400}") {
        if let Ok(out) = convert_html(&s, None, &Limits::default()) {
            prop_assert!(out.ends_with('\n'));
        }
    }

    /// Random tag soup converts, and the frontmatter (when there is one) reads back as YAML
    /// with the title that went in.
    #[test]
    fn tag_soup_converts_and_titles_round_trip(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("<div>".to_string()), Just("</div>".to_string()), Just("<p>".to_string()),
                Just("<table><tr><td>".to_string()), Just("<a href=\"x\">".to_string()),
                Just("</a>".to_string()), Just("<pre><code>".to_string()), Just("<li>".to_string()),
                Just("<h2>".to_string()), Just("<script>".to_string()), "[a-z ]{0,12}",
                "[^<>&]{0,12}",
            ],
            0..60,
        ),
        title in r#"[a-zA-Z0-9 :#'"\\*!?,.{}\[\]|%@`-]{1,40}"#,
    ) {
        let html = format!("<title>{title}</title>{}", parts.concat());
        let out = convert_html(&html, Url::parse("https://e.example/").ok().as_ref(), &Limits::default()).unwrap();
        let clean = title.split_whitespace().collect::<Vec<_>>().join(" ");
        if !clean.is_empty() {
            let (yaml, _) = frontmatter(&out);
            prop_assert_eq!(yaml["title"].as_str(), Some(clean.as_str()));
        }
        // A CommonMark parser reads it to the end (an empty page, such as a blank title and an
        // unclosed `<script>`, is one newline and no events).
        prop_assert!(out == "\n" || Parser::new(&out).count() > 0, "{out:?}");
    }
}

#[test]
fn links_to_this_page_keep_their_text_only() {
    let html = r##"<h2 id="opts">Options<a class="headerlink" href="#opts">¶</a></h2>
        <p>See <a href="#opts">the options</a>, <a href="b.html#opts">the same page by path</a>,
        <a href="https://docs.example/a/b.html?x=1#y">another query</a> and
        <a href="c.html#opts">another page</a>.</p>"##;
    let out = md(html, "https://docs.example/a/b.html");
    assert_eq!(
        out,
        "## Options\n\nSee the options, the same page by path, \
         [another query](https://docs.example/a/b.html?x=1#y) and \
         [another page](https://docs.example/a/c.html#opts).\n"
    );
    // Without a page URL, a bare fragment still leads nowhere.
    let url = None;
    let out = convert_html(r##"<a href="#top">Top</a>"##, url, &Limits::default()).unwrap();
    assert_eq!(out, "Top\n");
}

#[test]
fn empty_links_are_dropped_but_image_links_stay() {
    let html = r#"<p><a href="/rss"></a><a href="/home"> <span></span></a>Text
        <a href="/big.png"><img src="/small.png" alt="chart"></a></p>"#;
    let out = md(html, "https://e.example/");
    assert_eq!(
        out,
        "Text [![chart](https://e.example/small.png)](https://e.example/big.png)\n"
    );
}

#[test]
fn bare_pre_becomes_a_code_block_and_link_titles_go() {
    let html = r#"<div class="highlight"><pre><span></span>spam = __import__('spam')
eggs = 1 &lt; 2 <a href="/x">x</a><br>*<em>git</em>
</pre></div><pre><code class="language-rust"><b>fn</b> f() {}</code></pre>
        <p><a href="/m.html#f" title="m.f"><code>m.f()</code></a>
        <a href="/n.html" title="More about n">n</a></p>"#;
    let out = md(html, "https://docs.example/");
    assert_eq!(
        out,
        "```\nspam = __import__('spam')\neggs = 1 < 2 x\n*git\n```\n\n```rust\nfn f() {}\n```\n\n\
         [`m.f()`](https://docs.example/m.html#f) \
         [n](https://docs.example/n.html)\n"
    );
}

#[test]
fn single_trailing_spaces_go_but_hard_breaks_and_code_stay() {
    let html = "<dl><dt>--edit </dt><dd>Edit the message. </dd></dl>\
        <p>line<br>next</p><pre>code \n  </pre>";
    let out = md(html, "https://e.example/");
    assert!(
        !out.contains(" \n\n") && out.contains("--edit\n"),
        "{out:?}"
    );
    assert!(out.contains("line  \nnext"), "{out:?}");
    assert!(out.contains("```\ncode \n"), "{out:?}");
    assert_eq!(
        strip_trailing_spaces("a \n~~~\nb \n~~~\nc "),
        "a\n~~~\nb \n~~~\nc"
    );
    // A fence opened on a list item's first line or in a block quote; a line of backticks
    // with a backtick after them is a code span, not a fence; inside a fence, a list marker
    // before backticks is code and does not close it.
    assert_eq!(
        strip_trailing_spaces("- ```\n  b \n- ```\n  c \n  ```\nd "),
        "- ```\n  b \n- ```\n  c \n  ```\nd"
    );
    assert_eq!(
        strip_trailing_spaces("> 1. ~~~\n>    b \n>    ~~~\nc "),
        "> 1. ~~~\n>    b \n>    ~~~\nc"
    );
    assert_eq!(strip_trailing_spaces("```a` \nb "), "```a`\nb");
}

/// The Markdown of `html` with and without the tree reductions.
fn reduced_and_unreduced(html: &str) -> (String, String) {
    let url = Url::parse("https://docs.example/a/b.html").ok();
    let reduced = convert_html(html, url.as_ref(), &Limits::default()).unwrap();
    crate::options::UNREDUCED.with(|u| u.set(true));
    let unreduced = convert_html(html, url.as_ref(), &Limits::default());
    crate::options::UNREDUCED.with(|u| u.set(false));
    (reduced, unreduced.unwrap())
}

#[test]
fn block_wrappers_are_unwrapped_without_changing_the_markdown() {
    // AsciiDoc's nesting, and wrappers that must stay: one holding text, one ending in a list
    // (htmd may write a list without blank lines), an empty one, one in `<pre>`.
    let html = "<body>\n<div id=\"content\">\n<div class=\"sect1\">\n<h2>Name</h2>\n\
        <div class=\"sectionbody\">\n<div class=\"paragraph\">\n<p>One <em>a</em> <em>b</em></p>\n\
        </div>\n<div class=\"dlist\">\n<dl>\n<dt>-e</dt>\n<dd>\n<p>Edit.</p>\n</dd>\n</dl>\n</div>\n\
        </div>\n</div>\n</div>\ntext<div><p>beside</p></div>more\
        <div>text<p>in</p></div><div><p>a</p><ul><li>x</li></ul></div>\
        a<div> </div>b<pre><div><p>in pre</p></div></pre></body>";
    let (reduced, unreduced) = reduced_and_unreduced(html);
    assert_eq!(reduced, unreduced);
    assert!(
        reduced.starts_with("## Name\n\nOne *a* *b*\n\n-e\n\nEdit.\n\ntext"),
        "{reduced}"
    );
    let dom = filter::parse(html, &Limits::default()).unwrap();
    dom::walk(&dom.document, None).unwrap();
    // `<head>` is detached by the walk.
    let html_element = dom.document.children.borrow()[0].clone();
    let body = html_element.children.borrow()[0].clone();
    let mut out = Vec::new();
    html5ever::serialize::serialize(
        &mut out,
        &markup5ever_rcdom::SerializableHandle::from(body),
        html5ever::serialize::SerializeOpts::default(),
    )
    .unwrap();
    let out = String::from_utf8(out).unwrap();
    assert_eq!(
        out,
        "\n<h2>Name</h2><p>One <em>a</em> <em>b</em></p><dl>\n<dt>-e</dt>\n<dd>\n<p>Edit.</p>\n</dd>\n</dl>\n\
         text<p>beside</p>more<div>text<p>in</p></div><div><p>a</p><ul><li>x</li></ul></div>\
         a<div> </div>b<pre><code>in pre</code></pre>"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Unwrapping block wrappers, making htmd's joins of neighbouring inline elements in the
    /// walk, and joining the tokenizer's pieces of text never change the Markdown.
    #[test]
    fn tree_reductions_never_change_the_markdown(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("<div>"), Just("</div>"), Just("<section>"), Just("</section>"),
                Just("<p>"), Just("</p>"), Just("<ul>"), Just("</ul>"), Just("<ol>"), Just("<li>"),
                Just("<dl>"), Just("<dt>"), Just("<dd>"), Just("</dl>"), Just("<h2>"), Just("</h2>"),
                Just("<table>"), Just("<tr>"), Just("<td>"), Just("</table>"), Just("<pre>"),
                Just("</pre>"), Just("<blockquote>"), Just("</blockquote>"), Just("<em>"),
                Just("</em>"), Just("<code>"), Just("</code>"), Just("<hr>"), Just("<br>"),
                Just("<span>"), Just("<a href=\"x\">"), Just("</a>"), Just("<nav>"), Just("</nav>"),
                Just("</li>"), Just("</dd>"), Just("</dt>"), Just("</td>"), Just("</tr>"),
                Just("<article>"), Just("<main>"), Just("<header>"), Just("<aside>"),
                Just(" "), Just("\n"), Just("\n  "), Just("word"), Just("two words"), Just("-"),
                Just("&lt;"), Just("&amp;"), Just("a&#8217;b"), Just("&nbsp;"), Just("\r\n"),
                Just("<html>"), Just("<head>"), Just("</head>"), Just("<body>"),
                Just("<title>t</title>"), Just("<svg>"), Just("</svg>"), Just("<noscript>"),
                Just("<script>x</script>"), Just("<b>"), Just("</b>"), Just("<i>"), Just("</i>"),
                Just("<strong>"), Just("</strong>"), Just("</span>"), Just("<a href=\"x\"></a>"),
                Just("<code class=\"k\">"), Just("</ol>"),
            ],
            0..40,
        ),
    ) {
        let html = parts.concat();
        let (reduced, unreduced) = reduced_and_unreduced(&html);
        prop_assert_eq!(reduced, unreduced, "{:?}", html);
    }
}

/// Every pair of neighbours htmd would join, anywhere under `node`.
fn joinable_neighbours(node: &markup5ever_rcdom::Handle) -> usize {
    let children = node.children.borrow();
    let here = children
        .windows(2)
        .filter(|pair| dom::joins(&pair[0], &pair[1]))
        .count();
    here + children.iter().map(joinable_neighbours).sum::<usize>()
}

/// htmd joins neighbouring inline elements one `Vec::remove` and one copy of the text at a
/// time; the walk makes the same joins in one pass, including those that removing empty links
/// brings about, so htmd finds none left.
#[test]
fn the_walk_leaves_htmd_no_neighbours_to_join() {
    let html = "<body><p><code>a</code><code>b</code><code>c</code> <em>d<a href=\"x\"></a></em>\
        <i>e</i> <b>f</b><strong>g</strong><code>h</code><a href=\"y\"></a><code>i</code>\
        <span class=\"k\">j</span><span class=\"k\">k</span><span>l</span></p>\
        <ol><em>m</em><em>n</em></ol></body>";
    let (reduced, unreduced) = reduced_and_unreduced(html);
    assert_eq!(reduced, unreduced);
    assert_eq!(reduced, "`abc` *de* **fg**`hi`jkl\n\n*m**n*\n");
    let dom = filter::parse(html, &Limits::default()).unwrap();
    dom::walk(&dom.document, None).unwrap();
    // `<ol>` keeps its two `<em>`s: htmd writes an `<ol>`'s children without joining them.
    assert_eq!(joinable_neighbours(&dom.document), 1);
}

/// Pages of many siblings that htmd would join, or that the walk removes, convert in time
/// linear in their size (they took 4 s and 11 s for 3 MB in a release build when each join
/// and each removal went over all the siblings again; the bound is for a debug build).
#[test]
fn many_siblings_to_join_or_remove_are_linear() {
    for (piece, markdown) in [
        ("<code>a</code>", "a"),
        ("<em>a<a href=\"x\"></a></em>", "a"),
        ("<a href=\"x\"></a>", ""),
    ] {
        let html = format!("<p>{}</p>", piece.repeat(120_000));
        let start = std::time::Instant::now();
        let out = convert_html(&html, None, &Limits::default()).unwrap();
        assert_eq!(
            out.trim().trim_matches(['`', '*']),
            markdown.repeat(120_000)
        );
        assert!(
            start.elapsed().as_secs() < 20,
            "{piece}: {:?}",
            start.elapsed()
        );
    }
}

/// The cells of the tables a CommonMark reader with tables finds in `md`, row by row.
fn table_cells(md: &str) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut cell: Option<String> = None;
    for event in Parser::new_ext(md, CmOptions::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::TableHead) | Event::Start(Tag::TableRow) => rows.push(Vec::new()),
            Event::Start(Tag::TableCell) => cell = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(c) = cell.as_mut() {
                    c.push_str(&t);
                }
            }
            Event::End(TagEnd::TableCell) => {
                if let (Some(row), Some(c)) = (rows.last_mut(), cell.take()) {
                    row.push(c);
                }
            }
            _ => {}
        }
    }
    rows
}

#[test]
fn row_headers_and_header_row_data_cells_are_kept() {
    // A key-value table (the Apache manual's module summary), a header row with a `<td>`, and
    // row headers under a `<thead>`.
    let cases = [
        (
            "<table><tr><th>Status:</th><td>Base</td></tr><tr><th>Source:</th><td>a.c</td></tr></table>",
            vec![vec!["Status:", "Base"], vec!["Source:", "a.c"]],
        ),
        (
            "<table><tr><th>a</th><td>b</td></tr><tr><td>c</td><th>d</th></tr></table>",
            vec![vec!["a", "b"], vec!["c", "d"]],
        ),
        (
            "<table><thead><tr><td>k</td><th>v</th></tr></thead>\
             <tbody><tr><th>x</th><td>1</td></tr></tbody><tfoot><tr><th>sum</th><td>1</td></tr></tfoot></table>",
            vec![vec!["k", "v"], vec!["x", "1"], vec!["sum", "1"]],
        ),
    ];
    for (html, want) in cases {
        let out = md(html, "https://e.example/");
        assert_eq!(table_cells(&out), want, "{html}\n{out}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever mix of `<th>` and `<td>` cells a table has, with or without `<thead>`, the text
    /// of every cell is in the Markdown.
    #[test]
    fn no_table_cell_is_lost(
        rows in proptest::collection::vec(proptest::collection::vec(any::<bool>(), 1..5), 1..6),
        thead in any::<bool>(),
    ) {
        let mut html = String::from("<table>");
        for (r, cells) in rows.iter().enumerate() {
            if thead && r == 0 {
                html.push_str("<thead>");
            }
            html.push_str("<tr>");
            for (c, &th) in cells.iter().enumerate() {
                let tag = if th { "th" } else { "td" };
                html.push_str(&format!("<{tag}>w{r}x{c}</{tag}>"));
            }
            html.push_str("</tr>");
            if thead && r == 0 {
                html.push_str("</thead>");
            }
        }
        html.push_str("</table>");
        let out = md(&html, "https://e.example/");
        for (r, cells) in rows.iter().enumerate() {
            for c in 0..cells.len() {
                let text = format!("w{r}x{c}");
                prop_assert!(out.contains(&text), "{} lost from {}\n{}", text, html, out);
            }
        }
    }
}

#[test]
fn a_link_in_code_is_written_as_code_in_a_link() {
    let html = r#"<p>Set <code class="directive"><a href="core.html#documentroot">DocumentRoot</a></code>
        and <code>a <a href="x">b</a></code> and <pre><code><a href="y">c</a></code></pre></p>"#;
    let out = md(html, "https://e.example/mod/");
    assert!(
        out.contains("[`DocumentRoot`](https://e.example/mod/core.html#documentroot)"),
        "{out}"
    );
    // A code span with more than a link is cut at the link (next test); inside a code block a
    // link stays text.
    assert_eq!(
        links(&out),
        vec![
            "https://e.example/mod/core.html#documentroot",
            "https://e.example/mod/x"
        ],
        "{out}"
    );
    assert!(out.contains("```\nc\n```"), "{out}");
}

#[test]
fn code_elements_cut_at_their_links_are_bounded_by_the_page_size() {
    // Each cut adds nodes the memory reserved per start tag does not cover; a page made of
    // nothing else gets one per `PAGE_BYTES_PER_CUT` bytes, and the rest stay whole.
    let unit = "<code>a <a href=\"/x\">b</a> c</code> ";
    let html = format!("<p>{}</p>", unit.repeat(100));
    let out = md(&html, "https://e.example/");
    let cuts = html.len() / dom::PAGE_BYTES_PER_CUT;
    assert!(cuts > 0 && cuts < 100);
    assert_eq!(links(&out).len(), cuts, "{out}");
    assert_eq!(
        out.matches("`a [b](https://e.example/x) c`").count(),
        100 - cuts,
        "{out}"
    );
    // A code element that is only a link is turned round whatever the count.
    let html = format!(
        "<p>{}</p>",
        "<code><a href=\"/x\">b</a></code> ".repeat(100)
    );
    assert_eq!(links(&md(&html, "https://e.example/")).len(), 100);
}

#[test]
fn an_absolute_target_that_differs_only_by_the_root_slash_is_kept_as_written() {
    let html = r#"<p><a href="http://memcached.example">memcached</a>
        <a href=" https://nghttp2.example ">nghttp2</a> <a href="HTTP://Perl.example">perl</a>
        <a href="https://www.example?q">q</a> <a href="https://docs.example">home</a>
        <a href="https://docs.example/a/../b">dots</a></p>"#;
    let page = "https://docs.example/a/p.html";
    assert_eq!(
        links(&md_with(html, page, LinkForm::Absolute)),
        [
            "http://memcached.example",
            "https://nghttp2.example",
            // Any other difference keeps the URL's serialization.
            "http://perl.example/",
            "https://www.example/?q",
            "https://docs.example",
            "https://docs.example/b",
        ]
    );
    // On the page's own site the root-relative form is shorter still.
    assert_eq!(
        links(&md_with(html, page, LinkForm::RootRelative))[4..],
        ["/", "/b"]
    );
}

/// The code a reader sees (each code span's text, in order) and the links, with their text.
fn code_and_links(md: &str) -> (Vec<String>, Vec<(String, String)>) {
    let (mut code, mut links) = (Vec::new(), Vec::new());
    let mut link: Option<(String, String)> = None;
    for event in Parser::new_ext(md, CmOptions::ENABLE_TABLES) {
        match event {
            Event::Code(c) => {
                code.push(c.to_string());
                if let Some((_, text)) = link.as_mut() {
                    text.push_str(&c);
                }
            }
            Event::Text(t) => {
                if let Some((_, text)) = link.as_mut() {
                    text.push_str(&t);
                }
            }
            Event::Start(Tag::Link { dest_url, .. }) => {
                link = Some((dest_url.to_string(), String::new()))
            }
            Event::End(TagEnd::Link) => links.extend(link.take()),
            _ => {}
        }
    }
    (code, links)
}

#[test]
fn code_that_holds_links_among_its_text_is_cut_at_the_links() {
    // The Apache manual's module guide: a signature whose function name links to its
    // documentation; its directives' names linked inside longer code.
    let html = r#"<ul><li><code>void* <a href="http://apr.example/pools.html#palloc">apr_palloc</a>(
apr_pool_t *p, apr_size_t size)</code>: allocates</li></ul>
        <p>If you use any <code><code class="directive"><a href="../mod/compat.html#allow">Allow</a></code> from domain</code>
        or <code><a href="/a">a</a>, <a href="/b"><code>b</code></a></code>.</p>
        <table><tr><th>Module</th></tr><tr><td><code><a href="https://tomcat.example/jk2/">JK</a> (Formerly mod_jserv)</code></td></tr></table>"#;
    // A page of some size: the cuts are bounded by its bytes (next test).
    let html = format!("{html}<p>{}</p>", "Some words. ".repeat(40));
    let out = md(&html, "https://e.example/misc/perf.html");
    let (code, links) = code_and_links(&out);
    assert_eq!(
        links,
        [
            ("http://apr.example/pools.html#palloc", "apr_palloc"),
            ("https://e.example/mod/compat.html#allow", "Allow"),
            ("https://e.example/a", "a"),
            ("https://e.example/b", "b"),
            ("https://tomcat.example/jk2/", "JK"),
        ]
        .map(|(u, t)| (u.to_string(), t.to_string())),
        "{out}"
    );
    // Every character of the code is still code, but for the whitespace at the cuts.
    assert_eq!(
        code,
        [
            "void*",
            "apr_palloc",
            "( apr_pool_t *p, apr_size_t size)",
            "Allow",
            "from domain",
            "a",
            ",",
            "b",
            "JK",
            "(Formerly mod_jserv)"
        ],
        "{out}"
    );
    // A code span without links is one span, as before.
    let plain = md("<p>x <code>a <i>b</i> c</code> d</p>", "https://e.example/");
    assert_eq!(plain.trim(), "x `a *b* c` d");
}

fn md_with(html: &str, url: &str, links: LinkForm) -> String {
    let url = Url::parse(url).unwrap();
    convert_html_with(html, Some(&url), &Limits::default(), links).unwrap()
}

#[test]
fn same_origin_links_are_root_relative_with_the_page_url_in_the_frontmatter() {
    let html = r##"<title>T</title><p><a href="../b.html?x=1#s">up</a>
        <a href="https://docs.example/c">same</a> <a href="http://docs.example/d">other scheme</a>
        <a href="https://docs.example:8443/e">other port</a> <a href="//cdn.example/f">other host</a>
        <a href="https://docs.example//g">double slash</a> <a href="mailto:a@docs.example">mail</a>
        <a href="#top">here</a> <img src="/i.png" alt="pic"></p>"##;
    let out = md_with(
        html,
        "https://docs.example/a/p.html",
        LinkForm::RootRelative,
    );
    let (yaml, _) = frontmatter(&out);
    assert_eq!(
        yaml["url"].as_str(),
        Some("https://docs.example/a/p.html"),
        "{out}"
    );
    assert_eq!(
        links(&out),
        [
            "/b.html?x=1#s",
            "/c",
            "http://docs.example/d",
            "https://docs.example:8443/e",
            "https://cdn.example/f",
            "https://docs.example//g",
            "mailto:a@docs.example",
            "/i.png"
        ],
        "{out}"
    );
    // The edge's form is unchanged, and has no `url` in its frontmatter.
    let absolute = md(html, "https://docs.example/a/p.html");
    assert!(!absolute.contains("url:"), "{absolute}");
    assert!(links(&absolute).contains(&"https://docs.example/b.html?x=1#s".to_string()));
    // Nothing shortened, no `url`; no page URL, nothing shortened.
    let out = md_with(
        r#"<title>T</title><a href="https://elsewhere.example/">x</a>"#,
        "https://docs.example/",
        LinkForm::RootRelative,
    );
    assert_eq!(
        out,
        "---\ntitle: \"T\"\n---\n\n[x](https://elsewhere.example/)\n"
    );
    let out = convert_html_with(
        r#"<a href="https://docs.example/a">x</a>"#,
        None,
        &Limits::default(),
        LinkForm::RootRelative,
    )
    .unwrap();
    assert_eq!(out, "[x](https://docs.example/a)\n");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A root-relative target, resolved against the page URL as RFC 3986 says (the `url`
    /// crate's `join`), is the absolute target the edge's form writes.
    #[test]
    fn root_relative_links_resolve_to_the_absolute_ones(
        hrefs in proptest::collection::vec(
            proptest::collection::vec(
                prop_oneof![
                    Just("a"), Just("../"), Just("/"), Just("//"), Just("b/"), Just("?q=1"),
                    Just("#f"), Just("https://docs.example"), Just("http://docs.example"),
                    Just("https://docs.example:8443"), Just("https://other.example"),
                    Just("%20"), Just(" "), Just("("), Just(")"), Just("x y"), Just("."),
                    Just("mailto:"), Just("&amp;"), Just(":"), Just("@"),
                ],
                1..6,
            ).prop_map(|parts| parts.concat()),
            1..6,
        ),
        base in prop_oneof![Just(""), Just("<base href=\"/z/\">"), Just("<base href=\"https://other.example/\">")],
    ) {
        let page = "https://docs.example/a/b/p.html";
        let mut html = format!("{base}<p>");
        for (i, href) in hrefs.iter().enumerate() {
            html.push_str(&format!("<a href=\"{href}\">l{i}</a> "));
        }
        let absolute = links(&md_with(&html, page, LinkForm::Absolute));
        let relative = links(&md_with(&html, page, LinkForm::RootRelative));
        prop_assert_eq!(absolute.len(), relative.len());
        let page = Url::parse(page).unwrap();
        for (a, r) in absolute.iter().zip(&relative) {
            if a == r {
                // Absolute already, or a target that does not resolve and stays as written.
                continue;
            }
            // The absolute form may be written as the page wrote it (a site's root without its
            // `/`), which is the same URL.
            let resolved = page.join(r).map(String::from);
            let a_url = Url::parse(a).map(String::from);
            prop_assert_eq!(resolved, a_url, "{} {} in {}", a, r, html);
            if r.starts_with('/') {
                prop_assert!(!r.starts_with("//"));
                prop_assert_eq!(Url::parse(a).unwrap().origin(), page.origin());
            }
        }
    }
}

#[test]
fn no_break_spaces_are_plain_spaces_outside_code() {
    let html = "<p>Module&nbsp;Identifier:\u{a0}x <b>&nbsp;bold</b> <img src=\"/i.png\" alt=\"a&nbsp;b\">\
        <code>a&nbsp;b</code></p><pre>c&nbsp;d</pre><table><tr><th>h&nbsp;1</th></tr>\
        <tr><td>&nbsp;</td></tr></table>";
    let out = md(html, "https://e.example/");
    assert_eq!(
        out,
        "Module Identifier: x **bold** ![a b](https://e.example/i.png)`a\u{a0}b`\n\n\
         ```\nc\u{a0}d\n```\n\n| h 1 |\n| --- |\n| |\n",
        "{out}"
    );
}

/// Every piece of the Markdown a reader takes for text (not code) and every link target.
fn text_outside_code(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code_block = false;
    for event in Parser::new_ext(md, CmOptions::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::CodeBlock(_)) => in_code_block = true,
            Event::End(TagEnd::CodeBlock) => in_code_block = false,
            Event::Code(_) => {}
            Event::Text(t) | Event::Html(t) | Event::InlineHtml(t) if !in_code_block => {
                out.push(t.to_string())
            }
            Event::Start(Tag::Link {
                dest_url, title, ..
            })
            | Event::Start(Tag::Image {
                dest_url, title, ..
            }) => {
                out.push(dest_url.to_string());
                out.push(title.to_string());
            }
            _ => {}
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the text and markup around it, a no-break space reaches the Markdown only
    /// inside code.
    #[test]
    fn no_break_spaces_only_in_code(
        blocks in proptest::collection::vec(
            (
                prop_oneof![
                    Just(("<p>", "</p>")), Just(("<h2>", "</h2>")), Just(("<ul><li>", "</ul>")),
                    Just(("<table><tr><th>", "</table>")), Just(("<blockquote>", "</blockquote>")),
                    Just(("", "")),
                ],
                proptest::collection::vec(
                    prop_oneof![
                        Just("&nbsp;".to_string()), Just("\u{a0}".to_string()),
                        Just("&#160;".to_string()), "<b>[a-z \u{a0}]{0,6}</b>",
                        "<em>[a-z \u{a0}]{0,6}</em>", "<a href=\"/x\">[a-z \u{a0}]{0,6}</a>",
                        Just("<td>".to_string()),
                        Just("<br>".to_string()),
                        Just("<img alt=\"a&nbsp;b\" src=\"/i\">".to_string()),
                        // Not empty: htmd writes an empty `<code>` as two backticks, which
                        // open a code span the reader closes somewhere else.
                        "<code>[a-z][a-z \u{a0}]{0,6}</code>", "[a-z \u{a0}]{0,8}",
                    ],
                    0..12,
                ),
            ),
            0..6,
        ),
        // Code blocks stand between the other blocks: a `<pre>` inside a heading or an
        // emphasis is written by htmd as a fence that a reader does not take for one.
        pres in proptest::collection::vec("<pre>[a-z \u{a0}\n]{0,8}</pre>", 0..6),
    ) {
        let mut parts = Vec::new();
        for (i, ((open, close), inline)) in blocks.iter().enumerate() {
            parts.push(open.to_string());
            parts.extend(inline.iter().cloned());
            parts.push(close.to_string());
            parts.extend(pres.get(i).cloned());
        }
        let html = parts.concat();
        let out = md(&html, "https://e.example/");
        for text in text_outside_code(&out) {
            prop_assert!(!text.contains('\u{a0}'), "{:?} in {:?} from {:?}", text, out, html);
        }
    }
}

#[test]
fn pipes_in_table_cells_are_escaped_for_gfm_even_in_code() {
    let html = r#"<table><tr><th>Syntax:</th><td><code>KeepAlive On|Off</code></td></tr>
        <tr><th>a|b</th><td>c\|d <code>e\|f</code></td></tr>
        <caption>Caption</caption></table>"#;
    let out = md(html, "https://e.example/");
    assert!(!out.contains("&#124;"), "{out}");
    assert_eq!(
        out,
        "Caption\n\n| Syntax: | `KeepAlive On\\|Off` |\n| --- | --- |\n| a\\|b | c\\\\\\|d `e\\\\|f` |\n",
        "{out}"
    );
    assert_eq!(
        table_cells(&out),
        [
            vec!["Syntax:", "KeepAlive On|Off"],
            vec!["a|b", "c\\|d e\\|f"]
        ]
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever text or code a cell holds (pipes, backslashes, backticks, Markdown's other
    /// punctuation), a GFM reader reads the cell back as that text.
    #[test]
    fn table_cells_read_back_as_their_text(
        rows in proptest::collection::vec(
            proptest::collection::vec(
                (any::<bool>(), r"[a-z|\\`*_\[\]<>#&!-]{1,10}"),
                1..4,
            ),
            1..4,
        ),
    ) {
        let mut html = String::from("<table>");
        let mut want = Vec::new();
        for (r, cells) in rows.iter().enumerate() {
            html.push_str("<tr>");
            let mut row = Vec::new();
            for (code, text) in cells {
                let tag = if r == 0 { "th" } else { "td" };
                let escaped = text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
                // A code span can hold any text but a backtick run of its own fence's length;
                // htmd picks the fence.
                if *code {
                    html.push_str(&format!("<{tag}><code>{escaped}</code></{tag}>"));
                } else {
                    html.push_str(&format!("<{tag}>{escaped}</{tag}>"));
                }
                row.push(text.clone());
            }
            html.push_str("</tr>");
            want.push(row);
        }
        html.push_str("</table>");
        let out = md(&html, "https://e.example/");
        prop_assert!(!out.contains("&#124;"), "{}", out);
        let columns = want.iter().map(Vec::len).max().unwrap_or(0);
        // Rows shorter than the widest are filled with empty cells.
        let read = table_cells(&out);
        for (r, row) in want.iter().enumerate() {
            let got = &read[r];
            prop_assert_eq!(got.len(), columns, "{:?}\n{}", html, out);
            for (c, text) in row.iter().enumerate() {
                prop_assert_eq!(&got[c], text, "{:?}\n{}", html, out);
            }
        }
    }
}

/// The Apache manual's page shape: its menu, breadcrumbs and language bars are in `<div>`s
/// and `<p>`s that say nothing of navigation.
#[test]
fn unmarked_navigation_goes_by_its_shape_and_the_content_stays() {
    let html = r##"<body><div id="page-header">
        <p class="menu"><a href="/mod/">Modules</a> | <a href="/glossary.html">Glossary</a></p>
        <p class="apache">Apache HTTP Server Version 2.4</p><img alt="" src="/feather.png"></div>
        <div class="up"><a href="./"><img alt="&lt;-" src="/left.gif"></a></div>
        <div id="path"><a href="https://www.apache.org/">Apache</a> &gt; <a href="/docs/">Docs</a></div>
        <div id="page-content"><div id="preamble"><h1>Module mod_alias</h1>
        <div class="toplang"><p><span>Available Languages: </span>
        <a href="/en/a.html" title="English">&nbsp;en&nbsp;</a> |
        <a href="/fr/a.html" hreflang="fr" rel="alternate">&nbsp;fr&nbsp;</a> |
        <a href="/ja/a.html" hreflang="ja" rel="alternate">&nbsp;ja&nbsp;</a></p></div>
        <table class="module"><tr><th>Status:</th><td>Base</td></tr></table>
        <p>Maps <a href="/urls.html">URLs</a> to files.</p>
        <ul id="toc"><li><img alt="" src="/down.gif"> <a href="#alias">Alias</a></li></ul>
        <h3>See also</h3><ul class="seealso"><li><a href="/rewrite.html">mod_rewrite</a></li></ul>
        <pre>Alias "/image" "/ftp/pub/image"</pre>
        <div class="top"><a href="#page-header"><img alt="top" src="/up.gif"></a></div>
        </div></div>
        <div class="bottomlang"><p><span>Available Languages: </span>
        <a href="/en/a.html">en</a> | <a href="/fr/a.html" hreflang="fr">fr</a> |
        <a href="/ja/a.html" hreflang="ja">ja</a></p></div></body>"##;
    let out = md(html, "https://httpd.example/mod/a.html");
    assert_eq!(
        out,
        "Apache HTTP Server Version 2.4\n\n# Module mod\\_alias\n\n\
         | Status: | Base |\n| --- | --- |\n\n\
         Maps [URLs](https://httpd.example/urls.html) to files.\n\n- Alias\n\n\
         ### See also\n\n- [mod\\_rewrite](https://httpd.example/rewrite.html)\n\n\
         ```\nAlias \"/image\" \"/ftp/pub/image\"\n```\n",
        "{out}"
    );
}

#[test]
fn link_lists_go_only_outside_marked_content_or_above_the_title() {
    // With `<main>`: the sidebar and the footer's columns of links go; inside, a list of
    // links (a table of contents of other pages) stays, and so does a paragraph outside.
    let html = r#"<body><div class="sidebar"><ul><li><a href="/a">A</a></li><li><a href="/b">B</a></li></ul></div>
        <main><h1>Guide</h1><ul><li><a href="/c">Chapter one</a></li><li><a href="/d">Chapter two</a></li></ul></main>
        <div>Written by the team, see <a href="/about">about us</a> for more.</div>
        <div class="cols"><p><a href="/x">X</a> · <a href="/y">Y</a></p></div></body>"#;
    let out = md(html, "https://e.example/");
    assert_eq!(
        out,
        "# Guide\n\n- [Chapter one](https://e.example/c)\n- [Chapter two](https://e.example/d)\n\n\
         Written by the team, see [about us](https://e.example/about) for more.\n",
        "{out}"
    );
    // `role="main"` marks the content as `<main>` does.
    let html = r#"<div><a href="/a">A</a> <a href="/b">B</a></div><div role="main"><p>Body
        <a href="/c">c</a></p><p><a href="/d">D</a> | <a href="/e">E</a></p></div>"#;
    let out = md(html, "https://e.example/");
    assert_eq!(
        out,
        "Body [c](https://e.example/c)\n\n[D](https://e.example/d) | [E](https://e.example/e)\n",
        "{out}"
    );
    // An index page, all links after its title, keeps them all; without a title and without
    // marked content, nothing is dropped by place.
    let index = r#"<h1>Index</h1><ul><li><a href="/a">a</a></li><li><a href="/b">b</a></li></ul>
        <p><a href="/c">c</a> | <a href="/d">d</a></p>"#;
    assert_eq!(
        links(&md(index, "https://e.example/")).len(),
        4,
        "{}",
        md(index, "https://e.example/")
    );
    let untitled = r#"<p><a href="/a">a</a> | <a href="/b">b</a></p><h2>Part</h2><p>Text</p>"#;
    assert_eq!(links(&md(untitled, "https://e.example/")).len(), 2);
    // A layout table's menu column, before the title.
    let layout = r#"<table><tr><td><a href="/">Home</a><br><a href="/docs">Docs</a></td>
        <td><h1>Title</h1><p>Text of the page.</p></td></tr></table>"#;
    assert_eq!(
        md(layout, "https://e.example/"),
        "# Title\n\nText of the page.\n"
    );
}

#[test]
fn breadcrumbs_go_outside_content_but_arrows_in_a_sentence_stay() {
    let html = r#"<h1>Title</h1><p>Choose <a href="/m">Menu</a> &gt; <a href="/s">Save</a> to keep it.</p>
        <div><a href="/">Home</a> &raquo; <a href="/docs/">Docs</a> &raquo; <a href="/docs/x">X</a></div>
        <p>End.</p>"#;
    let out = md(html, "https://e.example/");
    assert_eq!(
        out,
        "# Title\n\nChoose [Menu](https://e.example/m) > [Save](https://e.example/s) to keep it.\n\nEnd.\n",
        "{out}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Blocks of navigation's shape anywhere on a page, with or without `<main>` and a title:
    /// every paragraph, list item with words, table cell, heading and code block stays, and
    /// so does every link inside `<main>` but a language bar's.
    #[test]
    fn navigation_by_shape_never_takes_content(
        blocks in proptest::collection::vec(0u8..9, 1..14),
        main_at in proptest::option::of(0usize..14),
        h1_at in proptest::option::of(0usize..14),
    ) {
        let mut html = String::new();
        let mut kept = Vec::new();
        let mut in_main = false;
        let (main_start, main_end) = main_at.map_or((usize::MAX, usize::MAX), |m| (m, m + 4));
        for (i, kind) in blocks.iter().enumerate() {
            if i == main_start {
                html.push_str("<main>");
                in_main = true;
            }
            if h1_at == Some(i) {
                html.push_str(&format!("<h1>title{i}</h1>"));
                kept.push(format!("title{i}"));
            }
            let w = format!("w{i}");
            match kind {
                0 => {
                    html.push_str(&format!("<p>{w}a {w}b <a href=\"/{w}\">{w}c</a> {w}d</p>"));
                    kept.extend([format!("{w}a"), format!("{w}c"), format!("/{w}")]);
                }
                1 => {
                    html.push_str(&format!("<ul><li>{w}a {w}b {w}e</li><li><a href=\"/{w}\">{w}c</a></li></ul>"));
                    kept.extend([format!("{w}a"), format!("{w}e")]);
                }
                2 => {
                    html.push_str(&format!("<table><tr><th>{w}h</th></tr><tr><td><a href=\"/{w}\">{w}a</a></td></tr></table>"));
                    kept.extend([format!("{w}h")]);
                }
                3 => {
                    html.push_str(&format!("<pre>{w}code</pre>"));
                    kept.push(format!("{w}code"));
                }
                4 => {
                    html.push_str(&format!("<h2>{w}head</h2>"));
                    kept.push(format!("{w}head"));
                }
                // Link lists: a menu, a breadcrumb trail, a language bar, a list of links.
                5 => html.push_str(&format!("<p><a href=\"/{w}x\">{w}x</a> | <a href=\"/{w}y\">{w}y</a></p>")),
                6 => html.push_str(&format!("<div><a href=\"/\">{w}h</a> &gt; <a href=\"/{w}\">{w}p</a></div>")),
                7 => html.push_str(&format!("<div>Languages: <a href=\"/en/{w}\">en</a> <a hreflang=\"fr\" href=\"/fr/{w}\">fr</a> <a hreflang=\"de\" href=\"/de/{w}\">de</a></div>")),
                _ => html.push_str(&format!("<ul><li><a href=\"/{w}x\">{w}x</a></li><li><a href=\"/{w}y\">{w}y</a></li></ul>")),
            }
            match kind {
                5 | 8 if in_main => kept.extend([format!("{w}x"), format!("/{w}y")]),
                6 if in_main => kept.extend([format!("{w}p"), format!("/{w}")]),
                _ => {}
            }
            if i + 1 == main_end || (in_main && i + 1 == blocks.len()) {
                html.push_str("</main>");
                in_main = false;
            }
        }
        let out = md(&html, "https://e.example/");
        for word in &kept {
            // The word, or the link target, is somewhere in the Markdown.
            prop_assert!(out.contains(word.as_str()) || out.contains(&format!("e.example{word}")),
                "{} lost from {}\n{}", word, html, out);
        }
    }
}
