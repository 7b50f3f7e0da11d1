//! End-to-end tests: the real `signpost` binary, real origins on loopback, real HTTP clients and
//! real parsers (serde_json, a YAML parser on the frontmatter, an HTML parser).

mod support;

// The error contract of `/cdn-cgi/error/<code>` in every format, and 404 for unknown codes.
mod contract;
// Hostile Host values that must still give valid JSON, YAML and escaped HTML.
mod hostile;
// Origins that refuse, hang, close or babble: 521, 524, 520, 1016.
mod origin_failures;
// Proxying: bodies, statuses and headers both ways; 1001 for unknown hosts; connection reuse.
mod proxy;
