//! TLS listeners: certificates chosen per handshake (`certs`), HTTP/2 by ALPN, and the client's SNI name kept
//! for the Host/SNI comparison (1013).

use std::any::Any;
use std::sync::Arc;

use async_trait::async_trait;
use pingora::listeners::TlsAccept;
use pingora::listeners::tls::TlsSettings;
use pingora::protocols::Digest;
use pingora::protocols::tls::TlsRef;

/// The server name the client sent in its TLS ClientHello, attached to the connection.
pub struct ClientSni(pub String);

struct RecordSni;

#[async_trait]
impl TlsAccept for RecordSni {
    async fn handshake_complete_callback(
        &self,
        tls: &TlsRef,
    ) -> Option<Arc<dyn Any + Send + Sync>> {
        let name = tls.server_name()?;
        Some(Arc::new(ClientSni(name.to_ascii_lowercase())))
    }
}

/// Settings for one TLS listener: its certificates chosen per handshake by `resolver` (the
/// zone's the SNI names, else the listener's own), HTTP/2 and HTTP/1.1 by ALPN.
pub fn listener_settings(
    resolver: Arc<crate::connection::certs::ListenerCerts>,
) -> pingora::Result<TlsSettings> {
    let mut settings = TlsSettings::with_callbacks(Box::new(RecordSni))?;
    settings.set_cert_resolver(resolver);
    settings.enable_h2();
    Ok(settings)
}

/// The SNI name of the connection a request came on, if it came over TLS with one.
pub fn client_sni(digest: Option<&Digest>) -> Option<&str> {
    let ssl = digest?.ssl_digest.as_ref()?;
    ssl.extension.get::<ClientSni>().map(|sni| sni.0.as_str())
}
