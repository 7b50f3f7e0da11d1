//! End-to-end tests: the real `signpost` binary, real origins on loopback, real HTTP clients and
//! real parsers (serde_json, a YAML parser on the frontmatter, an HTML parser).

mod support;
// A real DNS server (dnsmasq) for the verified-bot tests; the edge's reverse DNS unit tests
// include it too.
#[allow(dead_code)]
mod dns;

// No way around the rules: invalid bytes, repeated lines, Host case, encoded paths.
mod bypass;
// The commands that do not serve: check, render, codes, tokens.
mod cli;
// Deadlines, pipelining, CONNECT/TRACE, malformed requests and bodies: raw sockets.
mod connections;
// The error contract of `/cdn-cgi/error/<code>` in every format, and 404 for unknown codes.
mod contract;
// The operator's error rules and tokens, and origin errors reshaped for agents.
mod error_rules;
// Who is asking: known bots verified or refused as impostors, the origin's identity header.
mod identity;
// Web Bot Auth signers and HTTPS key directories, for the tests below.
mod signing;
// Web Bot Auth: a real signer and a real HTTPS key directory.
mod web_bot_auth;
// Challenges: the page solved, clearances bound and rotated, agents told to sign, the fallback.
mod challenge;
// Crawl control: signed crawlers allowed, blocked and charged; the ledger; robots.txt.
mod crawl;
// Hostile Host values that must still give valid JSON, YAML and escaped HTML.
mod hostile;
// Rate limits hold under a flood of distinct keys.
mod flood;
// Fleet-scope rate limits: three edges, one real redis-server.
mod fleet;
// Rate limits that count answers, refusals that last, and requests diverted to another origin.
mod limits;
// Origin HTML converted to Markdown: real pages, encodings, charsets, fallbacks, HEAD, a corpus.
mod markdown;
// The converted-page cache: hits, revalidation, what is never stored, Vary, the byte bound, purge.
mod markdown_cache;
// Origins that refuse, hang, close or babble: 521, 524, 520, 1016.
mod origin_failures;
// Running it: live reload under load, metrics, health, graceful shutdown, JSON logs.
mod ops;
// The pages for people: Accept-Language, a zone's fixed language, the cause of a refusal.
mod pages;
// /metrics by Prometheus' conventions: promtool, OpenMetrics, rules, referrals, process.
mod metrics;
// deploy/: the alert rules' unit tests, and every dashboard query against a real Prometheus.
mod deploy;
// The policy's codes through the running edge: 1005 1006 1009 1010 1011 1015 1020 1026.
mod policy;
// One truth on every route: the proxy and Markdown routes over HTTP/1.1 and HTTP/2, what the
// origin receives, what the client receives, each origin failure's code in every format.
mod routes;
// Proxying: bodies, statuses and headers both ways; 1001 for unknown hosts; connection reuse.
mod proxy;
// TLS listeners: HTTP/1.1 and HTTP/2 by ALPN, 1013 on a Host/SNI mismatch.
mod tls;
// Certificates reloaded without dropping connections, kept when broken, chosen by SNI; the
// zone's redirect to HTTPS and HSTS.
mod certs;
// Explaining decisions: `signpost trace` (text and JSON) and `signpost test`.
mod trace;
// Bots verified from outside the policy: reverse DNS against dnsmasq, a published list over HTTPS.
mod verified_bots;
// HTTP/2 and TLS abuse: premature resets, control floods, zero-window readers, silent handshakes.
mod h2_abuse;
// What an idle keep-alive connection costs the edge, and that it still answers.
mod idle_memory;
