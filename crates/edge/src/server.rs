//! Assembling the Pingora server: the edge's listeners, the admin listener, the reloader.

use std::sync::Arc;

use anyhow::Context;
use arc_swap::ArcSwap;
use pingora::server::Server;
use pingora::server::configuration::ServerConf;
use pingora::services::background::background_service;
use pingora::services::listening::Service;
use signpost_policy::{Listener, TlsFiles};

use crate::admin::Admin;
use crate::conncap::Capped;
use crate::metrics::Metrics;
use crate::pipeline::Edge;
use crate::reload::{Loaded, Reloader};
use crate::{LogFormat, RunArgs};

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
    let capped = Capped::new(app, policy.clone(), metrics.clone());
    let mut proxy = Service::new("signpost edge".to_string(), capped);
    for Listener { addr, tls } in &listeners {
        match tls {
            None => proxy.add_tcp(addr),
            Some(TlsFiles { cert, key }) => {
                let cert = cert.to_str().context("certificate path is not UTF-8")?;
                let key = key.to_str().context("key path is not UTF-8")?;
                let settings = crate::tls::listener_settings(cert, key)
                    .map_err(|e| anyhow::anyhow!("TLS listener {addr}: {e}"))?;
                proxy.add_tls_with_settings(addr, None, settings);
            }
        }
    }
    server.add_service(proxy);

    if let Some(admin_addr) = &admin_addr {
        let listen_addrs = listeners.iter().map(|l| l.addr.clone()).collect();
        let admin = Admin::new(policy.clone(), metrics.clone(), listen_addrs);
        let mut service = Service::new("signpost admin".to_string(), admin);
        service.add_tcp(admin_addr);
        server.add_service(service);
    }

    let reloader = Reloader::new(args.config.clone(), policy, metrics, args.watch);
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

/// What the vendored pingora-core patch adds for speed (vendor/README.md), tested here because CI
/// runs the workspace's tests and not the vendored crate's.
#[cfg(test)]
mod vendored_pingora_tests {
    use std::time::{Duration, Instant};

    use pingora::protocols::http::v1::common::ROOM_FOR_ADDED_HEADERS;
    use pingora::protocols::http::v1::idle_deadline::IdleDeadline;
    use pingora::protocols::http::v1::{client, server};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};
    use tokio::time::sleep;

    // Room for what the edge adds to a parsed response (`cf-ray`; `Vary` on a zone that converts
    // to Markdown). The four headers to the origin are wire headers and need none.
    const _: () = assert!(ROOM_FOR_ADDED_HEADERS >= 2);

    /// Work that finishes with `value` after `ms` milliseconds.
    async fn after<T>(ms: u64, value: T) -> T {
        sleep(Duration::from_millis(ms)).await;
        value
    }

    /// A parsed request, which is what Pingora sends upstream, has room for the headers the edge
    /// adds to it; so has a parsed response, which is what it sends downstream.
    #[tokio::test]
    async fn parsed_headers_have_room_for_the_headers_the_edge_adds() {
        let (mut client_end, server_end) = duplex(4096);
        let mut request = server::HttpSession::new(Box::new(server_end));
        client_end
            .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nUser-Agent: b\r\nAccept: c\r\n\r\n")
            .await
            .unwrap();
        request.read_request().await.unwrap();
        let headers = &request.req_header().headers;
        assert_eq!(headers.len(), 3);
        assert!(headers.capacity() >= 3 + ROOM_FOR_ADDED_HEADERS);

        let (mut origin_end, client_end) = duplex(4096);
        let mut upstream = client::HttpSession::new(Box::new(client_end));
        origin_end
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nServer: o\r\n\r\n")
            .await
            .unwrap();
        let response = upstream.read_resp_header_parts().await.unwrap();
        assert_eq!(response.headers.len(), 2);
        assert!(response.headers.capacity() >= 2 + ROOM_FOR_ADDED_HEADERS);
    }

    /// pingora-http's wire headers: sent after the request's own, replacing them, and kept
    /// by a clone and in the parts an HTTP/2 request is made of (the end-to-end tests see the
    /// HTTP/1 wire only).
    #[test]
    fn wire_headers_replace_the_clients_and_survive_a_clone_and_http2_parts() {
        use pingora::http::{RequestHeader, StaticHeaderName};
        static CF_CONNECTING_IP: StaticHeaderName = StaticHeaderName::new("cf-connecting-ip");
        let mut request = RequestHeader::build("GET", b"/", Some(2)).unwrap();
        request.append_header("Host", "a").unwrap();
        request
            .append_header("CF-Connecting-IP", "6.6.6.6")
            .unwrap();
        request
            .append_header("cf-connecting-ip", "6.6.6.7")
            .unwrap();
        request.insert_wire_header(
            &CF_CONNECTING_IP,
            http::HeaderValue::from_static("192.0.2.1"),
        );
        let mut wire = Vec::new();
        request.clone().header_to_h1_wire(&mut wire);
        assert_eq!(wire, b"Host: a\r\ncf-connecting-ip: 192.0.2.1\r\n");
        let parts = request.as_owned_parts();
        let values: Vec<_> = parts.headers.get_all("cf-connecting-ip").iter().collect();
        assert_eq!(values, ["192.0.2.1"]);
        assert_eq!(parts.headers.len(), 2);
    }

    #[tokio::test]
    async fn finished_work_is_returned_and_the_timer_kept_for_the_next_wait() {
        let mut idle = IdleDeadline::default();
        // Work that is ready at once never arms a timer.
        assert_eq!(idle.run(Duration::from_secs(5), async { 1 }).await, Some(1));
        assert!(idle.armed_for().is_none());

        // Work that waits arms one...
        assert_eq!(idle.run(Duration::from_secs(5), after(5, 2)).await, Some(2));
        let armed = idle
            .armed_for()
            .expect("a timer is armed for a wait that waited");
        // ...which later waits on the same connection reuse instead of arming their own.
        for _ in 0..3 {
            assert_eq!(idle.run(Duration::from_secs(5), after(5, 2)).await, Some(2));
            assert_eq!(idle.armed_for(), Some(armed));
        }
    }

    #[tokio::test]
    async fn work_that_outlasts_the_idle_timeout_is_cut() {
        let mut idle = IdleDeadline::default();
        let started = Instant::now();
        let never = std::future::pending::<()>();
        assert_eq!(idle.run(Duration::from_millis(50), never).await, None);
        assert!(started.elapsed() >= Duration::from_millis(40));
        assert!(idle.armed_for().is_none());
    }

    /// Work that wakes its task again and again without finishing (as a read woken by bytes
    /// that do not complete it is): the kept timer, not polled again while its instant is still
    /// to come, still ends the wait at the deadline.
    #[tokio::test]
    async fn work_that_keeps_waking_its_task_is_still_cut() {
        let mut idle = IdleDeadline::default();
        let started = Instant::now();
        let restless = async {
            loop {
                tokio::task::yield_now().await;
            }
        };
        let cut = tokio::time::timeout(
            Duration::from_secs(5),
            idle.run(Duration::from_millis(50), restless),
        )
        .await
        .expect("the wait ends");
        assert_eq!(cut, None);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(40) && waited < Duration::from_secs(2),
            "cut after {waited:?}"
        );
    }

    #[tokio::test]
    async fn a_timer_armed_for_an_earlier_wait_does_not_cut_a_later_one() {
        let mut idle = IdleDeadline::default();
        assert_eq!(
            idle.run(Duration::from_millis(200), after(1, ())).await,
            Some(())
        );
        let first = idle.armed_for().unwrap();
        sleep(Duration::from_millis(120)).await;
        // This wait lasts past the first wait's deadline but not past its own.
        let started = Instant::now();
        assert_eq!(
            idle.run(Duration::from_millis(200), after(150, 3)).await,
            Some(3)
        );
        assert!(Instant::now() > first, "the wait outlived the first timer");
        assert!(started.elapsed() >= Duration::from_millis(140));
        // The timer armed for the rest of this wait is kept for the next.
        assert!(idle.armed_for().unwrap() > first);
    }

    /// A request for the origin on `conn`: reads its head.
    async fn read_head(conn: &mut tokio::net::TcpStream) {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(
                conn.read(&mut byte).await.unwrap(),
                1,
                "the request head ends"
            );
            head.push(byte[0]);
        }
    }

    fn origin_request() -> Box<pingora::http::RequestHeader> {
        let mut request = pingora::http::RequestHeader::build("GET", b"/", None).unwrap();
        request.insert_header("Host", "origin").unwrap();
        Box::new(request)
    }

    /// An origin connection goes back to the pool with the read timer its session armed, and
    /// the next session's reads use it instead of arming their own; a read is still cut one
    /// read timeout after it began, not when the kept timer was armed to fire.
    #[tokio::test]
    async fn a_pooled_origin_connection_keeps_its_read_timer_for_the_next_request() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let origin = tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            // Two answers, each after a wait, so that each response read has to wait; then a
            // request it never answers.
            for _ in 0..2 {
                read_head(&mut conn).await;
                sleep(Duration::from_millis(20)).await;
                conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    .await
                    .unwrap();
            }
            read_head(&mut conn).await;
            sleep(Duration::from_secs(10)).await;
        });
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut stream: pingora::protocols::Stream =
            Box::new(pingora::protocols::l4::stream::Stream::from(tcp));
        let read_timeout = Duration::from_secs(1);

        let mut kept = None;
        for request in 0..2 {
            let mut session = client::HttpSession::new(stream);
            assert_eq!(session.read_timer_armed_for(), kept, "request {request}");
            session.read_timeout = Some(read_timeout);
            session
                .write_request_header(origin_request())
                .await
                .unwrap();
            session.read_response().await.unwrap();
            while session.read_body_bytes().await.unwrap().is_some() {}
            let armed = session
                .read_timer_armed_for()
                .expect("the response read waited: a timer is armed");
            if let Some(first) = kept {
                assert_eq!(
                    armed, first,
                    "the second request used the first one's timer"
                );
            }
            kept = Some(armed);
            session.respect_keepalive();
            stream = session
                .reuse()
                .await
                .expect("a kept-alive connection is reusable");
        }

        // The kept timer fires while this read waits; the read goes on to its own deadline.
        sleep(Duration::from_millis(300)).await;
        let mut session = client::HttpSession::new(stream);
        session.read_timeout = Some(read_timeout);
        session
            .write_request_header(origin_request())
            .await
            .unwrap();
        let started = Instant::now();
        let error = session.read_response().await.unwrap_err();
        assert_eq!(error.etype(), &pingora::ErrorType::ReadTimedout);
        assert!(
            Instant::now() > kept.unwrap(),
            "the kept timer's instant passed"
        );
        let waited = started.elapsed();
        assert!(
            waited >= read_timeout - Duration::from_millis(20) && waited < Duration::from_secs(3),
            "cut after {waited:?}"
        );
        origin.abort();
    }

    #[tokio::test]
    async fn a_shortened_idle_timeout_replaces_the_kept_timer() {
        let mut idle = IdleDeadline::default();
        assert_eq!(
            idle.run(Duration::from_secs(60), after(1, ())).await,
            Some(())
        );
        let never = std::future::pending::<()>();
        let started = Instant::now();
        assert_eq!(idle.run(Duration::from_millis(50), never).await, None);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
