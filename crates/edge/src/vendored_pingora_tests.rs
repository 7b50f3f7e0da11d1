//! What the vendored pingora-core patch adds for speed (vendor/README.md), tested here because CI
//! runs the workspace's tests and not the vendored crate's.

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
    // Bounded by tokio's own timer, so that an idle timer that never fires fails the test
    // instead of hanging the run (seen once in three local runs of the whole suite).
    let cut = tokio::time::timeout(
        Duration::from_secs(5),
        idle.run(Duration::from_millis(50), never),
    )
    .await
    .expect("the idle timer fires and ends the wait");
    assert_eq!(cut, None);
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

/// The future that waits for a kept-alive connection's next request (pingora-proxy's
/// `process_new_http`, which every idle HTTP/1 connection holds) holds the read of the request
/// only: the work of a request is boxed when the request has arrived, and freed when it is done.
/// Without that it is as large as the largest state of the whole proxy flow (tens of KiB).
#[tokio::test]
async fn waiting_for_the_next_request_holds_no_request_work() {
    use pingora::apps::HttpServerApp;
    use pingora::prelude::*;
    use std::sync::Arc;

    struct NoOrigin;
    #[async_trait::async_trait]
    impl ProxyHttp for NoOrigin {
        type CTX = ();
        fn new_ctx(&self) {}
        async fn upstream_peer(&self, _: &mut Session, _: &mut ()) -> Result<Box<HttpPeer>> {
            Error::e_explain(ErrorType::ConnectNoRoute, "no origin in this test")
        }
    }

    let conf = Arc::new(pingora::server::configuration::ServerConf::default());
    let app = Arc::new(pingora::proxy::http_proxy(&conf, NoOrigin));
    let (mut client_end, server_end) = duplex(4096);
    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    let session = pingora::protocols::http::ServerSession::new_http1(Box::new(server_end));
    let waiting = app.process_new_http(session, &shutdown);
    let size = std::mem::size_of_val(&*waiting);
    eprintln!("the future waiting for a request: {size} bytes");
    assert!(
        size <= 4096,
        "the future waiting for a request is {size} bytes"
    );

    // The request still goes through the whole flow, boxed: `upstream_peer` fails, which
    // Pingora answers with a 500.
    client_end
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let answer = tokio::spawn(async move {
        let mut head = [0u8; 12];
        client_end.read_exact(&mut head).await.unwrap();
        head
    });
    waiting.await;
    assert_eq!(&answer.await.unwrap(), b"HTTP/1.1 500");
}
