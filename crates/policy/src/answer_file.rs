//! The answer an error rule or a rule's own `response` gives, as written: one definition for
//! both, so that the two always take the same keys.
//!
//! Both tables are read key by key here rather than derived: serde's `flatten` (the derived way
//! to share fields) buffers the table, which loses the values' spans and does not combine with
//! `deny_unknown_fields`. Reading by hand keeps both: each value is read straight from TOML's
//! deserializer, spans included, and an unknown key is refused with the same message (and "did
//! you mean") as any derived table's.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess};
use serde_spanned::Spanned;

/// Every key of `[[error_rule]]`: the rule's own three, then the answer's.
const ERROR_RULE_KEYS: &[&str] = &[
    "id",
    "description",
    "expression",
    "status",
    "retryable",
    "retry_after",
    "title",
    "detail",
    "what_you_should_do",
    "html",
    "html_file",
    "json",
    "markdown",
    "text",
];

/// The keys of an answer: what an error rule and a rule's `response` share.
const ANSWER_KEYS: &[&str] = ERROR_RULE_KEYS.split_at(3).1;

/// What an answer says: its status, retry advice, text fields and per-format content.
#[derive(Debug, Default)]
pub(crate) struct AnswerFile {
    pub status: Option<Spanned<i64>>,
    pub retryable: Option<bool>,
    pub retry_after: Option<Spanned<i64>>,
    pub title: Option<Spanned<String>>,
    pub detail: Option<Spanned<String>>,
    pub what_you_should_do: Option<Spanned<String>>,
    pub html: Option<Spanned<String>>,
    pub html_file: Option<Spanned<String>>,
    pub json: Option<Spanned<String>>,
    pub markdown: Option<Spanned<String>>,
    pub text: Option<Spanned<String>>,
}

impl AnswerFile {
    /// Reads the value of `key` into its field; `false` when `key` is not one of an answer's.
    /// (TOML refuses a key given twice before this is asked.)
    fn read<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "status" => self.status = Some(map.next_value()?),
            "retryable" => self.retryable = Some(map.next_value()?),
            "retry_after" => self.retry_after = Some(map.next_value()?),
            "title" => self.title = Some(map.next_value()?),
            "detail" => self.detail = Some(map.next_value()?),
            "what_you_should_do" => self.what_you_should_do = Some(map.next_value()?),
            "html" => self.html = Some(map.next_value()?),
            "html_file" => self.html_file = Some(map.next_value()?),
            "json" => self.json = Some(map.next_value()?),
            "markdown" => self.markdown = Some(map.next_value()?),
            "text" => self.text = Some(map.next_value()?),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// `response = {...}` on a custom (block) or rate-limit rule: the answer alone.
impl<'de> Deserialize<'de> for AnswerFile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> de::Visitor<'de> for Visitor {
            type Value = AnswerFile;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a rule's response: a table of the answer's keys")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnswerFile, A::Error> {
                let mut answer = AnswerFile::default();
                while let Some(key) = map.next_key::<String>()? {
                    if !answer.read(&key, &mut map)? {
                        return Err(de::Error::unknown_field(&key, ANSWER_KEYS));
                    }
                }
                Ok(answer)
            }
        }
        deserializer.deserialize_struct("AnswerFile", ANSWER_KEYS, Visitor)
    }
}

/// `[[error_rule]]` and `[[zone.error_rule]]`: what the edge answers instead of the default when
/// an error matches.
#[derive(Debug)]
pub(crate) struct ErrorRuleFile {
    pub id: Spanned<String>,
    pub expression: Spanned<String>,
    pub answer: AnswerFile,
}

impl<'de> Deserialize<'de> for ErrorRuleFile {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> de::Visitor<'de> for Visitor {
            type Value = ErrorRuleFile;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an error rule: a table with `id`, `expression` and the answer's keys")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ErrorRuleFile, A::Error> {
                let (mut id, mut expression) = (None, None);
                let mut answer = AnswerFile::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "id" => id = Some(map.next_value()?),
                        "expression" => expression = Some(map.next_value()?),
                        // A note for people reading the policy: checked to be text, not kept.
                        "description" => {
                            map.next_value::<String>()?;
                        }
                        _ if answer.read(&key, &mut map)? => {}
                        _ => return Err(de::Error::unknown_field(&key, ERROR_RULE_KEYS)),
                    }
                }
                Ok(ErrorRuleFile {
                    id: id.ok_or_else(|| de::Error::missing_field("id"))?,
                    expression: expression.ok_or_else(|| de::Error::missing_field("expression"))?,
                    answer,
                })
            }
        }
        deserializer.deserialize_struct("ErrorRuleFile", ERROR_RULE_KEYS, Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Doc {
        error_rule: Vec<Spanned<ErrorRuleFile>>,
        response: Spanned<AnswerFile>,
    }

    #[test]
    fn both_tables_read_the_same_keys_with_their_places() {
        let text = "response = { status = 404, text = \"gone\" }\n\
                    [[error_rule]]\nid = \"e\"\ndescription = \"note\"\n\
                    expression = 'true'\nstatus = 503\nretry_after = 5\ntext = \"busy\"\n";
        let doc: Doc = toml::from_str(text).unwrap();
        let response = doc.response.get_ref();
        assert_eq!(response.status.as_ref().map(|s| *s.get_ref()), Some(404));
        let text_span = response.text.as_ref().unwrap().span();
        assert_eq!(&text[text_span], "\"gone\"");
        let rule = doc.error_rule[0].get_ref();
        assert_eq!(rule.id.get_ref(), "e");
        assert_eq!(
            rule.answer.retry_after.as_ref().map(|s| *s.get_ref()),
            Some(5)
        );
        assert_eq!(&text[rule.answer.status.as_ref().unwrap().span()], "503");
    }

    #[test]
    fn unknown_and_missing_keys_are_refused() {
        let e = toml::from_str::<Doc>("response = { titel = \"x\" }\n").unwrap_err();
        assert!(
            e.message()
                .starts_with("unknown field `titel`, expected one of `status`"),
            "{e}"
        );
        assert!(e.span().is_some());
        let e = toml::from_str::<Doc>("response = { id = \"x\" }\n").unwrap_err();
        assert!(e.message().starts_with("unknown field `id`"), "{e}");
        let e = toml::from_str::<Doc>(
            "response = {}\n[[error_rule]]\nid = \"e\"\nexpresion = 'true'\n",
        )
        .unwrap_err();
        assert!(
            e.message().contains(
                "unknown field `expresion`, expected one of `id`, `description`, `expression`"
            ),
            "{e}"
        );
        let e = toml::from_str::<Doc>("response = {}\n[[error_rule]]\nid = \"e\"\n").unwrap_err();
        assert!(e.message().contains("missing field `expression`"), "{e}");
    }
}
