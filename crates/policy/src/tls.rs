//! `[zone.tls]`: a zone's own certificate (served to clients whose SNI names one of its hosts),
//! its redirect of plain HTTP to HTTPS, and its `Strict-Transport-Security` header.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_spanned::Spanned;

use crate::error::{Diagnostics, ProblemKind};

/// The HTTPS port a redirect names when the zone does not say (and leaves out of the URL).
pub const DEFAULT_HTTPS_PORT: u16 = 443;

/// The shortest `max_age` the HSTS preload list accepts (hstspreload.org: one year).
pub const PRELOAD_MIN_MAX_AGE: Duration = Duration::from_secs(31_536_000);

/// A zone's `[zone.tls]`, validated. The default: no certificate of its own (the listener's
/// serves), no redirect, no HSTS.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneTls {
    /// The zone's certificate chain and key, served when the client's SNI names one of the
    /// zone's hosts; `None`: the TLS listener's own certificate serves.
    pub files: Option<TlsFiles>,
    /// Where plain-HTTP requests are sent instead, when they are.
    pub redirect: Option<HttpsRedirect>,
    /// The `Strict-Transport-Security` header of the zone's HTTPS answers.
    pub hsts: Option<Hsts>,
}

/// `redirect_https = true`: plain-HTTP requests (but ACME's HTTP-01 path) are answered with a
/// redirect to the same host and target over HTTPS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpsRedirect {
    /// The port the `Location` names (left out when 443).
    pub port: u16,
}

/// `[zone.tls.hsts]`: RFC 6797's header, sent on HTTPS answers only (§7.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hsts {
    /// `max-age`, whole seconds.
    pub max_age: u64,
    /// `includeSubDomains`.
    pub include_subdomains: bool,
    /// `preload`.
    pub preload: bool,
    /// The header's value, written once here.
    pub value: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ZoneTlsFile {
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
    pub redirect_https: Option<bool>,
    pub https_port: Option<Spanned<i64>>,
    pub hsts: Option<Spanned<HstsFile>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HstsFile {
    pub max_age: Spanned<String>,
    pub include_subdomains: Option<bool>,
    pub preload: Option<Spanned<bool>>,
}

/// PEM files for a TLS listener, resolved against the policy file's directory.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// Certificate chain (PEM).
    pub cert: PathBuf,
    /// Private key (PEM).
    pub key: PathBuf,
    /// Where `cert` and `key` are written: the place of a problem with their contents that
    /// only the edge's TLS library sees (a certificate it cannot parse, a key that does not go
    /// with it), so that `check` and `run` report it at the key as they do every other.
    cert_key: crate::error::Problem,
    key_key: crate::error::Problem,
}

/// The same files wherever the policy writes them.
impl PartialEq for TlsFiles {
    fn eq(&self, other: &TlsFiles) -> bool {
        (&self.cert, &self.key) == (&other.cert, &other.key)
    }
}

impl Eq for TlsFiles {}

impl TlsFiles {
    /// A problem with the certificate file, at its key in the policy.
    pub fn cannot_use_cert(&self, message: String) -> crate::PolicyError {
        crate::PolicyError::single(crate::error::Problem {
            message,
            ..self.cert_key.clone()
        })
    }

    /// A problem with the private key file, at its key in the policy.
    pub fn cannot_use_key(&self, message: String) -> crate::PolicyError {
        crate::PolicyError::single(crate::error::Problem {
            message,
            ..self.key_key.clone()
        })
    }
}

/// A certificate chain and key as a listener or a zone names them: resolved against the policy
/// file's directory, each checked to hold its PEM block, each keeping its place in the policy.
pub(crate) fn tls_files(
    d: &mut Diagnostics<'_>,
    cert: &Spanned<String>,
    key: &Spanned<String>,
    base_dir: &Path,
) -> TlsFiles {
    let files = TlsFiles {
        cert: base_dir.join(cert.get_ref()),
        key: base_dir.join(key.get_ref()),
        cert_key: d.problem_at(ProblemKind::Read, cert.span(), ""),
        key_key: d.problem_at(ProblemKind::Read, key.span(), ""),
    };
    check_pem(d, cert, &files.cert, PemKind::Certificate);
    check_pem(d, key, &files.key, PemKind::PrivateKey);
    files
}

/// What a TLS listener's PEM file must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PemKind {
    Certificate,
    PrivateKey,
}

/// Checks that a listener's certificate or key file can be read and holds the right PEM block,
/// so that `check` fails where `run` would. `value` is the path as written, `path` resolved.
fn check_pem(d: &mut Diagnostics<'_>, value: &Spanned<String>, path: &Path, kind: PemKind) {
    let what = match kind {
        PemKind::Certificate => "TLS certificate",
        PemKind::PrivateKey => "TLS private key",
    };
    let hint = || {
        Path::new(value.get_ref())
            .is_relative()
            .then(|| "relative paths are resolved against the policy file's directory".to_owned())
    };
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => {
            d.at_with_hint(
                ProblemKind::Read,
                value.span(),
                format!("cannot read {what} `{}`: {e}", value.get_ref()),
                hint(),
            );
            return;
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    let found = match kind {
        PemKind::Certificate => text.contains("-----BEGIN CERTIFICATE-----"),
        PemKind::PrivateKey => text.lines().any(|line| {
            let line = line.trim();
            line.starts_with("-----BEGIN ") && line.ends_with("PRIVATE KEY-----")
        }),
    };
    if !found {
        let block = match kind {
            PemKind::Certificate => "`-----BEGIN CERTIFICATE-----`",
            PemKind::PrivateKey => "`-----BEGIN ... PRIVATE KEY-----`",
        };
        d.at(
            ProblemKind::Invalid,
            value.span(),
            format!("{what} `{}` holds no PEM {block} block", value.get_ref()),
        );
    }
}

/// Checks `[zone.tls]`; the default when the zone has none.
pub(crate) fn compile(
    d: &mut Diagnostics<'_>,
    file: Option<&ZoneTlsFile>,
    base_dir: &Path,
) -> ZoneTls {
    let Some(file) = file else {
        return ZoneTls::default();
    };
    let files = match (&file.cert, &file.key) {
        (Some(cert), Some(key)) => Some(tls_files(d, cert, key, base_dir)),
        (None, None) => None,
        (Some(one), None) | (None, Some(one)) => {
            let (given, missing) = if file.cert.is_some() {
                ("cert", "key")
            } else {
                ("key", "cert")
            };
            d.at(
                ProblemKind::Invalid,
                one.span(),
                format!("`{given}` needs `{missing}` beside it: a zone's certificate is a chain and its private key"),
            );
            None
        }
    };
    let port = match &file.https_port {
        None => DEFAULT_HTTPS_PORT,
        Some(p) => match u16::try_from(*p.get_ref()) {
            Ok(port) if port > 0 => port,
            _ => {
                d.at(
                    ProblemKind::Invalid,
                    p.span(),
                    "`https_port` must be a port from 1 to 65535",
                );
                DEFAULT_HTTPS_PORT
            }
        },
    };
    if file.https_port.is_some() && file.redirect_https != Some(true) {
        let at = file.https_port.as_ref().map_or(0..0, Spanned::span);
        d.at(
            ProblemKind::Invalid,
            at,
            "`https_port` is where `redirect_https` sends clients; set `redirect_https = true` or remove it",
        );
    }
    let redirect = (file.redirect_https == Some(true)).then_some(HttpsRedirect { port });
    let hsts = file.hsts.as_ref().and_then(|h| hsts(d, h));
    ZoneTls {
        files,
        redirect,
        hsts,
    }
}

fn hsts(d: &mut Diagnostics<'_>, file: &Spanned<HstsFile>) -> Option<Hsts> {
    let h = file.get_ref();
    let max_age = match humantime::parse_duration(h.max_age.get_ref().trim()) {
        Ok(age) => age.as_secs(),
        Err(e) => {
            d.at(
                ProblemKind::Invalid,
                h.max_age.span(),
                format!(
                    "`{}` is not a duration ({e}); write e.g. \"365d\" or \"0s\" (which tells browsers to forget the host)",
                    h.max_age.get_ref()
                ),
            );
            return None;
        }
    };
    let include_subdomains = h.include_subdomains.unwrap_or(false);
    let preload = h.preload.as_ref().is_some_and(|p| *p.get_ref());
    if let Some(p) = h.preload.as_ref().filter(|p| *p.get_ref()) {
        // The preload list's own conditions (hstspreload.org): a site asking for it without
        // them is refused there, and would believe itself preloaded.
        if !include_subdomains || max_age < PRELOAD_MIN_MAX_AGE.as_secs() {
            d.at(
                ProblemKind::Invalid,
                p.span(),
                "`preload` needs `include_subdomains = true` and a `max_age` of at least a year (\"365d\"), as the preload list requires",
            );
            return None;
        }
    }
    let mut value = format!("max-age={max_age}");
    if include_subdomains {
        value.push_str("; includeSubDomains");
    }
    if preload {
        value.push_str("; preload");
    }
    Some(Hsts {
        max_age,
        include_subdomains,
        preload,
        value,
    })
}

#[cfg(test)]
mod tests {
    use crate::CompiledPolicy;

    fn zone_tls(extra: &str) -> Result<crate::ZoneTls, String> {
        let text = format!(
            "[[zone]]\nname = \"a\"\nhosts = [\"a.test\"]\norigin = \"127.0.0.1:1\"\n{extra}"
        );
        CompiledPolicy::from_toml(&text, "policy.toml", std::path::Path::new("."), None)
            .map(|p| p.zones()[0].tls.clone())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn no_section_is_no_redirect_and_no_hsts() {
        assert_eq!(zone_tls("").unwrap(), crate::ZoneTls::default());
    }

    #[test]
    fn redirect_and_hsts_are_read() {
        let tls = zone_tls(
            "[zone.tls]\nredirect_https = true\nhttps_port = 8443\n[zone.tls.hsts]\nmax_age = \"365d\"\ninclude_subdomains = true\npreload = true\n",
        )
        .unwrap();
        assert_eq!(tls.redirect.unwrap().port, 8443);
        let hsts = tls.hsts.unwrap();
        assert_eq!(hsts.value, "max-age=31536000; includeSubDomains; preload");
    }

    #[test]
    fn preload_without_its_conditions_is_refused_at_its_place() {
        let err = zone_tls("[zone.tls.hsts]\nmax_age = \"30d\"\npreload = true\n").unwrap_err();
        assert!(err.contains("policy.toml:7:11"), "{err}");
        assert!(err.contains("include_subdomains"), "{err}");
    }

    #[test]
    fn a_bad_max_age_and_a_lone_cert_are_placed() {
        let err = zone_tls("[zone.tls.hsts]\nmax_age = \"forever\"\n").unwrap_err();
        assert!(err.contains("policy.toml:6:11"), "{err}");
        let err = zone_tls("[zone.tls]\ncert = \"a.pem\"\n").unwrap_err();
        assert!(err.contains("policy.toml:6:8"), "{err}");
        assert!(err.contains("needs `key`"), "{err}");
        let err = zone_tls("[zone.tls]\nhttps_port = 70000\nredirect_https = true\n").unwrap_err();
        assert!(err.contains("policy.toml:6:14"), "{err}");
    }
}
