//! Country and ASN lookups in MaxMind DB files, memory-mapped.
//!
//! Two record layouts are read: GeoIP2/GeoLite2 (`country.iso_code`, falling back to
//! `registered_country.iso_code`; `autonomous_system_number`) and the flat layout of the
//! ip-location-db files (`country_code`). Loading does not run the reader's strict metadata
//! verification, which rejects files with an empty `description` although their lookups work.

use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

use maxminddb::{Mmap, PathElement, Reader};

/// An ISO 3166-1 alpha-2 country code, upper case.
pub(crate) type Country = [u8; 2];

/// Which layout answered last, so the next lookup tries it first.
const LAYOUT_FLAT: u8 = 0;
const LAYOUT_GEOIP2: u8 = 1;

/// A country database.
pub(crate) struct CountryDb {
    reader: Reader<Mmap>,
    layout: AtomicU8,
}

/// An ASN database.
pub(crate) struct AsnDb {
    reader: Reader<Mmap>,
}

impl std::fmt::Debug for CountryDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountryDb")
            .field("type", &self.reader.metadata().database_type)
            .finish()
    }
}

impl std::fmt::Debug for AsnDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsnDb")
            .field("type", &self.reader.metadata().database_type)
            .finish()
    }
}

fn open(path: &Path) -> Result<Reader<Mmap>, String> {
    // SAFETY: the map is read-only. Replacing a database must be done by renaming a new file
    // over the old one (as MaxMind's updater does), never by rewriting it in place; a reload
    // then maps the new file while requests in flight keep the old mapping. docs/policy.md says so.
    unsafe { Reader::open_mmap(path) }.map_err(|e| format!("cannot open `{}`: {e}", path.display()))
}

impl CountryDb {
    pub(crate) fn open(path: &Path) -> Result<CountryDb, String> {
        Ok(CountryDb {
            reader: open(path)?,
            layout: AtomicU8::new(LAYOUT_FLAT),
        })
    }

    /// The country of `ip`, if the database has one. Errors inside the file count as "unknown".
    pub(crate) fn lookup(&self, ip: IpAddr) -> Option<Country> {
        let found = self.reader.lookup(ip).ok()?;
        if !found.has_data() {
            return None;
        }
        let first = self.layout.load(Ordering::Relaxed);
        for layout in [first, 1 - first] {
            let code = match layout {
                LAYOUT_FLAT => found
                    .decode_path::<&str>(&[PathElement::Key("country_code")])
                    .ok()
                    .flatten(),
                _ => found
                    .decode_path::<&str>(&[
                        PathElement::Key("country"),
                        PathElement::Key("iso_code"),
                    ])
                    .ok()
                    .flatten()
                    .or_else(|| {
                        found
                            .decode_path::<&str>(&[
                                PathElement::Key("registered_country"),
                                PathElement::Key("iso_code"),
                            ])
                            .ok()
                            .flatten()
                    }),
            };
            if let Some(code) = code.and_then(country_code) {
                if layout != first {
                    self.layout.store(layout, Ordering::Relaxed);
                }
                return Some(code);
            }
        }
        None
    }
}

impl AsnDb {
    pub(crate) fn open(path: &Path) -> Result<AsnDb, String> {
        Ok(AsnDb {
            reader: open(path)?,
        })
    }

    /// The autonomous system number of `ip`, if the database has one.
    pub(crate) fn lookup(&self, ip: IpAddr) -> Option<u32> {
        let found = self.reader.lookup(ip).ok()?;
        found
            .decode_path::<u32>(&[PathElement::Key("autonomous_system_number")])
            .ok()
            .flatten()
    }
}

/// Parses a two-letter code into upper-case bytes.
pub(crate) fn country_code(s: &str) -> Option<Country> {
    match s.as_bytes() {
        [a, b] if a.is_ascii_alphabetic() && b.is_ascii_alphabetic() => {
            Some([a.to_ascii_uppercase(), b.to_ascii_uppercase()])
        }
        _ => None,
    }
}

// Keep the layout constants honest.
const _: () = assert!(LAYOUT_FLAT == 0 && LAYOUT_GEOIP2 == 1);
