//! Origin HTML converted to Markdown for agents (`[zone.markdown]`).
//!
//! Pingora's body hooks are synchronous and its response header leaves before the body is seen,
//! so neither an exact `Content-Length` nor an unchanged fallback would be possible inside its
//! proxy loop. A request that asks for Markdown on a zone that converts is therefore forwarded
//! here, by the edge itself, through Pingora's own connector and connection pool: the same peer,
//! the same request to the origin and the same filter of its answer as every proxied request
//! (`origin::peer`, `origin_route::prepare_request`, `origin_route::filter_response`), the same
//! 52x answers on failure (an error of this module says whose side failed, and the pipeline hands
//! it to `fail_to_proxy` as Pingora hands its own). The body is read whole (up to the zone's cap
//! and the global memory budget), converted on tokio's blocking pool with at most [`MAX_CONCURRENT`] conversions at
//! once (each first reserving its working memory in the budget), and sent with an exact
//! `Content-Length`; on any miss the origin's bytes are sent as they came.

pub(crate) mod cache;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use pingora::connectors::http::Connector;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::upstreams::peer::Peer;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use signpost_policy::MarkdownConfig;
use signpost_problem::Format;

use tokio::sync::Semaphore;

/// What the Markdown route did for a request, for the access line.
#[derive(Clone, Copy, Debug, Default)]
pub struct MarkdownState {
    /// What happened to a request for Markdown on a converting zone.
    pub outcome: Option<Outcome>,
    /// What the zone's converted-page cache did for it.
    pub cache: Option<crate::markdown::cache::Status>,
}

/// At most this many conversions run at once (each on a blocking-pool thread); more wait for a
/// slot, their bodies counted in the memory budget meanwhile.
pub const MAX_CONCURRENT: usize = 4;

/// The global budget for memory held by conversions in flight: the bodies as read (while read
/// or waiting) and, while a page converts, its working memory as
/// [`signpost_markdown::working_bytes`] counts it (the body included). A conversion that would
/// take the total past it is not made: the HTML is sent through. 256 MiB: the largest page a
/// policy may convert, with the most elements, fits alone.
pub const MEMORY_BUDGET: usize = 256 * 1024 * 1024;

const _: () = assert!(
    signpost_policy::MAX_MARKDOWN_MAX_BYTES * signpost_markdown::WORKING_BYTES_PER_BYTE
        + signpost_markdown::DEFAULT_MAX_ELEMENTS * signpost_markdown::WORKING_BYTES_PER_TAG
        <= MEMORY_BUDGET
);

/// Response headers that describe the HTML bytes and so do not survive the conversion.
const DROPPED_HEADERS: [&str; 9] = [
    "content-encoding",
    "content-length",
    "content-range",
    "etag",
    "last-modified",
    "accept-ranges",
    "transfer-encoding",
    "connection",
    "keep-alive",
];

/// Request headers not forwarded on a conversion: conditionals (the origin must send the full
/// page, and the HTML's validators would not fit the Markdown) and ranges (never converted).
const DROPPED_REQUEST_HEADERS: [&str; 5] = [
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
    "if-range",
];

/// How converted pages write their links: same-site targets root-relative, with the page URL
/// as the frontmatter's `url` (`signpost markdown` previews the same).
pub const LINK_FORM: signpost_markdown::LinkForm = signpost_markdown::LinkForm::RootRelative;

/// The content codings the converter can undo; others are removed from `Accept-Encoding`.
const DECODABLE: [&str; 5] = ["gzip", "x-gzip", "deflate", "br", "zstd"];

/// What happened to a request for Markdown: a metric label and an access-log field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Converted,
    OverCap,
    OverBudget,
    Failed,
    Skipped,
    /// Served from the zone's converted-page cache, fresh or revalidated: not converted.
    Cached,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Converted => "converted",
            Outcome::OverCap => "over_cap",
            Outcome::OverBudget => "over_budget",
            Outcome::Failed => "failed",
            Outcome::Skipped => "skipped",
            Outcome::Cached => "cached",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabel {
    direction: &'static str,
}

/// The conversion metrics: outcomes, bytes in (decoded HTML) and out (Markdown), time.
pub struct MarkdownMetrics {
    outcomes: Family<OutcomeLabel, Counter>,
    bytes: Family<DirectionLabel, Counter>,
    seconds: Histogram,
}

impl MarkdownMetrics {
    pub fn register(registry: &mut Registry) -> MarkdownMetrics {
        let outcomes = Family::<OutcomeLabel, Counter>::default();
        registry.register(
            "markdown_conversions",
            "Requests for Markdown on converting zones, by outcome (converted, over_cap, over_budget, failed, skipped)",
            outcomes.clone(),
        );
        let bytes = Family::<DirectionLabel, Counter>::default();
        registry.register(
            "markdown_bytes",
            "Bytes converted: in = origin HTML as received, out = Markdown sent",
            bytes.clone(),
        );
        // 100 µs to ~3.3 s.
        let seconds = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        registry.register(
            "markdown_conversion_seconds",
            "Time to convert one page, on the blocking pool",
            seconds.clone(),
        );
        MarkdownMetrics {
            outcomes,
            bytes,
            seconds,
        }
    }

    pub fn outcome(&self, outcome: Outcome) {
        self.outcomes
            .get_or_create(&OutcomeLabel {
                outcome: outcome.as_str(),
            })
            .inc();
    }

    fn converted(&self, bytes_in: usize, bytes_out: usize, took: Duration) {
        self.bytes
            .get_or_create(&DirectionLabel { direction: "in" })
            .inc_by(bytes_in as u64);
        self.bytes
            .get_or_create(&DirectionLabel { direction: "out" })
            .inc_by(bytes_out as u64);
        self.seconds.observe(took.as_secs_f64());
    }
}

/// Shared state: the connector (Pingora's pool of origin connections), the conversion slots and
/// the memory budget.
pub struct Converter {
    connector: Connector,
    slots: Arc<Semaphore>,
    in_flight: Arc<AtomicUsize>,
    budget: usize,
}

impl Default for Converter {
    fn default() -> Self {
        Converter::new(MEMORY_BUDGET)
    }
}

impl Converter {
    pub fn new(budget: usize) -> Converter {
        Converter {
            connector: Connector::new(None),
            slots: Arc::new(Semaphore::new(MAX_CONCURRENT)),
            in_flight: Arc::new(AtomicUsize::new(0)),
            budget,
        }
    }

    /// Reserves `bytes` of the budget, or says no.
    fn reserve(&self, bytes: usize) -> bool {
        reserve(&self.in_flight, self.budget, bytes)
    }

    fn release(&self, bytes: usize) {
        self.in_flight.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// Adds `bytes` to `held` unless that takes it past `budget`.
fn reserve(held: &AtomicUsize, budget: usize, bytes: usize) -> bool {
    held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
        now.checked_add(bytes).filter(|&total| total <= budget)
    })
    .is_ok()
}

/// A conversion's working memory, counted in the budget until dropped (also if the conversion
/// panics, so the budget cannot leak).
struct Reservation {
    held: Arc<AtomicUsize>,
    bytes: usize,
}

impl Reservation {
    fn take(held: Arc<AtomicUsize>, budget: usize, bytes: usize) -> Option<Reservation> {
        // `then`, not `then_some`: a refused reservation must never be built (its drop would
        // give back what was not taken).
        reserve(&held, budget, bytes).then(|| Reservation { held, bytes })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Whether a request is one the edge converts itself: Markdown negotiated by the error
/// contract's rules, GET or HEAD, no `Range`, no `no-transform`. `None` when Markdown was not
/// asked for at all; `Some(false)` when it was but the request cannot have it (skipped).
pub fn wanted(req: &RequestHeader, accept: Option<&[u8]>) -> Option<bool> {
    if signpost_problem::negotiate(accept) != Format::Markdown {
        return None;
    }
    let method_ok = req.method == http::Method::GET || req.method == http::Method::HEAD;
    let range = req.headers.contains_key(http::header::RANGE);
    Some(method_ok && !range && !no_transform(&req.headers))
}

fn no_transform(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| d.trim().eq_ignore_ascii_case("no-transform"))
}

/// Adds `Accept` to `Vary` unless it is there already (or `Vary: *`).
pub fn add_vary_accept(response: &mut ResponseHeader) -> Result<()> {
    let mut values = Vec::new();
    for v in response.headers.get_all(http::header::VARY) {
        let text = String::from_utf8_lossy(v.as_bytes()).into_owned();
        if text
            .split(',')
            .any(|t| t.trim() == "*" || t.trim().eq_ignore_ascii_case("accept"))
        {
            return Ok(());
        }
        values.push(text);
    }
    values.push("Accept".to_string());
    response.insert_header(http::header::VARY, values.join(", "))?;
    Ok(())
}

/// Tells agents that a page has a Markdown variant (RFC 8288 `Link`, `rel="alternate"`,
/// `type="text/markdown"`): added, after any `Link` the origin sent, to a 200 HTML answer to a
/// GET or HEAD (the requests that could have had the Markdown) on a zone that converts. The
/// target is the page's own URL, as the client asked for it, because the Markdown is negotiated
/// there by `Accept: text/markdown`.
pub fn add_discovery_link(
    response: &mut ResponseHeader,
    request: &RequestHeader,
    tls: bool,
    host: &str,
) -> Result<()> {
    let read = request.method == http::Method::GET || request.method == http::Method::HEAD;
    let html = read
        && response.status == http::StatusCode::OK
        && header_str(response, http::header::CONTENT_TYPE).is_some_and(signpost_markdown::is_html);
    if !html {
        return Ok(());
    }
    let target = request.uri.path_and_query().map_or("/", |pq| pq.as_str());
    if let Some(link) = discovery_link(tls, host, target) {
        response.append_header(http::header::LINK, link)?;
    }
    Ok(())
}

/// The `Link` value naming the Markdown of the page at `host` and `target`, or `None` when the
/// host is not a plain authority (name or address, and port). The request's bytes are hostile:
/// the host is checked, and every byte of the target that may not stand in a URI as it is
/// (RFC 3986: controls, space, `"<>\^`{|}` and non-ASCII) is percent-encoded, so that the
/// value is one link whose URI ends at its `>`.
pub fn discovery_link(tls: bool, host: &str, target: &str) -> Option<http::HeaderValue> {
    use std::fmt::Write as _;
    let authority_byte =
        |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']');
    let plain_host = !host.is_empty()
        && host.bytes().all(authority_byte)
        && host.parse::<http::uri::Authority>().is_ok();
    if !plain_host || !target.starts_with('/') {
        return None;
    }
    let scheme = if tls { "https" } else { "http" };
    let mut value = String::with_capacity(scheme.len() + host.len() + target.len() + 64);
    let _ = write!(value, "<{scheme}://{host}");
    for &b in target.as_bytes() {
        let kept = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'/'
                    | b'?'
                    | b':'
                    | b'@'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b'%'
            );
        if kept {
            value.push(char::from(b));
        } else {
            let _ = write!(value, "%{b:02X}");
        }
    }
    value.push_str(">; rel=\"alternate\"; type=\"text/markdown\"");
    http::HeaderValue::try_from(value).ok()
}

/// The request sent to the origin for a conversion: the client's, as a GET (a HEAD needs the
/// page to know its Markdown length), without conditionals, with `Accept-Encoding` narrowed to
/// codings the converter can undo (so an HTML fallback is still one the client accepted).
pub fn upstream_request(req: &RequestHeader) -> Result<RequestHeader> {
    let mut up = req.clone();
    up.set_method(http::Method::GET);
    up.set_version(http::Version::HTTP_11);
    for name in DROPPED_REQUEST_HEADERS {
        up.remove_header(name);
    }
    let accepted: Vec<String> = req
        .headers
        .get_all(http::header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|c| {
            let name = c.split(';').next().unwrap_or("").trim();
            DECODABLE.iter().any(|d| name.eq_ignore_ascii_case(d))
        })
        .map(str::to_string)
        .collect();
    up.remove_header(&http::header::ACCEPT_ENCODING);
    if !accepted.is_empty() {
        up.insert_header(http::header::ACCEPT_ENCODING, accepted.join(", "))?;
    }
    Ok(up)
}

/// Whether the origin's response is one to convert (status, type, `no-transform`, ranges).
fn convertible(resp: &ResponseHeader) -> bool {
    resp.status == http::StatusCode::OK
        && resp
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(signpost_markdown::is_html)
        && !resp.headers.contains_key(http::header::CONTENT_RANGE)
        && !no_transform(&resp.headers)
}

fn header_str(resp: &ResponseHeader, name: http::header::HeaderName) -> Option<&str> {
    resp.headers.get(name).and_then(|v| v.to_str().ok())
}

/// Everything [`respond`] needs from the pipeline, so it stays out of pipeline.rs.
pub struct Job<'a> {
    pub converter: &'a Converter,
    pub metrics: &'a MarkdownMetrics,
    pub config: &'a MarkdownConfig,
    pub peer: &'a HttpPeer,
    /// The URL links resolve against: scheme, host and path of the client's request.
    pub url: String,
    pub head_only: bool,
    /// The `cf-ray` value the response carries.
    pub ray: http::HeaderValue,
    /// The zone's converted-page cache and what it holds for this request, when it caches.
    pub cache: Option<&'a mut crate::markdown::cache::Use>,
}

/// A failure to write to the client: the client's side (it left, or stopped reading), as
/// Pingora's proxy loop marks its own, so that it is a cancellation and never the edge's 500.
fn client_side(e: Box<Error>) -> Box<Error> {
    e.into_down()
}

/// A failure to talk to the origin: its side, answered with its 52x (`origin/rescue.rs`).
fn origin_side(e: Box<Error>) -> Box<Error> {
    e.into_up()
}

/// Answers the origin's response `resp` (its head filtered by `origin_route::filter_response`):
/// a revalidated cache entry, the answer the filter put `instead` of the origin's, the page
/// converted, or the origin's bytes passed through. An error says whose side failed
/// ([`client_side`], [`origin_side`]).
pub async fn respond(
    session: &mut Session,
    job: Job<'_>,
    mut up: pingora::protocols::http::client::HttpSession,
    resp: ResponseHeader,
    instead: Option<(ResponseHeader, Bytes)>,
) -> Result<Outcome> {
    let Job {
        converter,
        metrics,
        config,
        peer,
        url,
        head_only,
        ray,
        mut cache,
    } = job;
    if let Some(refreshed) = cache
        .as_deref_mut()
        .and_then(|c| c.revalidated(&resp, session.req_header(), ray))
    {
        // A 304 has no body: the connection is ready for the next request.
        finish_upstream(converter, up, peer, true).await;
        refreshed?.write(session, head_only).await?;
        return Ok(Outcome::Cached);
    }
    // What the cache says of every answer below that is not the cache's own entry: the origin
    // was asked, and nothing of its answer stored.
    let forwarded = cache.as_deref().map(|c| c.forwarded_status(resp.status));
    let mark = |header: &mut ResponseHeader| match &forwarded {
        Some(value) => header.append_header(crate::markdown::cache::CACHE_STATUS, value.clone()),
        None => Ok(true),
    };
    // An answer in place of the origin's (its error as a structured problem for an agent, or an
    // error rule's answer): not converted, its page not read, its connection not kept.
    if let Some((mut head, body)) = instead {
        mark(&mut head)?;
        metrics.outcome(Outcome::Skipped);
        finish_upstream(converter, up, peer, false).await;
        return write_whole(session, head, body, head_only)
            .await
            .map(|()| Outcome::Skipped);
    }
    let declared_len = header_str(&resp, http::header::CONTENT_LENGTH)
        .and_then(|v| v.trim().parse::<usize>().ok());
    let not_read = if !convertible(&resp) {
        Some(Outcome::Skipped)
    } else if declared_len.is_some_and(|n| n > config.max_bytes) {
        Some(Outcome::OverCap)
    } else {
        None
    };
    let mut resp = resp;
    if let Some(outcome) = not_read {
        metrics.outcome(outcome);
        mark(&mut resp)?;
        let result = stream_rest(session, &mut up, resp, None, head_only).await;
        finish_upstream(converter, up, peer, result.is_ok()).await;
        return result.map(|()| outcome);
    }
    let page = read_whole(&mut up, converter, config.max_bytes, declared_len).await?;
    if let Some(outcome) = page.stopped {
        converter.release(page.reserved);
        metrics.outcome(outcome);
        mark(&mut resp)?;
        let result = stream_rest(session, &mut up, resp, Some(page.body), head_only).await;
        finish_upstream(converter, up, peer, result.is_ok()).await;
        return result.map(|()| outcome);
    }
    let upstream_done = up.response_done();
    finish_upstream(converter, up, peer, upstream_done).await;

    let body = page.body;
    let validators = crate::markdown::cache::Validators::of(&resp);
    let converted = convert(converter, config, &resp, body.clone(), url).await;
    converter.release(page.reserved);
    let (outcome, header, out) = match converted {
        Ok((markdown, tokens, took)) => {
            metrics.converted(body.len(), markdown.len(), took);
            let header = markdown_header(&resp, config, markdown.len(), tokens)?;
            (Outcome::Converted, header, Bytes::from(markdown))
        }
        Err(outcome) => {
            let mut header = resp;
            header.remove_header(&http::header::TRANSFER_ENCODING);
            header.insert_header(http::header::CONTENT_LENGTH, body.len().to_string())?;
            mark(&mut header)?;
            (outcome, header, body)
        }
    };
    metrics.outcome(outcome);
    let reply = match cache {
        Some(cache) if outcome == Outcome::Converted => {
            cache.converted(header, out, validators, session.req_header())?
        }
        _ => crate::markdown::cache::Reply {
            header,
            body: Some(out),
        },
    };
    reply.write(session, head_only).await?;
    Ok(outcome)
}

/// Writes a response whose body is complete (the head alone for HEAD).
async fn write_whole(
    session: &mut Session,
    header: ResponseHeader,
    body: Bytes,
    head_only: bool,
) -> Result<()> {
    session
        .write_response_header(Box::new(header), head_only)
        .await
        .map_err(client_side)?;
    if !head_only {
        session
            .write_response_body(Some(body), true)
            .await
            .map_err(client_side)?;
    }
    Ok(())
}

/// Sends the request (prepared by `origin_route::prepare_request`) to the origin and reads its
/// response header. Every failure is the origin's side ([`origin_side`]): a refusal, a timeout
/// or garbage is its 52x, as on the proxy route.
pub async fn ask_origin(
    converter: &Converter,
    peer: &HttpPeer,
    request: RequestHeader,
) -> Result<(
    pingora::protocols::http::client::HttpSession,
    ResponseHeader,
)> {
    let (mut up, _reused) = converter
        .connector
        .get_http_session(peer)
        .await
        .map_err(origin_side)?;
    up.set_read_timeout(peer.options.read_timeout);
    up.set_write_timeout(peer.options.write_timeout);
    up.write_request_header(Box::new(request))
        .await
        .map_err(origin_side)?;
    up.finish_request_body().await.map_err(origin_side)?;
    up.read_response_header().await.map_err(origin_side)?;
    let resp = up
        .response_header()
        .cloned()
        .ok_or_else(|| Error::explain(InvalidHTTPHeader, "no response header").into_up())?;
    Ok((up, resp))
}

/// A page read for conversion: its bytes, the part of them held in the memory budget, and why
/// reading stopped early (the page is then passed through, the rest of it streamed).
struct Page {
    body: Bytes,
    reserved: usize,
    stopped: Option<Outcome>,
}

/// Reads the body whole, within the zone's cap and the memory budget; on an origin error what
/// was reserved is given back.
async fn read_whole(
    up: &mut pingora::protocols::http::client::HttpSession,
    converter: &Converter,
    max_bytes: usize,
    declared_len: Option<usize>,
) -> Result<Page> {
    let mut body = BytesMut::with_capacity(declared_len.unwrap_or(64 * 1024));
    let mut reserved = 0usize;
    let mut stopped = None;
    loop {
        let chunk = match up.read_response_body().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) => {
                converter.release(reserved);
                return Err(origin_side(e));
            }
        };
        if body.len() + chunk.len() > max_bytes {
            stopped = Some(Outcome::OverCap);
        } else if !converter.reserve(chunk.len()) {
            stopped = Some(Outcome::OverBudget);
        } else {
            reserved += chunk.len();
        }
        body.extend_from_slice(&chunk);
        if stopped.is_some() {
            break;
        }
    }
    Ok(Page {
        body: body.freeze(),
        reserved,
        stopped,
    })
}

/// Sends the origin's header and body as they came (`first` is what was read already).
///
/// This is the part of Pingora's proxy loop a pass-through needs, reproduced; each behaviour is
/// covered by a test in `tests/e2e/markdown.rs`:
/// - a body without a length is sent chunked, as HTTP/1.1
///   (`markdown_pass_through_keeps_the_proxys_framing`);
/// - `Connection` and `Keep-Alive` are hop-by-hop and not passed on (the same test);
/// - HEAD, 1xx, 204 and 304 answers have no body (the same test, and
///   `browsers_get_the_origin_bytes_and_head_gets_the_markdown_length` for HEAD);
/// - the part of the body read already is sent first, then the rest as it comes
///   (`pages_that_are_not_converted_pass_through_unchanged`, the page over the cap);
/// - `cf-ray` and `Vary: Accept` are added by `origin_route::filter_response`, as on the proxy
///   route (both tests above, and `tests/e2e/routes.rs`);
/// - the origin connection goes back to the pool only when its response was read to the end
///   ([`finish_upstream`]; `markdown_pass_through_keeps_the_proxys_framing` reuses it);
/// - an origin failure before the header is a 52x, after it the connection is cut, and a client
///   that leaves is a cancellation ([`origin_side`], [`client_side`]; `tests/e2e/routes.rs`).
async fn stream_rest(
    session: &mut Session,
    up: &mut pingora::protocols::http::client::HttpSession,
    mut resp: ResponseHeader,
    first: Option<Bytes>,
    head_only: bool,
) -> Result<()> {
    let no_body =
        head_only || resp.status.is_informational() || matches!(resp.status.as_u16(), 204 | 304);
    if !no_body
        && !resp.headers.contains_key(http::header::CONTENT_LENGTH)
        && !resp.headers.contains_key(http::header::TRANSFER_ENCODING)
    {
        // As Pingora's proxy does: chunked needs HTTP/1.1.
        resp.set_version(http::Version::HTTP_11);
        resp.insert_header(http::header::TRANSFER_ENCODING, "chunked")?;
    }
    for name in ["connection", "keep-alive"] {
        resp.remove_header(name);
    }
    session
        .write_response_header(Box::new(resp), no_body)
        .await
        .map_err(client_side)?;
    if no_body {
        return Ok(());
    }
    if let Some(first) = first {
        session
            .write_response_body(Some(first), false)
            .await
            .map_err(client_side)?;
    }
    loop {
        match up.read_response_body().await {
            Ok(Some(chunk)) => session
                .write_response_body(Some(chunk), false)
                .await
                .map_err(client_side)?,
            Ok(None) => break,
            Err(e) => return Err(origin_side(e)),
        }
    }
    session
        .write_response_body(None, true)
        .await
        .map_err(client_side)
}

/// Returns the origin connection to Pingora's pool when the response was read to its end.
async fn finish_upstream(
    converter: &Converter,
    mut up: pingora::protocols::http::client::HttpSession,
    peer: &HttpPeer,
    reusable: bool,
) {
    if reusable && up.response_done() {
        converter
            .connector
            .release_http_session(up, peer, peer.idle_timeout())
            .await;
    } else {
        up.shutdown().await;
    }
}

/// Converts on the blocking pool, one of [`MAX_CONCURRENT`]; `None` on any conversion error.
/// Decodes and converts on the blocking pool; `Err` says why the HTML goes through instead
/// ([`Outcome::OverBudget`] when the decoded page's working memory does not fit the budget,
/// else [`Outcome::Failed`]).
async fn convert(
    converter: &Converter,
    config: &MarkdownConfig,
    resp: &ResponseHeader,
    body: Bytes,
    url: String,
) -> std::result::Result<(String, Option<usize>, Duration), Outcome> {
    let content_type = header_str(resp, http::header::CONTENT_TYPE).map(str::to_string);
    let content_encoding = header_str(resp, http::header::CONTENT_ENCODING).map(str::to_string);
    let limits = signpost_markdown::Limits {
        max_bytes: config.max_bytes,
        ..signpost_markdown::Limits::default()
    };
    let count_tokens = config.token_count_header;
    let (held, budget) = (Arc::clone(&converter.in_flight), converter.budget);
    let _permit = converter
        .slots
        .acquire()
        .await
        .map_err(|_| Outcome::Failed)?;
    let task = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let source = signpost_markdown::Source {
            body: &body,
            content_type: content_type.as_deref(),
            content_encoding: content_encoding.as_deref(),
        };
        // Counted from the page as decoded (a small compressed body can be a page at the cap),
        // the body as read included: the caller holds it in the budget already.
        let reserve =
            |working: usize| Reservation::take(held, budget, working.saturating_sub(body.len()));
        // Same-site links root-relative, the page URL in the frontmatter (LinkForm says why an
        // agent resolves them right).
        let markdown =
            signpost_markdown::convert_within(&source, Some(&url), &limits, LINK_FORM, reserve)
                .map_err(|e| match e {
                    signpost_markdown::Error::NoRoom => Outcome::OverBudget,
                    _ => Outcome::Failed,
                })?;
        let tokens = count_tokens.then(|| {
            tiktoken_rs::cl100k_base_singleton()
                .encode_with_special_tokens(&markdown)
                .len()
        });
        Ok((markdown, tokens, started.elapsed()))
    });
    task.await.unwrap_or(Err(Outcome::Failed))
}

/// The origin's header made to describe the Markdown.
fn markdown_header(
    resp: &ResponseHeader,
    config: &MarkdownConfig,
    len: usize,
    tokens: Option<usize>,
) -> Result<ResponseHeader> {
    let mut header = resp.clone();
    for name in DROPPED_HEADERS {
        header.remove_header(name);
    }
    header.insert_header(http::header::CONTENT_TYPE, Format::Markdown.content_type())?;
    header.insert_header(http::header::CONTENT_LENGTH, len.to_string())?;
    if !header.headers.contains_key("content-signal")
        && let Some(signal) = &config.content_signal
    {
        header.insert_header("content-signal", signal.as_str())?;
    }
    if let Some(tokens) = tokens {
        header.insert_header("x-markdown-tokens", tokens.to_string())?;
    }
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vary_gains_accept_once() {
        let mut r = ResponseHeader::build(200, None).unwrap();
        add_vary_accept(&mut r).unwrap();
        assert_eq!(r.headers["vary"], "Accept");
        add_vary_accept(&mut r).unwrap();
        assert_eq!(r.headers.get_all("vary").iter().count(), 1);
        let mut r = ResponseHeader::build(200, None).unwrap();
        r.append_header("vary", "Accept-Encoding").unwrap();
        r.append_header("vary", "Cookie").unwrap();
        add_vary_accept(&mut r).unwrap();
        assert_eq!(r.headers["vary"], "Accept-Encoding, Cookie, Accept");
        let mut r = ResponseHeader::build(200, None).unwrap();
        r.append_header("vary", "*").unwrap();
        add_vary_accept(&mut r).unwrap();
        assert_eq!(r.headers["vary"], "*");
    }

    #[test]
    fn wanted_follows_the_contract() {
        let get = RequestHeader::build("GET", b"/", None).unwrap();
        assert_eq!(wanted(&get, Some(b"text/markdown")), Some(true));
        assert_eq!(wanted(&get, Some(b"text/html,*/*;q=0.8")), None);
        // Cloudflare converts on any mention; the contract's q-values decide here.
        assert_eq!(wanted(&get, Some(b"text/html, text/markdown;q=0.5")), None);
        let mut ranged = get.clone();
        ranged.insert_header("range", "bytes=0-10").unwrap();
        assert_eq!(wanted(&ranged, Some(b"text/markdown")), Some(false));
        let post = RequestHeader::build("POST", b"/", None).unwrap();
        assert_eq!(wanted(&post, Some(b"text/markdown")), Some(false));
    }

    #[test]
    fn upstream_request_narrows_encodings_and_drops_conditionals() {
        let mut req = RequestHeader::build("HEAD", b"/p", None).unwrap();
        req.insert_header("accept-encoding", "gzip, compress, br;q=0.5, identity")
            .unwrap();
        req.insert_header("if-none-match", "\"abc\"").unwrap();
        let up = upstream_request(&req).unwrap();
        assert_eq!(up.method, http::Method::GET);
        assert_eq!(up.headers["accept-encoding"], "gzip, br;q=0.5");
        assert!(!up.headers.contains_key("if-none-match"));
    }

    /// A page converts only when its working memory (per byte of the decoded page, however
    /// small the body on the wire) fits the budget beside what is held already, and the
    /// reservation is returned either way.
    #[test]
    fn working_memory_is_counted_from_the_decoded_page() {
        use std::io::Write as _;
        let page = format!("<p>{}</p>", "word ".repeat(20_000)).into_bytes();
        let working = signpost_markdown::working_bytes(&page);
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gzip.write_all(&page).unwrap();
        let gzipped = gzip.finish().unwrap();
        assert!(gzipped.len() * 50 < page.len(), "a small body on the wire");
        let config = MarkdownConfig::default();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        // As `fetch_and_convert` does: the body as read is held in the budget around the call.
        let run = |converter: &Converter, body: &[u8], coding: Option<&str>| {
            if !converter.reserve(body.len()) {
                return Err(Outcome::OverBudget);
            }
            let mut resp = ResponseHeader::build(200, None).unwrap();
            resp.insert_header("content-type", "text/html").unwrap();
            if let Some(coding) = coding {
                resp.insert_header("content-encoding", coding).unwrap();
            }
            let body = Bytes::copy_from_slice(body);
            let url = "http://example.com/".to_string();
            let converted = runtime
                .block_on(convert(converter, &config, &resp, body.clone(), url))
                .map(|(markdown, _, _)| markdown.len());
            converter.release(body.len());
            converted
        };
        for (body, coding) in [(&page, None), (&gzipped, Some("gzip"))] {
            let fits = Converter::new(working);
            assert!(run(&fits, body, coding).is_ok_and(|len| len > 90_000));
            assert_eq!(fits.in_flight.load(Ordering::Acquire), 0);
            let short = Converter::new(working - 1);
            assert_eq!(run(&short, body, coding), Err(Outcome::OverBudget));
            // What other conversions hold counts too.
            let shared = Converter::new(working);
            assert!(shared.reserve(1));
            assert_eq!(run(&shared, body, coding), Err(Outcome::OverBudget));
            assert_eq!(shared.in_flight.load(Ordering::Acquire), 1);
        }
    }

    #[test]
    fn discovery_link_names_the_page_itself() {
        let link = |tls, host, target| {
            discovery_link(tls, host, target).map(|v| v.to_str().unwrap().to_string())
        };
        assert_eq!(
            link(true, "example.com", "/docs/a?x=1").as_deref(),
            Some("<https://example.com/docs/a?x=1>; rel=\"alternate\"; type=\"text/markdown\"")
        );
        assert_eq!(
            link(false, "127.0.0.1:8080", "/a b>\"é").as_deref(),
            Some(
                "<http://127.0.0.1:8080/a%20b%3E%22%C3%A9>; rel=\"alternate\"; type=\"text/markdown\""
            )
        );
        assert_eq!(link(true, "evil.com>, <x", "/"), None);
        assert_eq!(link(true, "", "/"), None);
        assert_eq!(link(true, "example.com", "*"), None);
    }

    #[test]
    fn discovery_link_only_on_ok_html() {
        let answer = |status: u16, content_type: &str| {
            let mut r = ResponseHeader::build(status, None).unwrap();
            r.insert_header("content-type", content_type).unwrap();
            r.insert_header("link", "</style.css>; rel=preload")
                .unwrap();
            let get = RequestHeader::build("GET", b"/p", None).unwrap();
            add_discovery_link(&mut r, &get, true, "example.com").unwrap();
            r.headers.get_all("link").iter().count()
        };
        assert_eq!(answer(200, "text/html; charset=utf-8"), 2);
        assert_eq!(answer(200, "application/json"), 1);
        assert_eq!(answer(404, "text/html"), 1);
        assert_eq!(answer(304, "text/html"), 1);
    }

    proptest::proptest! {
        /// Whatever bytes the host and target hold, the value is one link to the Markdown: a
        /// URI in `<>` on this scheme and host with no byte that could end it or start
        /// another, then the fixed parameters.
        #[test]
        fn discovery_link_cannot_be_injected(
            host_bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            name in "[a-z0-9.:_\\[\\]-]{0,24}",
            target in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            tls in proptest::prelude::any::<bool>(),
            plain in proptest::prelude::any::<bool>(),
        ) {
            // Arbitrary bytes, or a host made of the bytes an authority may hold (most such
            // strings still are not one); a target that is one (a path) or any bytes.
            let host = if plain { name } else { String::from_utf8_lossy(&host_bytes).into_owned() };
            let target = String::from_utf8_lossy(&target);
            let target = if plain { format!("/{target}") } else { target.into_owned() };
            if let Some(value) = discovery_link(tls, &host, &target) {
                let text = value.to_str().expect("visible ASCII");
                let uri = text
                    .strip_prefix('<')
                    .and_then(|t| t.strip_suffix(">; rel=\"alternate\"; type=\"text/markdown\""))
                    .expect("one link");
                let delimited = uri.bytes().all(|b| {
                    b.is_ascii_graphic()
                        && !matches!(b, b'<' | b'>' | b'"' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}')
                });
                proptest::prop_assert!(delimited, "{}", text);
                let origin = format!("{}{}/", if tls { "https://" } else { "http://" }, host);
                proptest::prop_assert!(uri.starts_with(&origin), "{}", text);
                proptest::prop_assert!(http::Uri::try_from(uri).is_ok(), "{}", text);
            }
        }
    }

    #[test]
    fn budget_is_shared_and_released() {
        let c = Converter::new(100);
        assert!(c.reserve(60));
        assert!(!c.reserve(41));
        assert!(c.reserve(40));
        c.release(100);
        assert!(c.reserve(100));
    }
}
