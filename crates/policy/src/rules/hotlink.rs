//! Phase: hotlink protection (1011). A protected file asked for from a foreign page is refused.

use std::ops::ControlFlow;
use std::sync::Arc;

use super::common::{RuleIds, refuse, sp};
use crate::Code;
use crate::decision::Decision;
use crate::error::{Diagnostics, ProblemKind};
use crate::expr::Cx;
use crate::file::PolicyFile;
use crate::host::{HostPattern, HostTable};
use crate::trace::{TraceStep, Tracer};

#[derive(Debug)]
pub(crate) struct HotlinkSpec {
    id: Arc<str>,
    /// Lowercase, without duplicates; a few, so a scan is cheaper than hashing.
    extensions: Vec<String>,
    allowed: HostTable,
}

/// Checks `[hotlink]`.
pub(super) fn validate(
    file: &PolicyFile,
    d: &mut Diagnostics<'_>,
    ids: &mut RuleIds,
) -> Option<HotlinkSpec> {
    if let Some(h) = &file.hotlink {
        let h = h.get_ref();
        let id = match &h.id {
            Some(id) => ids.check(d, id),
            None => Arc::from("hotlink"),
        };
        let mut extensions = Vec::new();
        for e in h.extensions.get_ref() {
            let ext = e
                .get_ref()
                .trim()
                .trim_start_matches('.')
                .to_ascii_lowercase();
            if ext.is_empty() || !ext.bytes().all(|b| b.is_ascii_alphanumeric()) {
                d.at(
                    ProblemKind::Invalid,
                    sp(e),
                    "an extension is letters and digits, like \"png\"",
                );
            } else if !extensions.contains(&ext) {
                extensions.push(ext);
            }
        }
        let mut allowed = HostTable::default();
        for r in &h.allowed_referers {
            match HostPattern::parse(r.get_ref()) {
                Ok(p) => {
                    allowed.insert(&p, 0);
                }
                Err(why) => d.at(ProblemKind::Invalid, sp(r), why),
            }
        }
        return Some(HotlinkSpec {
            id,
            extensions,
            allowed,
        });
    }
    None
}

impl HotlinkSpec {
    /// The rule id (`hotlink` unless the policy names it).
    pub(super) fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// `zone_hosts`: the serving zone's own names, whose pages may embed anything.
    pub(crate) fn check<T: Tracer>(
        &self,
        cx: &Cx<'_>,
        zone_hosts: Option<&HostTable>,
        decision: &mut Decision,
        t: &mut T,
    ) -> ControlFlow<()> {
        let hotlink = self.is_hotlink(cx, zone_hosts);
        t.rule(|| self.step(cx, zone_hosts, hotlink));
        if hotlink {
            return refuse(decision, Code::HOTLINKING_DENIED, Some(self.id.clone()));
        }
        ControlFlow::Continue(())
    }

    /// The check as a trace step, with the reason it gave.
    fn step(&self, cx: &Cx<'_>, zone_hosts: Option<&HostTable>, hotlink: bool) -> TraceStep {
        let referer = cx.header(http::header::REFERER);
        let ext = path_extension(cx.path());
        let host = referer_host(referer.trim());
        let description = match &ext {
            None => "the path has no file extension".to_owned(),
            Some(ext)
                if ext.len() > 16
                    || !self.extensions.iter().any(|e| e.eq_ignore_ascii_case(ext)) =>
            {
                format!("the extension `{ext}` is not listed")
            }
            Some(_) if referer.trim().is_empty() => {
                "no Referer: a direct request is never a hotlink".to_owned()
            }
            Some(_) if zone_hosts.is_some_and(|t| t.lookup(host).is_some()) => {
                "the Referer is a page of this zone".to_owned()
            }
            Some(_) if self.allowed.lookup(host).is_some() => {
                "the Referer's host is allowed".to_owned()
            }
            Some(_) => "a listed file type requested from a foreign page".to_owned(),
        };
        TraceStep {
            expression: Some(format!(
                "http.request.uri.path extension in {{{}}} and http.referer from another site",
                self.extensions.join(" ")
            )),
            ..TraceStep::rule(&self.id, hotlink, description)
                .action("block")
                .field("http.request.uri.path", cx.path())
                .field("http.referer", referer.into_owned())
        }
    }

    fn is_hotlink(&self, cx: &Cx<'_>, zone_hosts: Option<&HostTable>) -> bool {
        let Some(ext) = path_extension(cx.path()) else {
            return false;
        };
        if ext.len() > 16 || !self.extensions.iter().any(|e| e.eq_ignore_ascii_case(&ext)) {
            return false;
        }
        let referer = cx.header(http::header::REFERER);
        let referer = referer.trim();
        if referer.is_empty() {
            // No Referer: a direct visit or a privacy setting, not evidence of hotlinking.
            return false;
        }
        let host = referer_host(referer);
        let local = zone_hosts.is_some_and(|t| t.lookup(host).is_some());
        !local && self.allowed.lookup(host).is_none()
    }
}

/// The extension of a path's file name as the origin will see it: the last segment, without
/// `;params` (`/a.png;jsessionid=1`), percent-decoded (`/a%2epng`). Borrowed unless the segment
/// holds an escape.
fn path_extension(path: &str) -> Option<std::borrow::Cow<'_, str>> {
    use std::borrow::Cow;
    fn extension(name: &str) -> Option<&str> {
        name.rsplit_once('.').map(|(_, ext)| ext)
    }
    let name = file_name(path);
    if !name.contains('%') {
        // Nothing to decode (the usual case): no pass over the name to look for escapes.
        return extension(name).map(Cow::Borrowed);
    }
    match percent_encoding::percent_decode_str(name).decode_utf8_lossy() {
        Cow::Borrowed(name) => extension(name).map(Cow::Borrowed),
        // An escaped `/` or `;` ends up in the name: take the file name again.
        Cow::Owned(name) => extension(file_name(&name)).map(|e| Cow::Owned(e.to_owned())),
    }
}

/// A path's last segment without its `;params`. Byte scans: `/` and `;` are ASCII, so the cuts
/// fall on character boundaries (a string searcher costs more to set up than these short scans).
fn file_name(path: &str) -> &str {
    let start = path.bytes().rposition(|b| b == b'/').map_or(0, |i| i + 1);
    let last = &path[start..];
    let end = last.bytes().position(|b| b == b';').unwrap_or(last.len());
    &last[..end]
}

/// The host of a Referer URL (`https://user@host:port/path` → `host:port`); garbage gives "".
fn referer_host(referer: &str) -> &str {
    let Some((_, rest)) = referer.split_once("://") else {
        return "";
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    authority.rsplit('@').next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_extensions() {
        use std::borrow::Cow;
        let ext = |p| path_extension(p).map(Cow::into_owned);
        assert_eq!(ext("/a/cat.png").as_deref(), Some("png"));
        assert!(matches!(
            path_extension("/a/cat.png"),
            Some(Cow::Borrowed("png"))
        ));
        assert_eq!(ext("/x%2epng").as_deref(), Some("png"));
        assert_eq!(ext("/x%2EPNG").as_deref(), Some("PNG"));
        assert_eq!(ext("/x.png;jsessionid=1").as_deref(), Some("png"));
        assert_eq!(ext("/x.p%6Eg;a=b;c").as_deref(), Some("png"));
        assert_eq!(ext("/x.png%3bjsessionid=1").as_deref(), Some("png"));
        assert_eq!(ext("/dir.png/file"), None);
        assert_eq!(ext("/dir.png;v=1/file"), None);
        assert_eq!(ext("/dir.png%2ffile"), None);
        assert_eq!(ext("/"), None);
    }

    proptest::proptest! {
        /// The byte scans cut where splitting the text at `/` and `;` does, on any text.
        #[test]
        fn file_name_cuts_as_splitting_does(path in "[/;a%.é]{0,12}|\\PC{0,40}") {
            let reference = path.rsplit('/').next().unwrap_or("").split(';').next().unwrap_or("");
            proptest::prop_assert_eq!(file_name(&path), reference);
        }
    }

    #[test]
    fn referer_hosts() {
        assert_eq!(
            referer_host("https://u:p@Img.Example.com:8443/a?b"),
            "Img.Example.com:8443"
        );
        assert_eq!(referer_host("nonsense"), "");
    }
}
