//! Who is asking: the `signpost-identify` crate (key directories, published IP lists, reverse
//! DNS, bounded outside fetches), seen by the edge under its old name.

pub use signpost_identify::{Identifier, IdentityMetrics, add_origin_header};
