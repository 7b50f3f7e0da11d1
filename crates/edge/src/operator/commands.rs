//! The commands that do not serve traffic: check, render, codes, tokens, bots, health.
//!
//! Output goes through `writeln!` to a locked stdout, never `println!`: a reader that closes
//! the pipe early (`signpost bots | head -1`) makes a write fail with `BrokenPipe`, which `main`
//! ends quietly, where `println!` would panic.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use signpost_policy::{CompiledPolicy, RequestFacts};
use signpost_problem::{Branding, Format, Problem};

use crate::request::ray::RayId;

/// `signpost check <file>`: every problem with file, line and column, or "ok". What `run`
/// refuses, `check` refuses: the policy's own checks (the files it names among them), then the
/// TLS listeners' and zones' certificate files as the edge's TLS library takes them (`certs::check_files`, which `run`
/// calls too).
pub fn check(file: &Path) -> anyhow::Result<ExitCode> {
    let checked = CompiledPolicy::load(file, None).and_then(|policy| {
        let listeners = policy.listeners().iter().filter_map(|l| l.tls.as_ref());
        let zones = policy.zones().iter().filter_map(|z| z.tls.files.as_ref());
        for tls in listeners.chain(zones) {
            crate::connection::certs::check_files(tls)?;
        }
        Ok(policy)
    });
    match checked {
        Ok(policy) => {
            writeln!(
                std::io::stdout().lock(),
                "{}: ok ({} zones, {} listeners)",
                file.display(),
                policy.zones().len(),
                policy.listeners().len()
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Err(err) => {
            eprintln!("{err}");
            Ok(ExitCode::from(1))
        }
    }
}

/// `signpost render`'s arguments.
#[derive(clap::Args, Debug)]
pub struct RenderArgs {
    /// A catalog code (1015, 522, ...), or with `--origin` the status an origin answered.
    code: String,
    /// The request's Accept header.
    #[arg(long, default_value = "")]
    accept: String,
    /// The request's Host.
    #[arg(long, default_value = "example.com")]
    host: String,
    /// The policy whose branding and error rules apply (default: none).
    #[arg(long, short = 'c', env = "SIGNPOST_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// The zone (by name) whose error rules apply; default: the zone serving `--host`.
    #[arg(long)]
    zone: Option<String>,
    /// The request's path and query, for rules that match on them.
    #[arg(long, default_value = "/")]
    path: String,
    /// The request's method.
    #[arg(long, default_value = "GET")]
    method: String,
    /// The client's address (`::CLIENT_IP::`, `ip.src`).
    #[arg(long, default_value = "192.0.2.1")]
    client_ip: IpAddr,
    /// The custom or rate-limit rule that refused (its id), so that its `response` is previewed.
    #[arg(long)]
    rule: Option<String>,
    /// Preview an origin's own error: `code` is the status the origin answered (400-599), as a
    /// zone with `[zone.origin_errors] structured = true` or a matching error rule answers it.
    #[arg(long)]
    origin: bool,
}

/// `signpost render <code> --accept <value> [--host <h>] [--config <policy> --zone <z> --path
/// <p> --origin]`: the exact response the edge sends, through the edge's own `Answer::new`
/// and the policy's error rules.
pub fn render(args: &RenderArgs) -> anyhow::Result<()> {
    let entry = if args.origin {
        let status: u16 = args
            .code
            .parse()
            .context("--origin needs a status: 400-599")?;
        signpost_problem::origin_entry(status).context("--origin needs a status: 400-599")?
    } else {
        signpost_problem::lookup_path_code(&args.code)
    };
    let accept = (!args.accept.is_empty()).then_some(args.accept.as_bytes());
    let ray = RayId::next();
    let policy = match &args.config {
        Some(path) => Some(CompiledPolicy::load(path, None).map_err(|e| anyhow::anyhow!("{e}"))?),
        None => None,
    };
    let mut headers = http::HeaderMap::new();
    if let Some(accept) = accept {
        headers.insert(http::header::ACCEPT, http::HeaderValue::from_bytes(accept)?);
    }
    let facts = RequestFacts {
        peer: args.client_ip,
        host: &args.host,
        method: &args.method,
        uri: &args.path,
        tls: false,
        sni: None,
        headers: &headers,
    };
    // With no policy, an empty one: no rule speaks, the default branding.
    let policy = match policy {
        Some(policy) => policy,
        None => CompiledPolicy::from_toml("", "(no policy)", Path::new("."), None)
            .map_err(|e| anyhow::anyhow!("{e}"))?,
    };
    let asked = crate::answer::error_rules::Asked {
        facts,
        // `--zone`, else (as for every answer the phases did not settle) the zone serving
        // `--host`.
        zone: match &args.zone {
            Some(name) => Some(
                policy
                    .zone_named(name)
                    .with_context(|| format!("the policy has no zone `{name}`"))?,
            ),
            None => None,
        },
        client_ip: Some(args.client_ip),
        country: None,
    };
    let (answer, rule) = if args.origin {
        // An origin's error, as `origin_errors` answers one with no Retry-After from the origin.
        let rule = crate::answer::error_rules::rule_for(&policy, &asked, entry.status, 0, None);
        let retryable = matches!(entry.status, 429 | 502 | 503 | 504);
        let base = rule.as_ref().map(|r| r.custom.clone()).unwrap_or_default();
        let custom = signpost_problem::Custom {
            retryable: base.retryable.or(Some(retryable)),
            ..base
        };
        let answer = crate::answer::error_rules::render_for(
            &policy,
            &asked,
            ray,
            entry,
            Some(&custom),
            None,
        );
        (answer, rule)
    } else {
        let refused = crate::answer::error_rules::Refused {
            entry,
            retry_after: None,
            by: args.rule.as_deref(),
            crawl: None,
        };
        match crate::answer::error_rules::dress(&policy, &asked, ray, &refused) {
            Ok((answer, rule)) => (Ok(answer), rule),
            Err(e) => (Err(e), None),
        }
    };
    if let Some(rule) = &rule {
        eprintln!("error rule: {}", rule.id);
    }
    let answer = answer.map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut out = std::io::stdout().lock();
    let status = answer.head.status;
    let reason = answer
        .head
        .get_reason_phrase()
        .or(status.canonical_reason())
        .unwrap_or("");
    writeln!(out, "HTTP/1.1 {} {reason}", status.as_u16())?;
    for (name, value) in &answer.head.headers {
        writeln!(out, "{name}: {}", String::from_utf8_lossy(value.as_bytes()))?;
    }
    writeln!(out)?;
    out.write_all(&answer.body)?;
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
    let markdown =
        signpost_markdown::convert_with(&source, url, &limits, crate::markdown::LINK_FORM)
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

/// `signpost bots`: the known bots as a table: the shipped catalog, or the policy's.
pub fn bots(policy: Option<&Path>) -> anyhow::Result<()> {
    let loaded = match policy {
        Some(path) => Some(CompiledPolicy::load(path, None).map_err(|e| anyhow::anyhow!("{e}"))?),
        None => None,
    };
    let shipped;
    let catalog = match loaded.as_ref().and_then(|p| p.bot_catalog()) {
        Some(catalog) => catalog,
        None => {
            shipped = signpost_policy::BotCatalog::shipped();
            &shipped
        }
    };
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<20} {:<17} {:<24} {:<16} {:<20} verified by",
        "name", "operator", "category", "behaviors", "user agent"
    )?;
    for bot in catalog.bots() {
        let mut verified_by = Vec::new();
        if !bot.web_bot_auth.is_empty() {
            verified_by.push("web bot auth");
        }
        if !bot.ip_ranges_url.is_empty() {
            verified_by.push("published IP list");
        }
        if !bot.rdns.is_empty() {
            verified_by.push("reverse DNS");
        }
        if verified_by.is_empty() && bot.is_verifiable() {
            verified_by.push("IP ranges");
        }
        let behaviors = match bot.behaviors.as_str() {
            "" => "-",
            b => b,
        };
        writeln!(
            out,
            "{:<20} {:<17} {:<24} {:<16} {:<20} {}",
            bot.name,
            bot.operator,
            bot.category,
            behaviors,
            bot.user_agent.as_deref().unwrap_or("-"),
            if verified_by.is_empty() {
                "cannot be verified".to_string()
            } else {
                verified_by.join(", ")
            }
        )?;
    }
    Ok(())
}

/// `signpost health`: a GET on the admin listener's `/healthz`; exit 0 on a 200. The URL is
/// `--url`, else the policy's admin address (`--config` or `SIGNPOST_CONFIG`), else the default
/// admin address.
///
/// Hand-written on purpose: the runtime image has no curl, and one GET over loopback does not
/// justify an HTTP client dependency in the binary.
pub fn health(url: Option<&str>, policy: Option<&Path>) -> ExitCode {
    let url = match (url, policy) {
        (Some(url), _) => Ok(url.to_owned()),
        (None, Some(policy)) => admin_url(policy),
        (None, None) => Ok(format!("http://{}/healthz", signpost_policy::DEFAULT_ADMIN)),
    };
    match url.and_then(|url| probe(&url).with_context(|| format!("asking {url}"))) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("signpost health: {err:#}");
            ExitCode::from(1)
        }
    }
}

/// The `/healthz` URL of the policy's admin listener. Only the `admin` key is read, not the
/// whole policy: a health check every few seconds should not compile rules or open databases.
fn admin_url(policy: &Path) -> anyhow::Result<String> {
    #[derive(serde::Deserialize)]
    struct AdminOnly {
        admin: Option<String>,
    }
    let text =
        std::fs::read_to_string(policy).with_context(|| format!("reading {}", policy.display()))?;
    let file: AdminOnly =
        toml::from_str(&text).with_context(|| format!("reading {}", policy.display()))?;
    let admin = file
        .admin
        .unwrap_or_else(|| signpost_policy::DEFAULT_ADMIN.to_owned());
    let admin = admin.trim();
    if admin.is_empty() || admin == "off" {
        bail!(
            "{}: the admin listener is off (admin = \"off\"): nothing to ask",
            policy.display()
        );
    }
    let addr: std::net::SocketAddr = admin
        .parse()
        .with_context(|| format!("{}: admin = {admin:?} is not an address", policy.display()))?;
    // A wildcard address is reached over loopback.
    let host = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => "127.0.0.1".to_owned(),
        IpAddr::V6(ip) if ip.is_unspecified() => "[::1]".to_owned(),
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(ip) => format!("[{ip}]"),
    };
    Ok(format!("http://{host}:{}/healthz", addr.port()))
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
