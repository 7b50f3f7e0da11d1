//! The baseline for `bench/load.sh`: a bare Pingora proxy to one origin, with no policy, no
//! problem rendering and no logging, so that the load test shows what signpost's own work costs.
//!
//! `cargo run --release -p signpost --example bare_proxy -- <listen addr> <origin addr> [threads]`

use async_trait::async_trait;
use pingora::prelude::*;
use pingora::server::configuration::ServerConf;

// The same allocator as signpost, so that the comparison measures the edge's work, not malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Bare {
    origin: std::net::SocketAddr,
}

#[async_trait]
impl ProxyHttp for Bare {
    type CTX = ();
    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.origin, false, String::new())))
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let listen = args.next().expect("usage: bare_proxy <listen> <origin>");
    let origin = args
        .next()
        .expect("usage: bare_proxy <listen> <origin>")
        .parse()
        .expect("origin must be ip:port");
    let threads = args
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut server = Server::new_with_opt_and_conf(
        None,
        ServerConf {
            threads,
            ..ServerConf::default()
        },
    );
    let mut proxy = pingora::proxy::http_proxy_service(&server.configuration, Bare { origin });
    proxy.add_tcp(&listen);
    server.add_service(proxy);
    server.bootstrap();
    server.run_forever();
}
