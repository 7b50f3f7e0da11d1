//! Assembling the Pingora server: the edge's listeners, the admin listener, the reloader.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use arc_swap::ArcSwap;
use clap::ValueEnum;
use pingora::server::Server;
use pingora::server::configuration::ServerConf;
use pingora::services::background::background_service;
use pingora::services::listening::Service;
use signpost_policy::Listener;

use crate::connection::certs::Certificates;
use crate::connection::conncap::Capped;
use crate::metrics::Metrics;
use crate::operator::admin::Admin;
use crate::pipeline::Edge;
use crate::reload::{Loaded, Reloader};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The policy file (TOML).
    #[arg(long, short = 'c', env = "SIGNPOST_CONFIG")]
    pub config: PathBuf,
    /// Listen on this address instead of the policy's listeners (repeatable).
    #[arg(long)]
    pub listen: Vec<String>,
    /// Send every zone's traffic to this origin instead of the policy's: `host:port`,
    /// `http://host[:port]` or `https://host[:port]`, as a zone's `origin` is written.
    #[arg(long)]
    pub origin: Option<signpost_policy::Origin>,
    /// Also reload when the policy file changes (it is always reloaded on SIGHUP).
    #[arg(long)]
    pub watch: bool,
    /// Log format: human-readable lines, or one JSON object per line.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Worker threads (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Seconds to keep serving in-flight requests after SIGTERM before exiting.
    #[arg(long, default_value_t = 5)]
    pub grace_period: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `signpost run`: load the policy, bind every listener, serve until SIGTERM (graceful: in-flight
/// requests finish during the grace period) or SIGINT (immediate).
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let metrics = Arc::new(Metrics::new());
    let loaded =
        Loaded::load(&args.config, None, &metrics).map_err(|err| anyhow::anyhow!("{err}"))?;
    let policy = &loaded.policy;
    let listeners: Vec<Listener> = if args.listen.is_empty() {
        policy.listeners().to_vec()
    } else {
        args.listen
            .iter()
            .map(|addr| Listener {
                addr: addr.clone(),
                tls: None,
            })
            .collect()
    };
    anyhow::ensure!(
        !listeners.is_empty(),
        "{}: the policy has no listener and --listen was not given",
        args.config.display()
    );
    let admin_addr = policy.admin().map(str::to_string);
    let every_addr = listeners.iter().map(|l| l.addr.as_str());
    check_can_listen(every_addr.chain(admin_addr.as_deref()))?;

    // Every certificate the listeners and zones name, loaded as `signpost check` checks them:
    // a problem is the policy's, at its key.
    let certs = Certificates::load(&loaded.policy, metrics.certs.clone())
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    metrics.observe_policy_loaded();
    let policy = Arc::new(ArcSwap::from_pointee(loaded));

    let conf = ServerConf {
        threads: args
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        grace_period_seconds: Some(args.grace_period),
        graceful_shutdown_timeout_seconds: Some(5),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);

    let edge = Edge::new(policy.clone(), args.origin, metrics.clone());
    let mut app = pingora::proxy::http_proxy(&server.configuration, edge);
    // CONNECT reaches `request_filter`, which answers it with a negotiated 405 problem instead
    // of Pingora's bare one; it is never tunnelled.
    let mut options = pingora::apps::HttpServerOptions::default();
    options.allow_connect_method_proxying = true;
    // HTTP/2 connections (TLS listeners) idle past `idle_timeout` are closed too; read at start
    // (Pingora takes it once), while HTTP/1's follows reloads.
    options.h2_idle_timeout = Some(policy.load().policy.connections().idle_timeout);
    app.server_options = Some(options);
    // Every client connection passes the per-client cap first.
    let capped = Capped::new(app, policy.clone(), metrics.connections.clone());
    let mut proxy = Service::new("signpost edge".to_string(), capped);
    for Listener { addr, tls } in &listeners {
        match tls {
            None => proxy.add_tcp(addr),
            Some(_) => {
                let settings = crate::connection::tls::listener_settings(certs.resolver(addr))
                    .map_err(|e| anyhow::anyhow!("TLS listener {addr}: {e}"))?;
                proxy.add_tls_with_settings(addr, None, settings);
            }
        }
    }
    server.add_service(proxy);

    if let Some(admin_addr) = &admin_addr {
        let listen_addrs = listeners.iter().map(|l| l.addr.clone()).collect();
        let admin = Admin::new(policy.clone(), metrics.clone(), listen_addrs, admin_addr);
        let mut service = Service::new("signpost admin".to_string(), admin);
        service.add_tcp(admin_addr);
        server.add_service(service);
    }

    let reloader = Reloader::new(args.config.clone(), policy, metrics, args.watch, certs);
    server.add_service(background_service("signpost reloader", reloader));

    tracing::info!(
        config = %args.config.display(),
        listeners = ?listeners.iter().map(|l| l.addr.as_str()).collect::<Vec<_>>(),
        admin = admin_addr.as_deref().unwrap_or("-"),
        "signpost starting"
    );
    server.bootstrap();
    server.run_forever()
}

/// Binds every address at once and lets go, so that an address in use (or two listeners on one
/// address) is a start-up error naming it. Pingora would instead retry for 30 s and then fail
/// only the service that could not bind, leaving a process that serves the admin endpoint
/// and nothing else. signpost never takes listening sockets over from an old process, so
/// nothing else may hold these addresses while it starts.
fn check_can_listen<'a>(addrs: impl Iterator<Item = &'a str>) -> anyhow::Result<()> {
    use std::net::ToSocketAddrs;
    let mut held = Vec::new();
    for addr in addrs {
        let socket_addr = addr
            .to_socket_addrs()
            .with_context(|| format!("cannot listen on {addr}"))?
            .next()
            .with_context(|| format!("cannot listen on {addr}: it resolves to no address"))?;
        let listener = std::net::TcpListener::bind(socket_addr)
            .with_context(|| format!("cannot listen on {addr}"))?;
        held.push(listener);
    }
    Ok(())
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour only for a person at a terminal: in containers and log files escape codes are noise.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    // Pingora logs through the `log` crate; tracing-subscriber's default features forward it.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
