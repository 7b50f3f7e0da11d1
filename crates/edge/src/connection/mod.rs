//! What one connection and one client may hold: the per-client connection cap and handshake
//! deadline, the HTTP/2 guards, the requests in flight to origins, and the TLS listeners with
//! the certificates they serve.

pub(crate) mod certs;
pub(crate) mod conncap;
pub(crate) mod h2guard;
pub(crate) mod inflight;
pub(crate) mod tls;
