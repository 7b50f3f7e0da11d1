//! `signpost`: an edge reverse proxy on Pingora that enforces a site owner's policy and answers
//! its own errors in the format the client asked for (HTML, RFC 9457 JSON, or Markdown).
//!
//! The request pipeline is in [`pipeline`]; this file is the command line.

// The wiring: the pipeline and the hubs that hold each room's state, runtime and metrics.
mod ctx;
mod metrics;
mod pipeline;
mod reload;
mod server;
// The steps of the request filter, declared once for the pipeline and trace.
mod steps;

// What the edge reads of a request before any decision.
mod request;
// What a connection may hold: the per-client cap, HTTP/2 guards, requests in flight, TLS.
mod connection;
// The way to the origin, and its failures classified once.
mod origin;
// The edge's own answers, dressed by the operator's error rules.
mod answer;
// The rooms of the features: Markdown for agents, crawl control, fleet state, identification,
// challenges.
mod challenge;
mod crawl;
mod fleet;
mod identify;
mod markdown;
// The policy's rules as counted, and the AI assistants that refer visitors.
mod referral;
mod rules;
// What the operator runs and reads: the admin listener, the commands, trace.
mod operator;

mod log;
#[cfg(test)]
mod vendored_pingora_tests;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use operator::{commands, trace};

/// mimalloc instead of the system allocator: a proxy allocates and frees small buffers for every
/// request (headers, bodies, futures), and glibc's malloc spent about 15% of a proxied request's
/// CPU time under load (`perf`, bench/load.sh); see bench/README.md for the figures.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An edge reverse proxy that answers its own errors as HTML, RFC 9457 JSON or Markdown.
#[derive(Parser, Debug)]
#[command(name = "signpost", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start the edge with a policy file.
    Run(server::RunArgs),
    /// Validate a policy file: exit 0, or print every problem with file, line and column and exit 1.
    Check {
        /// The policy file, as `--config` gives it (kept for `signpost check FILE`); it wins
        /// over `SIGNPOST_CONFIG`.
        #[arg(hide = true)]
        file: Option<PathBuf>,
        #[command(flatten)]
        policy: OptionalPolicy,
    },
    /// Print the exact response the edge sends for an error code: status line, headers, body.
    /// With `--config`, under that policy: its branding and the error rule that matches.
    Render(commands::RenderArgs),
    /// List the error catalog as a table.
    Codes,
    /// Bytes and cl100k_base tokens of every code in each format.
    Tokens,
    /// Convert an HTML page as a zone with `[zone.markdown]` would: the Markdown on stdout, the
    /// page's and the Markdown's bytes and cl100k_base tokens on stderr.
    Markdown {
        /// The HTML file, or `-` for standard input.
        file: PathBuf,
        /// The page's URL: relative links and images are made absolute against it.
        #[arg(long)]
        url: Option<String>,
        /// The cap on the page's size, as the zone's `max_bytes`.
        #[arg(long, default_value_t = signpost_policy::DEFAULT_MARKDOWN_MAX_BYTES)]
        max_bytes: usize,
    },
    /// Explain the policy's decision for a synthetic request: every phase in order, each rule
    /// considered with the values it saw, and the exact response. Changes nothing.
    Trace(TraceArgs),
    /// Run test cases (requests and what is expected of them) against a policy file: exit 1
    /// when one fails.
    Test {
        #[command(flatten)]
        policy: Policy,
        /// The cases file (TOML, `[[case]]` entries; see docs/policy.md).
        cases: PathBuf,
    },
    /// Exit 0 when the admin listener answers `/healthz` (the Docker HEALTHCHECK): the policy's
    /// admin address, or 127.0.0.1:9901 without a policy.
    Health {
        /// The health endpoint to ask, instead of the policy's admin listener.
        #[arg(long)]
        url: Option<String>,
        #[command(flatten)]
        policy: OptionalPolicy,
    },
    /// List the known bots: the catalog shipped with signpost, or with `--config` the policy's
    /// (with its `[[bot]]` changes).
    Bots(OptionalPolicy),
}

/// The policy file of a command that needs one: `--config FILE`, or `SIGNPOST_CONFIG`. Every
/// command that reads a policy takes it this way.
#[derive(clap::Args, Debug)]
pub struct Policy {
    /// The policy file (TOML).
    #[arg(
        long = "config",
        short = 'c',
        env = "SIGNPOST_CONFIG",
        value_name = "FILE"
    )]
    pub config: PathBuf,
}

/// The policy file of a command that can do without one: `--config FILE`, or `SIGNPOST_CONFIG`.
#[derive(clap::Args, Debug)]
pub struct OptionalPolicy {
    /// The policy file (TOML).
    #[arg(
        long = "config",
        short = 'c',
        env = "SIGNPOST_CONFIG",
        value_name = "FILE"
    )]
    pub config: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    #[command(flatten)]
    pub policy: Policy,
    /// The request's URL: `http://host[:port]/path?query` or `https://...`.
    #[arg(long)]
    pub url: String,
    /// The request method.
    #[arg(long, short = 'X', default_value = "GET")]
    pub method: String,
    /// A header line, `Name: value` (repeatable). Any byte a header can carry is kept.
    #[arg(long = "header", short = 'H')]
    pub headers: Vec<std::ffi::OsString>,
    /// The client's address (the TCP peer).
    #[arg(long, default_value = trace::DEFAULT_CLIENT_IP)]
    pub ip: std::net::IpAddr,
    /// The client's country (ISO 3166-1 alpha-2), instead of the country database's answer.
    #[arg(long)]
    pub country: Option<String>,
    /// The client's AS number, instead of the ASN database's answer.
    #[arg(long)]
    pub asn: Option<u32>,
    /// The client connection is TLS (implied by an https:// URL).
    #[arg(long)]
    pub tls: bool,
    /// The TLS SNI name (default: the URL's host, over TLS).
    #[arg(long)]
    pub sni: Option<String>,
    /// One JSON object, steps shaped like Cloudflare's Trace (see docs/policy.md).
    #[arg(long)]
    pub json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let done = |result: anyhow::Result<()>| result.map(|()| ExitCode::SUCCESS);
    let result = match cli.command {
        Command::Run(args) => done(server::run(args)),
        Command::Check { file, policy } => match file.or(policy.config) {
            Some(file) => commands::check(&file),
            None => Err(anyhow::anyhow!(
                "which policy? give it with --config FILE or SIGNPOST_CONFIG"
            )),
        },
        Command::Render(args) => done(commands::render(&args)),
        Command::Codes => done(commands::codes()),
        Command::Tokens => done(commands::tokens()),
        Command::Markdown {
            file,
            url,
            max_bytes,
        } => done(commands::markdown(&file, url.as_deref(), max_bytes)),
        Command::Trace(args) => done(trace_command(args)),
        Command::Test { policy, cases } => trace::test_command(&policy.config, &cases),
        Command::Health { url, policy } => {
            Ok(commands::health(url.as_deref(), policy.config.as_deref()))
        }
        Command::Bots(policy) => done(commands::bots(policy.config.as_deref())),
    };
    match result {
        Ok(code) => code,
        // A reader that stopped reading (`signpost bots | head -1`) is no failure of ours.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("signpost: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// Whether writing the output failed because its reader closed the pipe.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `signpost trace`: the flags as a request.
fn trace_command(args: TraceArgs) -> anyhow::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let spec = trace::RequestSpec {
        url: args.url,
        method: Some(args.method),
        headers: Vec::new(),
        ip: Some(args.ip),
        country: args.country,
        asn: args.asn,
        tls: args.tls,
        sni: args.sni,
    };
    let lines: Vec<Vec<u8>> = args.headers.iter().map(|h| h.as_bytes().to_vec()).collect();
    trace::command(&args.policy.config, &spec, &lines, args.json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
