//! What the edge reads of a request before any decision: the client's facts (peer, TLS, Host),
//! the ray id, the head's limits, the zone's redirect to HTTPS, and the answer to a request Pingora could not read.

pub(crate) mod facts;
pub(crate) mod https;
pub(crate) mod limits;
pub(crate) mod malformed;
pub(crate) mod ray;
