//! The generated documentation-like page shared by the benchmark and the throughput example.

/// A page of about `bytes` bytes built from one repeated section.
pub fn page(bytes: usize) -> String {
    let mut html = String::from(
        "<!doctype html><html><head><title>Reference</title>\
         <meta name=\"description\" content=\"A reference page\">\
         <link rel=\"stylesheet\" href=\"/s.css\"><script src=\"/app.js\"></script></head><body>\
         <header class=\"site\"><a href=\"/\">Home</a></header>\
         <nav><ul><li><a href=\"/a\">A</a></li><li><a href=\"/b\">B</a></li></ul></nav><main>",
    );
    let mut i = 0;
    while html.len() < bytes {
        i += 1;
        html.push_str(&format!(
            "<section id=\"s{i}\"><h2>Section {i}</h2>\
             <p class=\"lead\">The <code>option_{i}</code> setting controls <em>how</em> the \
             <a href=\"../guide/{i}.html\" class=\"ref\">guide</a> applies; see \
             <strong>notes</strong> below for the details of each case.</p>\
             <ul><li>First point about {i}</li><li>Second point with <a href=\"#x{i}\">anchor</a></li></ul>\
             <table><tr><th>Key</th><th>Value</th></tr><tr><td>k{i}</td><td>v{i}</td></tr></table>\
             <pre><code class=\"language-rust\">fn f_{i}() -> u32 {{ {i} }}\n</code></pre>\
             <div class=\"note\"><p>Note {i}: <img src=\"/i/{i}.png\" alt=\"figure {i}\"></p></div></section>"
        ));
    }
    html.push_str("</main><footer>© Example</footer></body></html>");
    html
}

/// A page of about `bytes` bytes of real documentation: the bodies of the git-doc manual pages
/// (`/usr/share/doc/git-doc`, Debian's `git-doc` package) in name order, concatenated and cut
/// after the last `</p>` that fits, under a minimal head. `None` when git-doc is not installed.
#[allow(dead_code)]
pub fn real_page(bytes: usize) -> Option<String> {
    let mut files: Vec<_> = std::fs::read_dir("/usr/share/doc/git-doc")
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "html"))
        .collect();
    files.sort();
    let mut body = String::new();
    for f in files {
        let Ok(page) = std::fs::read_to_string(&f) else {
            continue;
        };
        let Some(start) = page.find("<body") else {
            continue;
        };
        let inner = &page[start..];
        let inner = &inner[inner.find('>').map_or(0, |i| i + 1)..];
        let inner = inner.rfind("</body>").map_or(inner, |end| &inner[..end]);
        body.push_str(inner);
        if body.len() >= bytes {
            break;
        }
    }
    let head = "<!doctype html><html><head><title>Git documentation</title></head><body>";
    let room = bytes.saturating_sub(head.len() + "</body></html>".len());
    let mut cut = room.min(body.len());
    while !body.is_char_boundary(cut) {
        cut -= 1;
    }
    let cut = body[..cut].rfind("</p>").map_or(cut, |i| i + "</p>".len());
    Some(format!("{head}{}</body></html>", &body[..cut]))
}
