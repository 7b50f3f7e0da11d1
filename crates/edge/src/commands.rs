//! The commands that do not serve traffic: check, render, codes, tokens, health.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use signpost_policy::CompiledPolicy;
use signpost_problem::{Branding, Format, Problem};

use crate::ray::RayId;

/// `signpost check <file>`: every problem with file, line and column, or "ok".
pub fn check(file: &Path) -> ExitCode {
    match CompiledPolicy::load(file, None) {
        Ok(policy) => {
            println!(
                "{}: ok ({} zones, {} listeners)",
                file.display(),
                policy.zones().len(),
                policy.listeners().len()
            );
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("{err}");
            ExitCode::from(1)
        }
    }
}

/// `signpost render <code> --accept <value> [--host <h>]`: the exact response the edge sends.
pub fn render(code: &str, accept: &str, host: &str) -> anyhow::Result<()> {
    let entry = signpost_problem::lookup_path_code(code);
    let accept = (!accept.is_empty()).then_some(accept.as_bytes());
    let format = signpost_problem::negotiate(accept);
    let ray = RayId::next().to_hex();
    let problem = Problem {
        entry,
        ray_id: ray.as_str(),
        timestamp: SystemTime::now(),
        zone: host,
        retry_after: None,
    };
    let rendered = signpost_problem::render(&problem, format, &Branding::default());
    let status = http::StatusCode::from_u16(rendered.status).context("status out of range")?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "HTTP/1.1 {} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )?;
    for (name, value) in rendered.headers(ray.as_str()) {
        writeln!(out, "{name}: {value}")?;
    }
    writeln!(out)?;
    out.write_all(&rendered.body)?;
    Ok(())
}

/// `signpost codes`: the catalog as a table.
pub fn codes() -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<5} {:<6} {:<14} {:<6} {:<6} {:<34} title",
        "code", "status", "category", "retry", "owner", "error_name"
    )?;
    for entry in signpost_problem::catalog() {
        let retry = entry
            .retry_after
            .map_or_else(|| "no".to_string(), |s| format!("{s}s"));
        writeln!(
            out,
            "{:<5} {:<6} {:<14} {:<6} {:<6} {:<34} {}",
            entry.code,
            entry.status,
            entry.error_category.as_str(),
            retry,
            if entry.owner_action_required {
                "yes"
            } else {
                "no"
            },
            entry.error_name,
            entry.title
        )?;
    }
    Ok(())
}

/// `signpost markdown <file|->`: the Markdown the edge would send for this page, and the
/// token counts of both.
pub fn markdown(file: &Path, url: Option<&str>, max_bytes: usize) -> anyhow::Result<()> {
    let html = if file.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .lock()
            .take(max_bytes as u64 + 1)
            .read_to_end(&mut buf)?;
        buf
    } else {
        std::fs::read(file).with_context(|| format!("reading {}", file.display()))?
    };
    if let Some(url) = url {
        url::Url::parse(url).with_context(|| format!("--url {url:?} is not an absolute URL"))?;
    }
    let limits = signpost_markdown::Limits {
        max_bytes,
        ..signpost_markdown::Limits::default()
    };
    let source = signpost_markdown::Source {
        body: &html,
        content_type: None,
        content_encoding: None,
    };
    let markdown = signpost_markdown::convert(&source, url, &limits)
        .map_err(|e| anyhow::anyhow!("not converted (the edge would send the HTML): {e}"))?;
    let bpe = tiktoken_rs::cl100k_base().context("loading the cl100k_base tokenizer")?;
    let html_text = signpost_markdown::to_utf8(&html, None);
    let html_tokens = bpe.encode_with_special_tokens(&html_text).len();
    let md_tokens = bpe.encode_with_special_tokens(&markdown).len();
    std::io::stdout().lock().write_all(markdown.as_bytes())?;
    let saved = if html_tokens > 0 {
        100.0 * (1.0 - md_tokens as f64 / html_tokens as f64)
    } else {
        0.0
    };
    eprintln!(
        "html: {} bytes, {html_tokens} tokens; markdown: {} bytes, {md_tokens} tokens ({saved:.1}% fewer tokens)",
        html.len(),
        markdown.len()
    );
    Ok(())
}

/// Cloudflare's own measurement of its 1015 responses (bytes, cl100k_base tokens).
const CLOUDFLARE_1015: [(&str, usize, usize); 3] = [
    ("html", 46_645, 14_252),
    ("markdown", 798, 221),
    ("json", 970, 256),
];

/// `signpost tokens`: bytes and cl100k_base tokens of every code in each format, for the zone
/// `example.com` and a fixed ray id, with Cloudflare's 1015 measurement beside ours.
pub fn tokens() -> anyhow::Result<()> {
    let bpe = tiktoken_rs::cl100k_base().context("loading the cl100k_base tokenizer")?;
    let formats = [Format::Html, Format::Markdown, Format::Json];
    let branding = Branding::default();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<5} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "code", "html B", "html tok", "md B", "md tok", "json B", "json tok"
    )?;
    for entry in signpost_problem::catalog() {
        let problem = Problem {
            entry,
            ray_id: "9d99a39dc992d168",
            timestamp: SystemTime::now(),
            zone: "example.com",
            retry_after: None,
        };
        let mut cells = Vec::new();
        for format in formats {
            let body = signpost_problem::render(&problem, format, &branding).body;
            let text = String::from_utf8_lossy(&body);
            cells.push((body.len(), bpe.encode_with_special_tokens(&text).len()));
        }
        writeln!(
            out,
            "{:<5} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
            entry.code, cells[0].0, cells[0].1, cells[1].0, cells[1].1, cells[2].0, cells[2].1
        )?;
        if entry.code == 1015 {
            let cf = CLOUDFLARE_1015;
            writeln!(
                out,
                "{:<5} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}   <- Cloudflare's 1015, for comparison",
                "cf", cf[0].1, cf[0].2, cf[1].1, cf[1].2, cf[2].1, cf[2].2
            )?;
        }
    }
    Ok(())
}

/// `signpost health`: a GET on the admin listener's `/healthz`; exit 0 on a 200.
///
/// Hand-written on purpose: the runtime image has no curl, and one GET over loopback does not
/// justify an HTTP client dependency in the binary.
pub fn health(url: &str) -> ExitCode {
    match probe(url) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("signpost health: {err:#}");
            ExitCode::from(1)
        }
    }
}

fn probe(url: &str) -> anyhow::Result<()> {
    let rest = url
        .strip_prefix("http://")
        .context("only http:// URLs are supported")?;
    let (authority, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(a, p)| (a, format!("/{p}")));
    let addr = authority
        .to_socket_addrs()?
        .next()
        .context("the address does not resolve")?;
    let timeout = Duration::from_secs(3);
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.take(64 * 1024).read_to_end(&mut response)?;
    let status_line = response.split(|&b| b == b'\n').next().unwrap_or_default();
    let status_line = String::from_utf8_lossy(status_line);
    if status_line.split_whitespace().nth(1) != Some("200") {
        bail!("{url} answered {}", status_line.trim());
    }
    Ok(())
}
