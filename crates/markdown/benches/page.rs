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
