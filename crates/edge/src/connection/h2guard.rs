//! The HTTP/2 connection guard: limits the h2 crate does not keep.
//!
//! h2 closes a connection for the classic floods (resets of streams not yet accepted,
//! CONTINUATION, HPACK bombs, empty DATA), but not for three abuses a client can commit within
//! the protocol:
//!
//! - **premature resets**: streams reset by the client after the edge accepted and forwarded
//!   them, before their response ended (each cost the origin a request);
//! - **control floods**: SETTINGS and PING frames, each of which the edge must acknowledge;
//! - **unbounded connection life**: a connection may carry any number of requests.
//!
//! The guard sits between the TLS stream and h2 and reads the 9-byte frame headers going each
//! way without changing a byte. It closes an abusive connection itself, with a GOAWAY
//! `ENHANCE_YOUR_CALM` written between two of h2's frames, then the end of the stream (drained
//! for at most a second, so that the client reads the GOAWAY); a
//! connection past its request budget is asked, through Pingora's shutdown signal, to let h2
//! send its own graceful GOAWAY, so that no request is lost.
//!
//! The rules ([`Watch`]) are sans-I/O, so that they can be tested frame by frame.

use std::collections::HashSet;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use async_trait::async_trait;
use pingora::protocols::{
    GetProxyDigest, GetSocketDigest, GetTimingDigest, Peek, Shutdown, Ssl, Stream, UniqueID,
    UniqueIDType,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

/// Premature resets are judged once a connection has had this many: fewer never close it.
pub const PREMATURE_RESETS_MIN: u32 = 100;
/// Control frames (SETTINGS and PING that ask for an acknowledgement) a connection may send at
/// once, and per second after that.
pub const CONTROL_FRAME_BURST: u32 = 100;
pub const CONTROL_FRAMES_PER_SECOND: u32 = 10;
/// How long a closed connection's reads are drained after its GOAWAY, so that the client reads
/// the GOAWAY: closing a socket with unread bytes sends a reset, which can destroy what the client
/// has not read yet.
const LINGER: std::time::Duration = std::time::Duration::from_secs(1);
/// The most bytes drained in one poll before yielding (a flood must not hold the thread).
const LINGER_READS_PER_POLL: usize = 16;

/// Streams the guard follows at once. h2 refuses streams past `MAX_CONCURRENT_STREAMS` (100), so a
/// well-behaved connection never has this many open; past it new streams are not followed (their
/// resets are not counted), and the set stays bounded.
const MAX_FOLLOWED_STREAMS: usize = 1024;

/// The client's connection preface, before its first frame (RFC 9113, section 3.4).
const CLIENT_PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_ACK: u8 = 0x1;
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// One frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHead {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

/// Where the frame boundaries are in one direction of a connection, fed the bytes as they pass.
#[derive(Debug, Clone)]
pub struct FrameCursor {
    /// Bytes of the preface still to pass before the first frame.
    preface_left: usize,
    header: [u8; FRAME_HEADER_LEN],
    header_len: usize,
    payload_left: usize,
}

impl FrameCursor {
    /// The client's side: the preface, then frames.
    pub fn client() -> Self {
        FrameCursor {
            preface_left: CLIENT_PREFACE_LEN,
            ..Self::server()
        }
    }

    /// The edge's side: frames from the first byte.
    pub fn server() -> Self {
        FrameCursor {
            preface_left: 0,
            header: [0; FRAME_HEADER_LEN],
            header_len: 0,
            payload_left: 0,
        }
    }

    /// Whether the bytes fed so far end exactly at a frame's end.
    pub fn at_boundary(&self) -> bool {
        self.preface_left == 0 && self.header_len == 0 && self.payload_left == 0
    }

    /// Passes `bytes`, calling `on_frame` for each frame header completed in them.
    pub fn feed(&mut self, mut bytes: &[u8], mut on_frame: impl FnMut(FrameHead)) {
        while !bytes.is_empty() {
            if self.preface_left > 0 {
                let n = self.preface_left.min(bytes.len());
                self.preface_left -= n;
                bytes = &bytes[n..];
            } else if self.payload_left > 0 {
                let n = self.payload_left.min(bytes.len());
                self.payload_left -= n;
                bytes = &bytes[n..];
            } else {
                let n = (FRAME_HEADER_LEN - self.header_len).min(bytes.len());
                self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[..n]);
                self.header_len += n;
                bytes = &bytes[n..];
                if self.header_len == FRAME_HEADER_LEN {
                    let h = &self.header;
                    self.payload_left =
                        usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                    self.header_len = 0;
                    on_frame(FrameHead {
                        kind: h[3],
                        flags: h[4],
                        stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
                    });
                }
            }
        }
    }
}

/// Why the guard ends a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abuse {
    /// Too many of the client's streams reset before their response ended.
    PrematureResets,
    /// SETTINGS or PING frames faster than the edge acknowledges them.
    ControlFlood,
}

impl Abuse {
    /// The event's name in `signpost_connection_events_total`.
    pub fn event(self) -> &'static str {
        match self {
            Abuse::PrematureResets => "h2_premature_resets",
            Abuse::ControlFlood => "h2_control_flood",
        }
    }
}

/// What a client frame makes the guard do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Continue,
    /// The connection has carried its budget of requests: ask h2 for a graceful GOAWAY.
    Retire,
    /// Close now with GOAWAY `ENHANCE_YOUR_CALM`.
    Close(Abuse),
}

/// The rules, applied to the frame headers of one connection.
#[derive(Debug)]
pub struct Watch {
    max_requests: u32,
    /// Client streams opened (a HEADERS frame on a new stream id).
    streams: u32,
    highest_stream: u32,
    /// Client streams whose response has not ended.
    open: HashSet<u32>,
    premature_resets: u32,
    control_tokens: u32,
    control_refilled: Instant,
    retired: bool,
}

impl Watch {
    pub fn new(max_requests: u32, now: Instant) -> Self {
        Watch {
            max_requests,
            streams: 0,
            highest_stream: 0,
            open: HashSet::new(),
            premature_resets: 0,
            control_tokens: CONTROL_FRAME_BURST,
            control_refilled: now,
            retired: false,
        }
    }

    /// The highest stream the client opened: the last one the edge may have processed.
    pub fn highest_stream(&self) -> u32 {
        self.highest_stream
    }

    /// A frame from the client.
    pub fn client_frame(&mut self, frame: FrameHead, now: Instant) -> Step {
        match frame.kind {
            HEADERS if frame.stream > self.highest_stream => {
                // A new stream (a HEADERS frame on a known stream is trailers).
                self.highest_stream = frame.stream;
                self.streams = self.streams.saturating_add(1);
                if self.open.len() < MAX_FOLLOWED_STREAMS {
                    self.open.insert(frame.stream);
                }
                if self.streams >= self.max_requests && !self.retired {
                    self.retired = true;
                    return Step::Retire;
                }
            }
            RST_STREAM if self.open.remove(&frame.stream) => {
                self.premature_resets += 1;
                // Envoy's rule (more than half of the streams reset prematurely), judged from
                // 100 resets on rather than from 500 streams: a browser that cancels a burst of
                // loads as its user moves on stays far below half of what it opened.
                if self.premature_resets >= PREMATURE_RESETS_MIN
                    && u64::from(self.premature_resets) * 2 > u64::from(self.streams)
                {
                    return Step::Close(Abuse::PrematureResets);
                }
            }
            SETTINGS | PING if frame.flags & FLAG_ACK == 0 => {
                let elapsed = now.saturating_duration_since(self.control_refilled);
                let earned = elapsed.as_millis() * u128::from(CONTROL_FRAMES_PER_SECOND) / 1000;
                if earned > 0 {
                    let earned = u32::try_from(earned).unwrap_or(u32::MAX);
                    self.control_tokens = self
                        .control_tokens
                        .saturating_add(earned)
                        .min(CONTROL_FRAME_BURST);
                    self.control_refilled = now;
                }
                match self.control_tokens.checked_sub(1) {
                    Some(left) => self.control_tokens = left,
                    None => return Step::Close(Abuse::ControlFlood),
                }
            }
            _ => {}
        }
        Step::Continue
    }

    /// A frame from the edge: a stream it ends or resets is answered.
    pub fn edge_frame(&mut self, frame: FrameHead) {
        let ends = match frame.kind {
            HEADERS | DATA => frame.flags & FLAG_END_STREAM != 0,
            RST_STREAM => true,
            _ => false,
        };
        if ends {
            self.open.remove(&frame.stream);
        }
    }
}

/// A GOAWAY frame: no stream above `last_stream` was processed, and why.
fn goaway(last_stream: u32, code: u32) -> Vec<u8> {
    let mut frame = Vec::with_capacity(FRAME_HEADER_LEN + 8);
    frame.extend_from_slice(&[0, 0, 8, GOAWAY, 0, 0, 0, 0, 0]);
    frame.extend_from_slice(&(last_stream & 0x7fff_ffff).to_be_bytes());
    frame.extend_from_slice(&code.to_be_bytes());
    frame
}

/// What the connection's owner learns from its guard.
#[derive(Default)]
pub struct Signals {
    /// Notified once, when the connection has carried its request budget.
    pub retire: Notify,
}

/// Told once, when the guard closes its connection for abuse.
pub type OnAbuse = Box<dyn Fn(Abuse) + Send + Sync>;

/// Closing state of the guarded stream.
#[derive(Debug)]
enum Closing {
    Open,
    /// Writing the GOAWAY (bytes, how many written), then shutting the stream down.
    GoAway(Vec<u8>, usize),
    ShuttingDown,
    /// Draining what the client still sends, until it closes or the timer ends.
    Lingering(Pin<Box<tokio::time::Sleep>>),
    Closed,
}

/// An HTTP/2 connection's stream with its guard.
pub struct Guarded {
    inner: Stream,
    from_client: FrameCursor,
    from_edge: FrameCursor,
    watch: Watch,
    closing: Closing,
    signals: Arc<Signals>,
    on_abuse: OnAbuse,
}

impl std::fmt::Debug for Guarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("inner", &self.inner)
            .field("watch", &self.watch)
            .finish()
    }
}

impl Guarded {
    pub fn new(inner: Stream, max_requests: u32, on_abuse: OnAbuse) -> (Self, Arc<Signals>) {
        let signals = Arc::new(Signals::default());
        let guarded = Guarded {
            inner,
            from_client: FrameCursor::client(),
            from_edge: FrameCursor::server(),
            watch: Watch::new(max_requests, Instant::now()),
            closing: Closing::Open,
            signals: signals.clone(),
            on_abuse,
        };
        (guarded, signals)
    }

    /// Starts closing for `abuse`: with a GOAWAY if the edge's side is between two frames,
    /// else (h2 is midway through writing a frame) by ending the stream alone.
    fn close_for(&mut self, abuse: Abuse) {
        if !matches!(self.closing, Closing::Open) {
            return;
        }
        (self.on_abuse)(abuse);
        self.closing = if self.from_edge.at_boundary() {
            Closing::GoAway(goaway(self.watch.highest_stream(), ENHANCE_YOUR_CALM), 0)
        } else {
            // A GOAWAY now would land inside h2's frame: the stream ends without one.
            Closing::ShuttingDown
        };
    }

    /// Drives the close: the GOAWAY's bytes, a flush, the stream's shutdown.
    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            match &mut self.closing {
                Closing::Open | Closing::Closed => return Poll::Ready(()),
                Closing::GoAway(bytes, written) => {
                    if *written == bytes.len() {
                        match Pin::new(&mut self.inner).poll_flush(cx) {
                            Poll::Pending => return Poll::Pending,
                            Poll::Ready(_) => self.closing = Closing::ShuttingDown,
                        }
                        continue;
                    }
                    match Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(n)) if n > 0 => *written += n,
                        // The client is gone: nothing more to say.
                        Poll::Ready(_) => self.closing = Closing::Closed,
                    }
                }
                Closing::ShuttingDown => match Pin::new(&mut self.inner).poll_shutdown(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(_) => {
                        self.closing = Closing::Lingering(Box::pin(tokio::time::sleep(LINGER)))
                    }
                },
                Closing::Lingering(timer) => {
                    if timer.as_mut().poll(cx).is_ready() {
                        self.closing = Closing::Closed;
                        continue;
                    }
                    let mut scratch = [0u8; 4096];
                    for _ in 0..LINGER_READS_PER_POLL {
                        let mut discard = ReadBuf::new(&mut scratch);
                        match Pin::new(&mut self.inner).poll_read(cx, &mut discard) {
                            Poll::Pending => return Poll::Pending,
                            Poll::Ready(Ok(())) if !discard.filled().is_empty() => {}
                            Poll::Ready(_) => {
                                self.closing = Closing::Closed;
                                return Poll::Ready(());
                            }
                        }
                    }
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            }
        }
    }

    fn closed_error() -> io::Error {
        io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "HTTP/2 connection closed by the edge's guard",
        )
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !matches!(this.closing, Closing::Open) {
            // What the client sends after the verdict is not read: h2 sees the end of the stream.
            return this.poll_close(cx).map(|()| Ok(()));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = read {
            let now = Instant::now();
            let mut verdict = None;
            let mut retire = false;
            let watch = &mut this.watch;
            this.from_client.feed(&buf.filled()[before..], |frame| {
                match watch.client_frame(frame, now) {
                    Step::Continue => {}
                    Step::Retire => retire = true,
                    Step::Close(abuse) => {
                        verdict.get_or_insert(abuse);
                    }
                }
            });
            if retire {
                this.signals.retire.notify_one();
            }
            if let Some(abuse) = verdict {
                // The bytes of this read are not handed on: the frames that broke the rule are
                // not answered.
                buf.set_filled(before);
                this.close_for(abuse);
                return this.poll_close(cx).map(|()| Ok(()));
            }
        }
        read
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !matches!(this.closing, Closing::Open) {
            return this.poll_close(cx).map(|()| Err(Self::closed_error()));
        }
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            let watch = &mut this.watch;
            this.from_edge
                .feed(&buf[..n], |frame| watch.edge_frame(frame));
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !matches!(this.closing, Closing::Open) {
            return this.poll_close(cx).map(Ok);
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !matches!(this.closing, Closing::Open) {
            return this.poll_close(cx).map(Ok);
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[async_trait]
impl Shutdown for Guarded {
    async fn shutdown(&mut self) {
        if matches!(self.closing, Closing::Open) {
            self.inner.shutdown().await;
        }
    }
}

impl UniqueID for Guarded {
    fn id(&self) -> UniqueIDType {
        self.inner.id()
    }
}

impl Ssl for Guarded {
    fn get_ssl(&self) -> Option<&pingora::protocols::tls::TlsRef> {
        self.inner.get_ssl()
    }
    fn get_ssl_digest(&self) -> Option<Arc<pingora::protocols::tls::SslDigest>> {
        self.inner.get_ssl_digest()
    }
    fn selected_alpn_proto(&self) -> Option<pingora::protocols::ALPN> {
        self.inner.selected_alpn_proto()
    }
}

impl GetTimingDigest for Guarded {
    fn get_timing_digest(&self) -> Vec<Option<pingora::protocols::TimingDigest>> {
        self.inner.get_timing_digest()
    }
    fn get_read_pending_time(&self) -> std::time::Duration {
        self.inner.get_read_pending_time()
    }
    fn get_write_pending_time(&self) -> std::time::Duration {
        self.inner.get_write_pending_time()
    }
}

impl GetProxyDigest for Guarded {
    fn get_proxy_digest(&self) -> Option<Arc<pingora::protocols::raw_connect::ProxyDigest>> {
        self.inner.get_proxy_digest()
    }
}

impl GetSocketDigest for Guarded {
    fn get_socket_digest(&self) -> Option<Arc<pingora::protocols::SocketDigest>> {
        self.inner.get_socket_digest()
    }
}

#[async_trait]
impl Peek for Guarded {
    async fn try_peek(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        self.inner.try_peek(buf).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn head(kind: u8, flags: u8, stream: u32) -> FrameHead {
        FrameHead {
            kind,
            flags,
            stream,
        }
    }

    fn frame_bytes(frame: FrameHead, payload: usize) -> Vec<u8> {
        let mut bytes = vec![
            (payload >> 16) as u8,
            (payload >> 8) as u8,
            payload as u8,
            frame.kind,
            frame.flags,
        ];
        bytes.extend_from_slice(&frame.stream.to_be_bytes());
        bytes.extend(std::iter::repeat_n(0xa5, payload));
        bytes
    }

    proptest! {
        /// However the bytes are cut into reads, the cursor finds the same frames, and is at a
        /// boundary exactly where a frame ends.
        #[test]
        fn frames_are_found_whatever_the_reads(
            frames in prop::collection::vec((any::<u8>(), any::<u8>(), 0u32..1 << 31, 0usize..300), 0..20),
            cuts in prop::collection::vec(1usize..64, 1..40),
        ) {
            let frames: Vec<(FrameHead, usize)> =
                frames.into_iter().map(|(k, f, s, p)| (head(k, f, s), p)).collect();
            let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
            for (frame, payload) in &frames {
                wire.extend(frame_bytes(*frame, *payload));
            }
            let mut cursor = FrameCursor::client();
            let mut found = Vec::new();
            let mut rest = &wire[..];
            let mut cut = cuts.iter().cycle();
            while !rest.is_empty() {
                let n = (*cut.next().unwrap()).min(rest.len());
                cursor.feed(&rest[..n], |f| found.push(f));
                rest = &rest[n..];
            }
            let want: Vec<FrameHead> = frames.iter().map(|(f, _)| *f).collect();
            prop_assert_eq!(found, want);
            prop_assert!(cursor.at_boundary());
        }

        /// Arbitrary bytes never panic the cursor or the rules.
        #[test]
        fn arbitrary_bytes_are_harmless(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
            let now = Instant::now();
            let mut watch = Watch::new(1000, now);
            let mut cursor = FrameCursor::client();
            cursor.feed(&bytes, |f| { watch.client_frame(f, now); });
            prop_assert!(watch.open.len() <= MAX_FOLLOWED_STREAMS);
        }
    }

    #[test]
    fn a_client_that_resets_what_it_opens_is_closed() {
        let now = Instant::now();
        let mut watch = Watch::new(1000, now);
        let mut verdict = Step::Continue;
        for id in (1..).step_by(2).take(200) {
            assert_eq!(
                watch.client_frame(head(HEADERS, 0x5, id), now),
                Step::Continue
            );
            verdict = watch.client_frame(head(RST_STREAM, 0, id), now);
            if verdict != Step::Continue {
                break;
            }
        }
        assert_eq!(verdict, Step::Close(Abuse::PrematureResets));
        assert_eq!(watch.premature_resets, PREMATURE_RESETS_MIN);
    }

    #[test]
    fn a_browser_that_cancels_bursts_among_many_completed_streams_is_not() {
        let now = Instant::now();
        let mut watch = Watch::new(100_000, now);
        let mut id = 1;
        // Forty page views of thirty loads each: twenty complete, ten are cancelled as the user
        // moves on (400 cancellations in all, a third of the streams).
        for _ in 0..40 {
            let first = id;
            for _ in 0..30 {
                assert_eq!(
                    watch.client_frame(head(HEADERS, 0x5, id), now),
                    Step::Continue
                );
                id += 2;
            }
            for done in (first..).step_by(2).take(20) {
                watch.edge_frame(head(HEADERS, 0x4, done));
                watch.edge_frame(head(DATA, FLAG_END_STREAM, done));
            }
            for cancelled in (first + 40..).step_by(2).take(10) {
                assert_eq!(
                    watch.client_frame(head(RST_STREAM, 0, cancelled), now),
                    Step::Continue
                );
            }
        }
        assert_eq!(watch.premature_resets, 400);
    }

    #[test]
    fn resets_after_the_response_ended_are_not_premature() {
        let now = Instant::now();
        let mut watch = Watch::new(1000, now);
        for id in (1..).step_by(2).take(300) {
            watch.client_frame(head(HEADERS, 0x5, id), now);
            watch.edge_frame(head(HEADERS, FLAG_END_STREAM | 0x4, id));
            assert_eq!(
                watch.client_frame(head(RST_STREAM, 0, id), now),
                Step::Continue
            );
        }
        assert_eq!(watch.premature_resets, 0);
    }

    #[test]
    fn control_frames_past_the_burst_and_rate_close_the_connection() {
        let start = Instant::now();
        let mut watch = Watch::new(1000, start);
        for _ in 0..CONTROL_FRAME_BURST {
            assert_eq!(watch.client_frame(head(PING, 0, 0), start), Step::Continue);
        }
        // Acknowledgements are free.
        assert_eq!(
            watch.client_frame(head(SETTINGS, FLAG_ACK, 0), start),
            Step::Continue
        );
        // One second later, ten more are allowed, and the eleventh is not.
        let later = start + Duration::from_secs(1);
        for _ in 0..CONTROL_FRAMES_PER_SECOND {
            assert_eq!(
                watch.client_frame(head(SETTINGS, 0, 0), later),
                Step::Continue
            );
        }
        assert_eq!(
            watch.client_frame(head(PING, 0, 0), later),
            Step::Close(Abuse::ControlFlood)
        );
    }

    #[test]
    fn the_request_budget_retires_the_connection_once() {
        let now = Instant::now();
        let mut watch = Watch::new(3, now);
        assert_eq!(
            watch.client_frame(head(HEADERS, 0x5, 1), now),
            Step::Continue
        );
        assert_eq!(
            watch.client_frame(head(HEADERS, 0x5, 3), now),
            Step::Continue
        );
        // Trailers on a known stream open nothing.
        assert_eq!(
            watch.client_frame(head(HEADERS, 0x5, 3), now),
            Step::Continue
        );
        assert_eq!(watch.client_frame(head(HEADERS, 0x5, 5), now), Step::Retire);
        assert_eq!(
            watch.client_frame(head(HEADERS, 0x5, 7), now),
            Step::Continue
        );
    }

    #[test]
    fn the_goaway_names_the_last_stream_and_the_reason() {
        let frame = goaway(77, ENHANCE_YOUR_CALM);
        let mut cursor = FrameCursor::server();
        let mut found = Vec::new();
        cursor.feed(&frame, |f| found.push(f));
        assert_eq!(found, vec![head(GOAWAY, 0, 0)]);
        assert_eq!(&frame[9..13], &77u32.to_be_bytes());
        assert_eq!(&frame[13..], &ENHANCE_YOUR_CALM.to_be_bytes());
    }
}
