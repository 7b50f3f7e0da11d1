//! Converts HTML files to Markdown, one output file per page, for comparisons with other
//! converters (`bench/markdown_peers.sh`).
//!
//!     cargo run --release -p signpost-markdown --example convert_files -- \
//!         [--links absolute|root-relative] <site root> <site URL> <out dir> <file>...
//!
//! Each file's URL is the site URL joined with the file's path under the site root (the URL its
//! links resolve against, as the edge's request URL); its Markdown is written to the same path
//! under the out dir with `.md` added. A page that does not convert (the edge would send the
//! HTML) is named on stderr and written as nothing.

use std::path::Path;

use signpost_markdown::{Limits, LinkForm, Source, convert_with};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut links = LinkForm::RootRelative;
    if args.first().map(String::as_str) == Some("--links") && args.len() > 1 {
        links = match args[1].as_str() {
            "absolute" => LinkForm::Absolute,
            "root-relative" => LinkForm::RootRelative,
            other => panic!("--links absolute|root-relative, not {other}"),
        };
        args.drain(..2);
    }
    let [root, site, out, files @ ..] = args.as_slice() else {
        eprintln!(
            "usage: convert_files [--links absolute|root-relative] <site root> <site URL> <out dir> <file>..."
        );
        std::process::exit(2);
    };
    let (root, out) = (Path::new(root), Path::new(out));
    let site = url::Url::parse(site).expect("a site URL");
    let limits = Limits::default();
    for file in files {
        let file = Path::new(file);
        let relative = file.strip_prefix(root).expect("files under the site root");
        let page = site.join(&relative.to_string_lossy()).expect("a page URL");
        let body = std::fs::read(file).expect("a readable file");
        let source = Source {
            body: &body,
            content_type: Some("text/html"),
            content_encoding: None,
        };
        let markdown =
            convert_with(&source, Some(page.as_str()), &limits, links).unwrap_or_else(|e| {
                eprintln!("{}: not converted: {e}", file.display());
                String::new()
            });
        let target = out.join(format!("{}.md", relative.display()));
        std::fs::create_dir_all(target.parent().expect("a directory")).expect("out dir");
        std::fs::write(target, markdown).expect("written");
    }
}
