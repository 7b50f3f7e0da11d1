//! Policy errors: every problem found in a policy file, each located at `file:line:col` with a caret.

use std::fmt;
use std::ops::Range;

/// What kind of problem a [`Problem`] is. The text of the problem carries the detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProblemKind {
    /// The policy file (or a file it names) could not be read.
    Read,
    /// The text is not valid TOML, or a value has the wrong type.
    Syntax,
    /// A key that the schema does not know (often a typo).
    UnknownKey,
    /// A value that parsed but means nothing valid (bad address, duplicate id, ...).
    Invalid,
    /// A rule expression failed to lex, parse or type-check.
    Expression,
    /// A geo or ASN database could not be opened or has the wrong shape.
    Database,
}

/// One problem in a policy, with its location when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The fixed kind of problem.
    pub kind: ProblemKind,
    /// What is wrong, in one line.
    pub message: String,
    /// The name of the policy source (usually its path).
    pub source: String,
    /// Where the problem is, when it has a place in the text.
    pub location: Option<Location>,
    /// A suggestion for fixing it ("did you mean `listen`?").
    pub hint: Option<String>,
}

/// A place in the policy text: 1-based line and column (in characters), the line's text and the
/// length of the caret under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub column: usize,
    /// The text of the offending line, without its line break.
    pub line_text: String,
    /// How many `^` to draw (at least one).
    pub width: usize,
}

/// The error returned when a policy cannot be loaded: every problem found, in file order.
///
/// `Display` prints one block per problem:
///
/// ```text
/// policy.toml:3:1: unknown key `lisen`
///     lisen = ["0.0.0.0:8080"]
///     ^^^^^
///     help: did you mean `listen`?
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    problems: Vec<Problem>,
}

impl PolicyError {
    /// All the problems, in the order of their place in the file.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    pub(crate) fn from_problems(mut problems: Vec<Problem>) -> PolicyError {
        // Located problems sort by place; unlocated ones (I/O) come first as they explain the rest.
        problems.sort_by_key(|p| p.location.as_ref().map(|l| (l.line, l.column)));
        problems.dedup();
        PolicyError { problems }
    }

    /// An error of one problem (the edge reports a policy it cannot put in service this way).
    pub fn single(problem: Problem) -> PolicyError {
        PolicyError {
            problems: vec![problem],
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.location {
            Some(loc) => {
                writeln!(
                    f,
                    "{}:{}:{}: {}",
                    self.source, loc.line, loc.column, self.message
                )?;
                writeln!(f, "    {}", loc.line_text)?;
                let pad: String = loc
                    .line_text
                    .chars()
                    .take(loc.column.saturating_sub(1))
                    .map(|c| if c == '\t' { '\t' } else { ' ' })
                    .collect();
                write!(f, "    {pad}{}", "^".repeat(loc.width.max(1)))?;
            }
            None => write!(f, "{}: {}", self.source, self.message)?,
        }
        if let Some(hint) = &self.hint {
            write!(f, "\n    help: {hint}")?;
        }
        Ok(())
    }
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PolicyError {}

/// Collects problems while one policy text is validated, turning byte spans into locations.
pub(crate) struct Diagnostics<'t> {
    text: &'t str,
    source: &'t str,
    problems: Vec<Problem>,
}

impl<'t> Diagnostics<'t> {
    pub(crate) fn new(text: &'t str, source: &'t str) -> Self {
        Diagnostics {
            text,
            source,
            problems: Vec::new(),
        }
    }

    pub(crate) fn text(&self) -> &'t str {
        self.text
    }

    pub(crate) fn has_errors(&self) -> bool {
        !self.problems.is_empty()
    }

    /// Records a problem at a byte span of the policy text.
    pub(crate) fn at(&mut self, kind: ProblemKind, span: Range<usize>, message: impl Into<String>) {
        self.at_with_hint(kind, span, message, None);
    }

    pub(crate) fn at_with_hint(
        &mut self,
        kind: ProblemKind,
        span: Range<usize>,
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        let location = locate(self.text, span);
        self.problems.push(Problem {
            kind,
            message: message.into(),
            source: self.source.to_owned(),
            location: Some(location),
            hint,
        });
    }

    /// A problem at a byte span of the policy text, not recorded: for one that is met later, if
    /// at all.
    pub(crate) fn problem_at(
        &self,
        kind: ProblemKind,
        span: Range<usize>,
        message: impl Into<String>,
    ) -> Problem {
        Problem {
            kind,
            message: message.into(),
            source: self.source.to_owned(),
            location: Some(locate(self.text, span)),
            hint: None,
        }
    }

    pub(crate) fn into_error(self) -> PolicyError {
        PolicyError::from_problems(self.problems)
    }
}

/// Builds a problem that has no place in the text (e.g. the file itself is unreadable).
pub(crate) fn unlocated(kind: ProblemKind, source: &str, message: impl Into<String>) -> Problem {
    Problem {
        kind,
        message: message.into(),
        source: source.to_owned(),
        location: None,
        hint: None,
    }
}

/// Turns a byte span into a line/column and a caret that stays on the span's first line.
pub(crate) fn locate(text: &str, span: Range<usize>) -> Location {
    let start = floor_char_boundary(text, span.start.min(text.len()));
    let end = floor_char_boundary(text, span.end.min(text.len())).max(start);
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let line_text = text[line_start..line_end].trim_end_matches('\r');
    let line = text[..start].matches('\n').count() + 1;
    let column = text[line_start..start].chars().count() + 1;
    let caret_end = end.min(line_start + line_text.len()).max(start);
    let width = text[start..caret_end].chars().count().max(1);
    Location {
        line,
        column,
        line_text: line_text.to_owned(),
        width,
    }
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Picks the candidate closest to `word`, if any is close enough to be a plausible typo.
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(word, c), c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_points_at_line_and_column() {
        let text = "a = 1\nbb = 2\n";
        let loc = locate(text, 6..8);
        assert_eq!((loc.line, loc.column, loc.width), (2, 1, 2));
        assert_eq!(loc.line_text, "bb = 2");
        let loc = locate(text, text.len()..text.len());
        assert_eq!(loc.line, 3);
    }

    #[test]
    fn display_draws_a_caret() {
        let mut d = Diagnostics::new("x = 1\nlisen = 2\n", "p.toml");
        d.at_with_hint(
            ProblemKind::UnknownKey,
            6..11,
            "unknown key `lisen`",
            Some("did you mean `listen`?".into()),
        );
        assert_eq!(
            d.into_error().to_string(),
            "p.toml:2:1: unknown key `lisen`\n    lisen = 2\n    ^^^^^\n    help: did you mean `listen`?"
        );
    }

    #[test]
    fn suggestions_need_similarity() {
        assert_eq!(did_you_mean("lisen", ["listen", "admin"]), Some("listen"));
        assert_eq!(did_you_mean("zzz", ["listen", "admin"]), None);
    }
}
