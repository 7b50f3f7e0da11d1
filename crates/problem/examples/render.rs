//! Prints one problem in a format, the page in a language:
//! `cargo run -p signpost-problem --example render -- 1015 html example.com fr`
use signpost_problem::{
    Branding, Custom, Format, Language, Problem, TokenValues, Visitor, lookup_path_code,
    render_for_visitor,
};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = args.first().map_or("1015", String::as_str);
    let format = match args.get(1).map_or("markdown", String::as_str) {
        "html" => Format::Html,
        "json" => Format::Json,
        _ => Format::Markdown,
    };
    let zone = args.get(2).map_or("example.com", String::as_str);
    let visitor = Visitor {
        language: args
            .get(3)
            .and_then(|tag| Language::from_tag(tag))
            .unwrap_or_default(),
        ..Visitor::default()
    };
    let problem = Problem::new(lookup_path_code(code), "9d99a39dc992d168", zone);
    let rendered = render_for_visitor(
        &problem,
        format,
        &Branding::default(),
        &Custom::default(),
        &TokenValues::default(),
        &visitor,
    );
    for (name, value) in rendered.headers(problem.ray_id) {
        eprintln!("{name}: {value}");
    }
    println!("{}", String::from_utf8_lossy(&rendered.body));
}
