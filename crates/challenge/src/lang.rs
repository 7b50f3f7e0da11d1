//! The page's words, in every language the project ships, from one table; and the choice of
//! language from `Accept-Language`.

/// A language the challenge page speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lang {
    /// English, the default.
    En,
    /// French.
    Fr,
    /// German.
    De,
}

/// The longest `Accept-Language` value read, and the most ranges looked at: a browser sends a
/// few dozen bytes.
const MAX_ACCEPT_LANGUAGE: usize = 1024;
const MAX_RANGES: usize = 32;

impl Lang {
    /// Every language, in the order of the table.
    pub const ALL: [Lang; 3] = [Lang::En, Lang::Fr, Lang::De];

    /// The BCP 47 tag, for `<html lang>` and `Content-Language`.
    pub fn tag(self) -> &'static str {
        self.strings().tag
    }

    /// The page's words in this language.
    pub fn strings(self) -> &'static Strings {
        match self {
            Lang::En => &STRINGS[0],
            Lang::Fr => &STRINGS[1],
            Lang::De => &STRINGS[2],
        }
    }

    fn from_primary(primary: &[u8]) -> Option<Lang> {
        Lang::ALL
            .into_iter()
            .find(|l| primary.eq_ignore_ascii_case(l.tag().as_bytes()))
    }

    /// The language for an `Accept-Language` value (RFC 9110 12.5.4): the shipped language with
    /// the highest weight, matched on the primary subtag (`fr-CH` is French); among equal
    /// weights, the first listed; `q=0` refuses a language; `*` or nothing shipped: English.
    /// Reads at most 1 KiB and 32 ranges; never panics.
    pub fn from_accept_language(header: Option<&[u8]>) -> Lang {
        let Some(header) = header else {
            return Lang::En;
        };
        let header = header.get(..MAX_ACCEPT_LANGUAGE).unwrap_or(header);
        let mut best: Option<(Lang, u16)> = None;
        for range in header.split(|&b| b == b',').take(MAX_RANGES) {
            let mut parts = range.split(|&b| b == b';');
            let tag = parts.next().unwrap_or_default().trim_ascii();
            let primary = tag.split(|&b| b == b'-').next().unwrap_or_default();
            let Some(lang) = Lang::from_primary(primary) else {
                continue;
            };
            let weight = parts
                .find_map(|p| {
                    let p = p.trim_ascii();
                    p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q="))
                })
                .map_or(Some(1000), qvalue);
            let Some(weight) = weight else { continue };
            if weight > 0 && best.is_none_or(|(_, w)| weight > w) {
                best = Some((lang, weight));
            }
        }
        best.map_or(Lang::En, |(lang, _)| lang)
    }
}

/// An RFC 9110 qvalue in thousandths: `0`, `0.5`, `1`, `1.000`; `None` when malformed.
fn qvalue(text: &[u8]) -> Option<u16> {
    let (int, frac) = match text.iter().position(|&b| b == b'.') {
        Some(i) => (&text[..i], &text[i + 1..]),
        None => (text, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// The page's words. `{host}`, `{seconds}` and `{n}` are filled in when the page is rendered
/// (`{n}` by the page's script); everything is escaped after filling.
#[derive(Debug)]
pub struct Strings {
    /// The BCP 47 tag.
    pub tag: &'static str,
    /// The document title.
    pub title: &'static str,
    /// The heading: `{host}`.
    pub heading: &'static str,
    /// What is happening and why: `{host}`.
    pub explain: &'static str,
    /// The live region while the work starts.
    pub working: &'static str,
    /// The live region during the work: `{n}` tries so far.
    pub progress: &'static str,
    /// The live region when the answer is found.
    pub solved: &'static str,
    /// The live region when the browser cannot do the work (no Web Workers).
    pub failed: &'static str,
    /// After a request with a body: it was not sent.
    pub resend: &'static str,
    /// With JavaScript off: `{seconds}`.
    pub noscript: &'static str,
    /// When the script cannot work: `{seconds}`.
    pub fallback: &'static str,
    /// The fallback link's text.
    pub continue_link: &'static str,
    /// The ray id's label.
    pub ray: &'static str,
    /// A word to automated clients.
    pub agents: &'static str,
}

/// English, French and German, in [`Lang::ALL`]'s order.
pub static STRINGS: [Strings; 3] = [
    Strings {
        tag: "en",
        title: "One moment, please",
        heading: "Checking your connection to {host}",
        explain: "{host} asks your browser to solve a small puzzle before showing the page. This protects the site from automated scraping. It takes a few seconds, once; then you are taken to the page.",
        working: "Solving the puzzle…",
        progress: "Still working: {n} tries so far.",
        solved: "Done. Taking you to the page…",
        failed: "Your browser could not solve the puzzle on this page.",
        resend: "What you submitted has not been sent. After this check you will be back on the page: please send it again.",
        noscript: "JavaScript is turned off, so this page continues by itself in {seconds} seconds. If it does not, wait that long and follow the link below.",
        fallback: "You can still continue: wait {seconds} seconds, then follow this link.",
        continue_link: "Continue to the site",
        ray: "Ray ID",
        agents: "Not a browser? Automated clients pass by signing their requests with Web Bot Auth.",
    },
    Strings {
        tag: "fr",
        title: "Un instant, s’il vous plaît",
        heading: "Vérification de votre connexion à {host}",
        explain: "{host} demande à votre navigateur de résoudre une petite énigme avant d’afficher la page. Cela protège le site contre la collecte automatisée. Cela prend quelques secondes, une seule fois ; vous serez ensuite conduit à la page.",
        working: "Résolution de l’énigme…",
        progress: "Toujours en cours : {n} essais jusqu’ici.",
        solved: "Terminé. Vous allez être conduit à la page…",
        failed: "Votre navigateur n’a pas pu résoudre l’énigme sur cette page.",
        resend: "Ce que vous avez soumis n’a pas été envoyé. Après cette vérification, vous reviendrez sur la page : veuillez l’envoyer de nouveau.",
        noscript: "JavaScript est désactivé : cette page continuera d’elle-même dans {seconds} secondes. Sinon, attendez ce délai puis suivez le lien ci-dessous.",
        fallback: "Vous pouvez tout de même continuer : attendez {seconds} secondes, puis suivez ce lien.",
        continue_link: "Continuer vers le site",
        ray: "Identifiant Ray",
        agents: "Pas un navigateur ? Les clients automatisés passent en signant leurs requêtes avec Web Bot Auth.",
    },
    Strings {
        tag: "de",
        title: "Einen Moment bitte",
        heading: "Ihre Verbindung zu {host} wird geprüft",
        explain: "{host} lässt Ihren Browser ein kleines Rätsel lösen, bevor die Seite angezeigt wird. Das schützt die Website vor automatisiertem Abgreifen. Es dauert einige Sekunden, nur einmal; danach gelangen Sie zur Seite.",
        working: "Das Rätsel wird gelöst …",
        progress: "Noch in Arbeit: bisher {n} Versuche.",
        solved: "Fertig. Sie werden zur Seite weitergeleitet …",
        failed: "Ihr Browser konnte das Rätsel auf dieser Seite nicht lösen.",
        resend: "Was Sie abgeschickt haben, wurde nicht gesendet. Nach dieser Prüfung sind Sie wieder auf der Seite: Bitte senden Sie es erneut.",
        noscript: "JavaScript ist ausgeschaltet, daher geht diese Seite in {seconds} Sekunden von selbst weiter. Falls nicht, warten Sie so lange und folgen Sie dem Link unten.",
        fallback: "Sie können trotzdem weiter: Warten Sie {seconds} Sekunden und folgen Sie dann diesem Link.",
        continue_link: "Weiter zur Website",
        ray: "Ray-ID",
        agents: "Kein Browser? Automatisierte Clients kommen durch, indem sie ihre Anfragen mit Web Bot Auth signieren.",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn choose(header: &str) -> Lang {
        Lang::from_accept_language(Some(header.as_bytes()))
    }

    #[test]
    fn accept_language_picks_the_best_shipped_language() {
        assert_eq!(Lang::from_accept_language(None), Lang::En);
        assert_eq!(choose(""), Lang::En);
        assert_eq!(
            choose("fr-CH, fr;q=0.9, en;q=0.8, de;q=0.7, *;q=0.5"),
            Lang::Fr
        );
        assert_eq!(choose("de-DE"), Lang::De);
        assert_eq!(choose("ja, de;q=0.3, fr;q=0.2"), Lang::De);
        assert_eq!(choose("en;q=0.5, DE;Q=0.8"), Lang::De);
        assert_eq!(choose("fr;q=0, de;q=0.001"), Lang::De);
        assert_eq!(choose("fr;q=0"), Lang::En);
        assert_eq!(choose("fr, de"), Lang::Fr, "equal weights: the first");
        assert_eq!(choose("ja, zh"), Lang::En);
        assert_eq!(choose("*"), Lang::En);
        // Malformed weights are ignored, not trusted.
        assert_eq!(choose("fr;q=2, de;q=0.5"), Lang::De);
        assert_eq!(choose("fr;q=0.5555, de;q=0.1"), Lang::De);
        assert_eq!(choose("fr;q=abc"), Lang::En);
        assert_eq!(
            Lang::from_accept_language(Some(&[0xff, b',', b'd', b'e'])),
            Lang::De
        );
        // Past 32 ranges nothing is read.
        let long = format!("{}de", "xx, ".repeat(40));
        assert_eq!(choose(&long), Lang::En);
    }

    #[test]
    fn every_language_fills_the_same_placeholders() {
        let holes = |s: &str| {
            ["{host}", "{seconds}", "{n}"]
                .into_iter()
                .filter(|h| s.contains(h))
                .collect::<Vec<_>>()
        };
        let en = Lang::En.strings();
        for lang in Lang::ALL {
            let s = lang.strings();
            assert_eq!(Lang::from_accept_language(Some(s.tag.as_bytes())), lang);
            for (a, b) in [
                (en.heading, s.heading),
                (en.explain, s.explain),
                (en.progress, s.progress),
                (en.noscript, s.noscript),
                (en.fallback, s.fallback),
                (en.title, s.title),
            ] {
                assert_eq!(holes(a), holes(b), "{lang:?}: {b}");
            }
        }
    }
}
