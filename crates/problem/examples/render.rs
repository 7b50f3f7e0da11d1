//! Prints one problem in a format: `cargo run -p signpost-problem --example render -- 1015 markdown example.com`
use signpost_problem::{Branding, Format, Problem, lookup_path_code, render};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = args.first().map_or("1015", String::as_str);
    let format = match args.get(1).map_or("markdown", String::as_str) {
        "html" => Format::Html,
        "json" => Format::Json,
        _ => Format::Markdown,
    };
    let zone = args.get(2).map_or("example.com", String::as_str);
    let problem = Problem::new(lookup_path_code(code), "9d99a39dc992d168", zone);
    let rendered = render(&problem, format, &Branding::default());
    for (name, value) in rendered.headers(problem.ray_id) {
        eprintln!("{name}: {value}");
    }
    println!("{}", String::from_utf8_lossy(&rendered.body));
}
