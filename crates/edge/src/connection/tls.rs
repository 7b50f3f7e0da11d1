//! TLS listeners: certificates from the policy, HTTP/2 by ALPN, and the client's SNI name kept
//! for the Host/SNI comparison (1013).

use std::any::Any;
use std::sync::Arc;

use async_trait::async_trait;
use pingora::listeners::TlsAccept;
use pingora::listeners::tls::TlsSettings;
use pingora::protocols::Digest;
use pingora::protocols::tls::TlsRef;
use signpost_policy::{PolicyError, TlsFiles};

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

/// Settings for one TLS listener: the certificate chain and key, HTTP/2 and HTTP/1.1 by ALPN.
pub fn listener_settings(cert: &str, key: &str) -> pingora::Result<TlsSettings> {
    let mut settings = TlsSettings::with_callbacks(Box::new(RecordSni))?;
    settings.set_certificate_chain_file(cert)?;
    settings.set_private_key_file(key)?;
    settings.enable_h2();
    Ok(settings)
}

/// Checks a TLS listener's files as `run` uses them, before it serves: the certificate chain
/// and the key parsed, then loaded as Pingora loads them, and the key checked against the
/// certificate as the listener's rustls configuration is built (where Pingora would otherwise
/// panic in its listener's thread and leave the edge running without that listener). Shared by
/// `signpost check` and `signpost run`; a problem is reported at the policy's `cert` or `key`.
pub fn check_files(files: &TlsFiles) -> Result<(), PolicyError> {
    use pingora::tls::{ServerConfig, version};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let shown = |path: &std::path::Path| path.display().to_string();
    let (Some(cert), Some(key)) = (files.cert.to_str(), files.key.to_str()) else {
        return Err(files.cannot_use_cert("the TLS file paths must be UTF-8".into()));
    };
    CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            let message = format!("cannot load the TLS certificate `{cert}`: {e}");
            files.cannot_use_cert(message)
        })?;
    PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        files.cannot_use_key(format!("cannot load the TLS private key `{key}`: {e}"))
    })?;
    let (certs, private_key) = match pingora::tls::load_certs_and_key_files(cert, key) {
        Ok(Some(pair)) => pair,
        Ok(None) => {
            return Err(files.cannot_use_key(format!(
                "`{key}` holds no PKCS#1, PKCS#8 or SEC1 private key the edge can use with `{}`",
                shown(&files.cert)
            )));
        }
        Err(e) => return Err(files.cannot_use_cert(format!("cannot load `{cert}`: {e}"))),
    };
    pingora::tls::install_default_crypto_provider();
    ServerConfig::builder_with_protocol_versions(&[&version::TLS12, &version::TLS13])
        .with_no_client_auth()
        .with_single_cert(certs, private_key)
        .map_err(|e| {
            files.cannot_use_key(format!(
                "the TLS private key `{key}` cannot serve the certificate `{cert}`: {e}"
            ))
        })?;
    Ok(())
}

/// The SNI name of the connection a request came on, if it came over TLS with one.
pub fn client_sni(digest: Option<&Digest>) -> Option<&str> {
    let ssl = digest?.ssl_digest.as_ref()?;
    ssl.extension.get::<ClientSni>().map(|sni| sni.0.as_str())
}
