//! signpost's edge errors: the catalog of codes, `Accept` negotiation, and one problem rendered
//! as HTML for people or as RFC 9457 JSON / Markdown-with-YAML-frontmatter for agents.
//!
//! A key design decision is that there is **one problem value and three renderings**: every
//! fact lives once in the compiled-in catalog (`catalog.toml`), a [`Problem`] adds only what the
//! request contributes (ray id, time, host, a rate limiter's wait), and each renderer is a pure
//! function of the two. So the formats cannot disagree on meaning, the `Retry-After` header and
//! body always match, and everything taken from the request is escaped by the renderer that
//! owns the format (a JSON string writer held to serde_json's output, a YAML-safe scalar writer,
//! askama). The crate does no I/O and knows nothing of Pingora, so it is tested and benched on
//! plain values.
//!
//! The HTML page is written for a person, not an agent: what happened and what a visitor can do,
//! in the [`Language`] a [`Visitor`] reads (English, French or German, from `Accept-Language` or
//! fixed by the zone), with the cause of a refusal when the edge knows it ([`Reason`]). The
//! agents' JSON and Markdown do not depend on the visitor.
//!
//! ```
//! use std::time::{Duration, UNIX_EPOCH};
//! use signpost_problem::{lookup, negotiate, render, Branding, Code, Format, Problem};
//!
//! let format = negotiate(Some(b"text/markdown, */*"));
//! assert_eq!(format, Format::Markdown);
//!
//! let problem = Problem {
//!     entry: lookup(Code::RATE_LIMITED).expect("1015 is in the catalog"),
//!     ray_id: "9d99a39dc992d168",
//!     timestamp: UNIX_EPOCH + Duration::from_secs(1_773_054_688),
//!     zone: "example.com",
//!     retry_after: None,
//! };
//! let rendered = render(&problem, format, &Branding::default());
//! assert_eq!(rendered.status, 429);
//! assert_eq!(rendered.retry_after, Some(30));
//! let body = std::str::from_utf8(&rendered.body)?;
//! assert!(body.starts_with("---\nerror_code: 1015\nerror_name: rate_limited\n"));
//! assert!(body.contains("timestamp: \"2026-03-09T11:11:28Z\"\nzone: example.com\n"));
//!
//! let headers = rendered.headers(problem.ray_id);
//! assert!(headers.contains(&("retry-after", "30".to_string())));
//! assert!(headers.contains(&("content-type", "text/markdown; charset=utf-8".to_string())));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod catalog;
mod code;
mod custom;
mod html;
mod json;
mod language;
mod markdown;
mod negotiate;
mod people;
mod problem;
mod render;
mod tokens;

pub use catalog::{
    CatalogEntry, Category, catalog, lookup, lookup_path_code, not_found, origin_entry,
};
pub use code::Code;
pub use custom::{
    Custom, FIXED_MEMBERS, HEADER_MEMBERS, MAX_ASSET_BYTES, MAX_INLINE_CONTENT, TEXT_MEMBERS,
    check_json_content,
};
pub use language::{Language, MAX_ACCEPT_LANGUAGE, MAX_LANGUAGE_RANGES};
pub use markdown::yaml_scalar;
pub use negotiate::{Format, MAX_ACCEPT_ENTRIES, negotiate, negotiate_offering_text};
pub use people::{Reason, Visitor};
pub use problem::{Branding, CACHE_CONTROL, Problem, RAY_ID_HEADER};
pub use render::{DEFAULT_RETRY_AFTER, Rendered, render, render_custom, render_for_visitor};
pub use tokens::{
    Escape, TOKENS, TokenValues, escape_into, expand, markdown_text, token_list, unknown_tokens,
};
