//! Prints the cl100k_base token count of each file named on stdin (one path a line), as
//! `count<TAB>path`, for `bench/markdown_peers.py`: the encoding ships inside tiktoken-rs, so
//! nothing is downloaded.
//!
//!     find out -name '*.md' | cargo run --release -p signpost-markdown --example count_tokens

use std::io::BufRead;

fn main() {
    let bpe = tiktoken_rs::cl100k_base_singleton();
    for path in std::io::stdin().lock().lines() {
        let path = path.expect("a line");
        let text = std::fs::read(&path).expect("a readable file");
        let count = bpe
            .encode_with_special_tokens(&String::from_utf8_lossy(&text))
            .len();
        println!("{count}\t{path}");
    }
}
