//! The languages the pages for people speak, and the choice among them from `Accept-Language`.
//!
//! Agents' JSON and Markdown are not translated: their text is the contract's, in English, for
//! programs to match on. Only the HTML page follows the reader's language.

use crate::negotiate::{parse_qvalue, split_list, trim_ows};

/// A language the pages for people speak.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Language {
    /// English, the default.
    #[default]
    En,
    /// French.
    Fr,
    /// German.
    De,
}

/// The longest `Accept-Language` value read, in bytes; the rest is ignored. A browser sends a
/// few dozen bytes.
pub const MAX_ACCEPT_LANGUAGE: usize = 1024;

/// At most this many language ranges are looked at.
pub const MAX_LANGUAGE_RANGES: usize = 32;

impl Language {
    /// Every language, English first (the default, and the winner of a tie).
    pub const ALL: [Language; 3] = [Language::En, Language::Fr, Language::De];

    /// The BCP 47 tag, for `<html lang>`, `Content-Language` and the policy's `language`.
    pub fn tag(self) -> &'static str {
        match self {
            Language::En => "en",
            Language::Fr => "fr",
            Language::De => "de",
        }
    }

    /// The language a tag names, compared without regard to case (`fr`, `FR`); `None` for
    /// anything else, subtags included (`fr-CA` is not a setting).
    pub fn from_tag(tag: &str) -> Option<Language> {
        Language::ALL
            .into_iter()
            .find(|l| tag.eq_ignore_ascii_case(l.tag()))
    }

    /// The position in [`Language::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The language for an `Accept-Language` value (RFC 9110 section 12.5.4, RFC 4647 basic
    /// filtering on the primary subtag: `fr-CH` asks for French). Each language takes the weight
    /// of the highest range naming it, or of `*` when none does; the highest weight wins, then
    /// the range listed first, then English. `q=0` refuses a language. Nothing acceptable, no
    /// header or junk: English. Reads at most [`MAX_ACCEPT_LANGUAGE`] bytes and
    /// [`MAX_LANGUAGE_RANGES`] ranges; never panics.
    ///
    /// ```
    /// use signpost_problem::Language;
    /// assert_eq!(Language::negotiate(Some(b"fr-CH, fr;q=0.9, en;q=0.8")), Language::Fr);
    /// assert_eq!(Language::negotiate(Some(b"de;q=0.5, en;q=0.4")), Language::De);
    /// assert_eq!(Language::negotiate(Some(b"ja, *;q=0.1")), Language::En);
    /// assert_eq!(Language::negotiate(None), Language::En);
    /// ```
    pub fn negotiate(header: Option<&[u8]>) -> Language {
        let Some(header) = header else {
            return Language::En;
        };
        let header = header.get(..MAX_ACCEPT_LANGUAGE).unwrap_or(header);
        // Per language: (weight in thousandths, index of the range that gave it).
        let mut named: [Option<(u16, usize)>; 3] = [None; 3];
        let mut any: Option<(u16, usize)> = None;
        for (index, range) in split_list(header).take(MAX_LANGUAGE_RANGES).enumerate() {
            let mut parts = range.split(|&b| b == b';');
            let tag = trim_ows(parts.next().unwrap_or_default());
            let mut weight = Some(1000);
            for param in parts {
                let param = trim_ows(param);
                if let Some(q) = param
                    .strip_prefix(b"q=")
                    .or_else(|| param.strip_prefix(b"Q="))
                {
                    weight = std::str::from_utf8(q).ok().and_then(parse_qvalue);
                }
            }
            // A malformed weight makes the range meaningless.
            let Some(weight) = weight else { continue };
            if tag == b"*" {
                any = any.or(Some((weight, index)));
                continue;
            }
            let primary = tag.split(|&b| b == b'-').next().unwrap_or_default();
            let Some(language) = Language::ALL
                .into_iter()
                .find(|l| primary.eq_ignore_ascii_case(l.tag().as_bytes()))
            else {
                continue;
            };
            let slot = &mut named[language.index()];
            if slot.is_none_or(|(w, _)| weight > w) {
                *slot = Some((weight, index));
            }
        }
        let mut best: Option<(Language, u16, usize)> = None;
        for language in Language::ALL {
            let Some((weight, index)) = named[language.index()].or(any) else {
                continue;
            };
            if weight == 0 {
                continue;
            }
            if best.is_none_or(|(_, w, i)| weight > w || (weight == w && index < i)) {
                best = Some((language, weight, index));
            }
        }
        best.map_or(Language::En, |(language, ..)| language)
    }
}

impl std::fmt::Display for Language {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.tag())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn n(header: &str) -> Language {
        Language::negotiate(Some(header.as_bytes()))
    }

    #[test]
    fn browsers_headers() {
        assert_eq!(n("en-US,en;q=0.9"), Language::En);
        assert_eq!(n("fr-FR,fr;q=0.9,en-US;q=0.8,en;q=0.7"), Language::Fr);
        assert_eq!(n("de-DE,de;q=0.9,en;q=0.8"), Language::De);
        assert_eq!(n("de-AT"), Language::De);
        assert_eq!(n("fr-CA, en;q=0.5"), Language::Fr);
        assert_eq!(n("ja,zh-CN;q=0.8"), Language::En, "nothing shipped");
        assert_eq!(n(""), Language::En);
    }

    #[test]
    fn weights_order_and_refusals() {
        assert_eq!(n("en;q=0.5, de"), Language::De);
        assert_eq!(n("fr, de"), Language::Fr, "equal weights: the first listed");
        assert_eq!(n("de;q=0.8, fr;q=0.8"), Language::De);
        assert_eq!(n("fr;q=0, de;q=0.1"), Language::De);
        assert_eq!(
            n("en;q=0, fr;q=0, de;q=0"),
            Language::En,
            "all refused: the default"
        );
        assert_eq!(n("fr-CH;q=0.2, fr;q=0.9, de;q=0.5"), Language::Fr);
        assert_eq!(n("*, fr;q=0.5"), Language::En, "`*` ranks the others first");
        assert_eq!(
            n("en;q=0, *;q=0.5"),
            Language::Fr,
            "`*` covers what is not named"
        );
        assert_eq!(n("FR ; Q=1, en;q=0.9"), Language::Fr, "case and whitespace");
        assert_eq!(
            n("fr;q=2, de;q=0.1"),
            Language::De,
            "a bad weight drops its range"
        );
        assert_eq!(n("fr;q=abc"), Language::En);
        assert_eq!(
            n("french, deutsch"),
            Language::En,
            "whole primary subtags only"
        );
    }

    #[test]
    fn hostile_headers_stay_bounded() {
        let long = "xx, ".repeat(10_000) + "fr";
        assert_eq!(n(&long), Language::En, "ranges past the cap are not read");
        let mut bytes = vec![0xffu8; 4096];
        bytes.extend_from_slice(b", de");
        assert_eq!(Language::negotiate(Some(&bytes)), Language::En);
    }

    #[test]
    fn tags() {
        for l in Language::ALL {
            assert_eq!(Language::from_tag(l.tag()), Some(l));
            assert_eq!(Language::from_tag(&l.tag().to_ascii_uppercase()), Some(l));
            assert_eq!(Language::ALL[l.index()], l);
        }
        assert_eq!(Language::from_tag("fr-CA"), None);
        assert_eq!(Language::from_tag(""), None);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = Language::negotiate(Some(&bytes));
        }

        #[test]
        fn arbitrary_lists_never_panic(s in r#"([a-zA-Z*;=q0-9. ,\t-]|fr|de|en){0,64}"#) {
            let _ = Language::negotiate(Some(s.as_bytes()));
        }
    }
}
