//! The certificates the TLS listeners serve, chosen per handshake by the client's SNI and
//! swapped whole on reload.
//!
//! Every TLS listener gets a [`ListenerCerts`] resolver at start; the resolver reads the
//! [`Certificates`]' current set on each handshake, so a reload reaches new connections at once
//! and leaves established ones alone (their keys were agreed at their own handshake). A reload
//! loads every file again; a pair that fails to load keeps the pair it replaces serving and
//! logs the file and the reason.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use signpost_policy::{CompiledPolicy, PolicyError, TlsFiles};

/// The longest SNI name looked up (DNS names are at most 253 characters).
const MAX_SNI: usize = 253;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertLabel {
    /// `listener <addr>` for a listener's own certificate, `zone <name>` for a zone's: one
    /// series per TLS listener and per zone with a certificate, bounded by the policy.
    cert: String,
}

/// The served certificates' expiry and the reloads that could not load one.
#[derive(Clone)]
pub struct CertMetrics {
    not_after: Family<CertLabel, Gauge>,
    load_failures: Family<CertLabel, Counter>,
}

impl CertMetrics {
    pub fn register(registry: &mut Registry) -> CertMetrics {
        let not_after = Family::<CertLabel, Gauge>::default();
        registry.register(
            "tls_certificate_not_after_seconds",
            "When each served certificate expires (its notAfter), in seconds since the Unix epoch",
            not_after.clone(),
        );
        let load_failures = Family::<CertLabel, Counter>::default();
        registry.register(
            "tls_certificate_load_failures",
            "Reloads that could not load a certificate and kept the previous one serving",
            load_failures.clone(),
        );
        CertMetrics {
            not_after,
            load_failures,
        }
    }
}

/// One certificate chain with its key, as served.
struct Served {
    key: Arc<CertifiedKey>,
    /// The leaf's notAfter, seconds since the Unix epoch.
    not_after: i64,
}

/// Which zone's certificate a name gets, as the policy routes hosts to zones: an exact name
/// before the longest `*.suffix`, before `*`. A zone without a certificate of its own holds
/// `None` (the listener's serves), so that it is not shadowed by a wildcard zone's.
#[derive(Default)]
struct SniRoutes {
    exact: HashMap<String, Option<Arc<Served>>>,
    wildcard: HashMap<String, Option<Arc<Served>>>,
    catch_all: Option<Option<Arc<Served>>>,
}

impl SniRoutes {
    fn insert(&mut self, pattern: &str, served: Option<Arc<Served>>) {
        if pattern == "*" {
            self.catch_all.get_or_insert(served);
        } else if let Some(suffix) = pattern.strip_prefix("*.") {
            self.wildcard.entry(suffix.to_owned()).or_insert(served);
        } else {
            self.exact.entry(pattern.to_owned()).or_insert(served);
        }
    }

    /// The zone certificate for `name`; `None` when the listener's serves.
    fn lookup(&self, name: &str) -> Option<&Arc<Served>> {
        if name.is_empty() || name.len() > MAX_SNI {
            return None;
        }
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        if let Some(found) = self.exact.get(&name) {
            return found.as_ref();
        }
        let mut rest = name.as_str();
        while let Some((_, parent)) = rest.split_once('.') {
            if let Some(found) = self.wildcard.get(parent) {
                return found.as_ref();
            }
            rest = parent;
        }
        self.catch_all.as_ref()?.as_ref()
    }
}

/// What the listeners serve now.
#[derive(Default)]
struct CertSet {
    /// Each TLS listener's own certificate, by its address: served when no zone's matches.
    listeners: HashMap<String, Arc<Served>>,
    /// Each zone's certificate, by zone name.
    zones: HashMap<Arc<str>, Arc<Served>>,
    routes: SniRoutes,
}

/// A file's modification time and length, as `--watch` compares them.
type Stamp = Option<(SystemTime, u64)>;

/// Every certificate the edge serves, swapped whole on reload.
pub struct Certificates {
    current: ArcSwap<CertSet>,
    metrics: CertMetrics,
    /// The certificate and key files of the last load with their stamps, for `--watch`.
    stamps: Mutex<Vec<(PathBuf, Stamp)>>,
}

fn stamp(path: &std::path::Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Every certificate pair the policy names, each with its metric label: the TLS listeners' by
/// address, then the zones' by name.
fn named_files(policy: &CompiledPolicy) -> Vec<(Source, &TlsFiles)> {
    let listeners = policy.listeners().iter().filter_map(|l| {
        let files = l.tls.as_ref()?;
        Some((Source::Listener(l.addr.clone()), files))
    });
    let zones = policy.zones().iter().filter_map(|z| {
        let files = z.tls.files.as_ref()?;
        Some((Source::Zone(z.name.clone()), files))
    });
    listeners.chain(zones).collect()
}

#[derive(Clone)]
enum Source {
    Listener(String),
    Zone(Arc<str>),
}

impl Source {
    fn label(&self) -> CertLabel {
        let cert = match self {
            Source::Listener(addr) => format!("listener {addr}"),
            Source::Zone(name) => format!("zone {name}"),
        };
        CertLabel { cert }
    }
}

impl Certificates {
    /// Loads every certificate the policy names; any that cannot be loaded is the policy's
    /// error, at the place that names it (the edge does not start without it).
    pub fn load(
        policy: &CompiledPolicy,
        metrics: CertMetrics,
    ) -> Result<Arc<Certificates>, PolicyError> {
        let mut set = CertSet::default();
        for (source, files) in named_files(policy) {
            let served = Arc::new(load_served(files)?);
            set.insert(source, served);
        }
        set.route(policy);
        let certificates = Certificates {
            current: ArcSwap::from_pointee(CertSet::default()),
            metrics,
            stamps: Mutex::new(Vec::new()),
        };
        certificates.publish(policy, set);
        Ok(Arc::new(certificates))
    }

    /// Loads every certificate the policy names again. A pair that fails keeps the one it
    /// replaces serving (a listener's, or the zone's of the same name), and the log says which
    /// file and why; a zone whose first certificate fails is served the listener's.
    pub fn reload(&self, policy: &CompiledPolicy) {
        let previous = self.current.load_full();
        let mut set = CertSet::default();
        for (source, files) in named_files(policy) {
            match load_served(files) {
                Ok(served) => set.insert(source, Arc::new(served)),
                Err(why) => {
                    self.metrics
                        .load_failures
                        .get_or_create(&source.label())
                        .inc();
                    // The problem's first line: the policy's place, the file and the reason
                    // (the rest shows the policy's line, which a log line need not repeat).
                    let why = why.to_string();
                    let why = why.lines().next().unwrap_or_default();
                    let kept = match &source {
                        Source::Listener(addr) => previous.listeners.get(addr),
                        Source::Zone(name) => previous.zones.get(name),
                    };
                    match kept {
                        Some(kept) => {
                            tracing::error!(cert = %files.cert.display(), key = %files.key.display(), reason = why, "certificate not loaded, the previous one keeps serving");
                            set.insert(source, Arc::clone(kept));
                        }
                        None => {
                            tracing::error!(cert = %files.cert.display(), key = %files.key.display(), reason = why, "certificate not loaded, its hosts are served the listener's certificate");
                        }
                    }
                }
            }
        }
        set.route(policy);
        self.publish(policy, set);
        tracing::info!(
            certificates = self.current.load().listeners.len() + self.current.load().zones.len(),
            "certificates reloaded"
        );
    }

    /// Whether a certificate or key file changed since the last load (`--watch`).
    pub fn files_changed(&self) -> bool {
        let stamps = self.stamps.lock().unwrap_or_else(|e| e.into_inner());
        stamps.iter().any(|(path, was)| stamp(path) != *was)
    }

    /// The resolver of the TLS listener at `addr`.
    pub fn resolver(self: &Arc<Self>, addr: &str) -> Arc<ListenerCerts> {
        Arc::new(ListenerCerts {
            certificates: Arc::clone(self),
            addr: addr.to_owned(),
        })
    }

    /// Swaps `set` in, with its expiry series and the stamps of its files.
    fn publish(&self, policy: &CompiledPolicy, set: CertSet) {
        let files = named_files(policy);
        let mut stamps = Vec::with_capacity(files.len() * 2);
        for (_, f) in &files {
            stamps.push((f.cert.clone(), stamp(&f.cert)));
            stamps.push((f.key.clone(), stamp(&f.key)));
        }
        *self.stamps.lock().unwrap_or_else(|e| e.into_inner()) = stamps;
        let previous = self.current.swap(Arc::new(set));
        let current = self.current.load();
        // The series of certificates no longer served go; the others are set anew.
        for addr in previous.listeners.keys() {
            if !current.listeners.contains_key(addr) {
                let label = Source::Listener(addr.clone()).label();
                self.metrics.not_after.remove(&label);
            }
        }
        for name in previous.zones.keys() {
            if !current.zones.contains_key(name) {
                self.metrics
                    .not_after
                    .remove(&Source::Zone(name.clone()).label());
            }
        }
        let served = current
            .listeners
            .iter()
            .map(|(a, s)| (Source::Listener(a.clone()), s))
            .chain(
                current
                    .zones
                    .iter()
                    .map(|(n, s)| (Source::Zone(n.clone()), s)),
            );
        for (source, s) in served {
            self.metrics
                .not_after
                .get_or_create(&source.label())
                .set(s.not_after);
        }
    }
}

impl CertSet {
    fn insert(&mut self, source: Source, served: Arc<Served>) {
        match source {
            Source::Listener(addr) => self.listeners.insert(addr, served),
            Source::Zone(name) => self.zones.insert(name, served),
        };
    }

    /// Routes every zone's hosts to its certificate, or to none (the listener's).
    fn route(&mut self, policy: &CompiledPolicy) {
        for zone in policy.zones() {
            let served = self.zones.get(&zone.name).cloned();
            for host in &zone.hosts {
                self.routes.insert(host, served.clone());
            }
        }
    }
}

/// Reads a chain and its key as the TLS listeners serve them, with the leaf's expiry.
fn load_served(files: &TlsFiles) -> Result<Served, PolicyError> {
    let key = load_files(files)?;
    let leaf = key.cert.first().ok_or_else(|| {
        files.cannot_use_cert(format!("`{}` holds no certificate", files.cert.display()))
    })?;
    let not_after = x509_parser::parse_x509_certificate(leaf)
        .map(|(_, cert)| cert.validity().not_after.timestamp())
        .map_err(|e| {
            files.cannot_use_cert(format!(
                "cannot read the expiry of the certificate in `{}`: {e}",
                files.cert.display()
            ))
        })?;
    Ok(Served {
        key: Arc::new(key),
        not_after,
    })
}

/// Checks a certificate chain and key as the TLS listeners use them (shared by `signpost
/// check` and `signpost run`). A problem is reported at the policy's `cert` or `key`.
pub fn check_files(files: &TlsFiles) -> Result<(), PolicyError> {
    load_files(files).map(drop)
}

/// Loads a certificate chain and key as the TLS listeners serve them: the chain and the key
/// parsed, then the key loaded by the process's crypto provider and checked against the leaf
/// certificate (as rustls would when building a listener's configuration). A problem is
/// reported at the policy's `cert` or `key`, naming the file and the reason.
pub fn load_files(files: &TlsFiles) -> Result<CertifiedKey, PolicyError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let shown = |path: &std::path::Path| path.display().to_string();
    let (Some(cert), Some(key)) = (files.cert.to_str(), files.key.to_str()) else {
        return Err(files.cannot_use_cert("the TLS file paths must be UTF-8".into()));
    };
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            let message = format!("cannot load the TLS certificate `{cert}`: {e}");
            files.cannot_use_cert(message)
        })?;
    if certs.is_empty() {
        return Err(files.cannot_use_cert(format!(
            "cannot load the TLS certificate `{cert}`: it holds no certificate"
        )));
    }
    let private_key = match PrivateKeyDer::from_pem_file(&files.key) {
        Ok(key) => key,
        Err(rustls::pki_types::pem::Error::NoItemsFound) => {
            return Err(files.cannot_use_key(format!(
                "`{key}` holds no PKCS#1, PKCS#8 or SEC1 private key the edge can use with `{}`",
                shown(&files.cert)
            )));
        }
        Err(e) => {
            return Err(
                files.cannot_use_key(format!("cannot load the TLS private key `{key}`: {e}"))
            );
        }
    };
    pingora::tls::install_default_crypto_provider();
    let Some(provider) = rustls::crypto::CryptoProvider::get_default() else {
        return Err(files.cannot_use_key("no TLS crypto provider is installed".into()));
    };
    CertifiedKey::from_der(certs, private_key, provider).map_err(|e| {
        files.cannot_use_key(format!(
            "the TLS private key `{key}` cannot serve the certificate `{cert}`: {e}"
        ))
    })
}

/// One TLS listener's certificate resolver: the zone certificate the SNI names, else the
/// listener's own.
pub struct ListenerCerts {
    certificates: Arc<Certificates>,
    addr: String,
}

impl std::fmt::Debug for ListenerCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerCerts")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl ResolvesServerCert for ListenerCerts {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let set = self.certificates.current.load();
        let served = hello
            .server_name()
            .and_then(|name| set.routes.lookup(name))
            .or_else(|| set.listeners.get(&self.addr))?;
        Some(Arc::clone(&served.key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served() -> Arc<Served> {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["x.test".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        pingora::tls::install_default_crypto_provider();
        let provider = rustls::crypto::CryptoProvider::get_default().unwrap();
        let der = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        let key = CertifiedKey::from_der(vec![cert.der().clone()], der, provider).unwrap();
        Arc::new(Served {
            key: Arc::new(key),
            not_after: 0,
        })
    }

    #[test]
    fn sni_routes_follow_the_zones_precedence() {
        let (shop, wild, all) = (served(), served(), served());
        let mut routes = SniRoutes::default();
        routes.insert("shop.example", Some(shop.clone()));
        routes.insert("plain.example", None);
        routes.insert("*.example", Some(wild.clone()));
        routes.insert("*", Some(all.clone()));
        let is = |name: &str, want: Option<&Arc<Served>>| {
            let got = routes.lookup(name);
            assert_eq!(got.map(Arc::as_ptr), want.map(Arc::as_ptr), "{name}");
        };
        is("shop.example", Some(&shop));
        is("SHOP.Example.", Some(&shop));
        // An exact zone without a certificate is not served the wildcard zone's.
        is("plain.example", None);
        is("a.b.example", Some(&wild));
        is("other.test", Some(&all));
        is("", None);
        is(&"a".repeat(300), None);
    }
}
