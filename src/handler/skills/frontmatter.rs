//! A `SKILL.md`'s YAML frontmatter, read into a JSON object, and the Agent Skills naming
//! rules. YAML anchors and aliases are refused rather than expanded (an alias bomb would
//! otherwise grow without bound), and nesting is bounded.

use serde_json::{Map, Number, Value};
use yaml_rust2::parser::{Event, EventReceiver, Parser};
use yaml_rust2::scanner::TScalarStyle;
use yaml_rust2::{Yaml, yaml};

/// Deepest nesting of sequences and mappings read.
const MAX_NESTING: usize = 32;

/// The frontmatter of `text`: the YAML between a leading `---` line and the next `---`
/// line, as an object with a non-empty string `name` and `description`.
pub(super) fn parse(text: &str) -> Result<Map<String, Value>, String> {
    let yaml = block(text).ok_or("no leading `---` delimited YAML frontmatter block")?;
    let mut reader = Reader::default();
    Parser::new_from_str(yaml)
        .load(&mut reader, false)
        .map_err(|e| format!("frontmatter is not YAML: {e}"))?;
    if let Some(error) = reader.error {
        return Err(error);
    }
    let Some(Value::Object(map)) = reader.done else {
        return Err("frontmatter is not a mapping".into());
    };
    for field in ["name", "description"] {
        match map.get(field) {
            Some(Value::String(s)) if !s.is_empty() => {}
            _ => return Err(format!("frontmatter has no non-empty string `{field}`")),
        }
    }
    Ok(map)
}

/// The text between the opening `---` line (after an optional BOM) and the closing one.
fn block(text: &str) -> Option<&str> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let body = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))?;
    let mut start = 0;
    for line in body.split_inclusive('\n') {
        let bare = line
            .trim_end_matches(['\n', '\r'])
            .trim_end_matches([' ', '\t']);
        if bare == "---" {
            return Some(body[..start].trim_end_matches(['\n', '\r']));
        }
        start += line.len();
    }
    None
}

/// True when `name` follows the Agent Skills naming rules: 1 to 64 lowercase ASCII
/// letters, digits and hyphens, no leading, trailing or doubled hyphen.
pub(super) fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

/// Builds JSON from the parser's events.
#[derive(Default)]
struct Reader {
    /// Open sequences and mappings; a mapping with the key waiting for its value.
    stack: Vec<(Value, Option<String>)>,
    done: Option<Value>,
    error: Option<String>,
}

impl Reader {
    fn fail(&mut self, why: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(why.into());
        }
    }

    fn open(&mut self, container: Value, anchor: usize) {
        if anchor > 0 {
            return self.fail("YAML anchors are not supported in frontmatter");
        }
        if self.stack.len() >= MAX_NESTING {
            return self.fail(format!("frontmatter nests deeper than {MAX_NESTING}"));
        }
        self.stack.push((container, None));
    }

    fn close(&mut self) {
        if let Some((value, _)) = self.stack.pop() {
            self.insert(value, None);
        }
    }

    /// Puts a finished node into its parent; `key_text` is a scalar's text, which is what
    /// it means as a mapping key.
    fn insert(&mut self, value: Value, key_text: Option<String>) {
        let Some((parent, pending)) = self.stack.last_mut() else {
            self.done = Some(value);
            return;
        };
        match parent {
            Value::Array(items) => items.push(value),
            Value::Object(map) => match pending.take() {
                Some(key) => {
                    if map.insert(key.clone(), value).is_some() {
                        self.fail(format!("duplicate frontmatter key {key:?}"));
                    }
                }
                None => match key_text {
                    Some(key) => *pending = Some(key),
                    None => self.fail("frontmatter has a key that is not a scalar"),
                },
            },
            _ => {}
        }
    }
}

impl EventReceiver for Reader {
    fn on_event(&mut self, event: Event) {
        if self.error.is_some() {
            return;
        }
        match event {
            Event::SequenceStart(anchor, _) => self.open(Value::Array(Vec::new()), anchor),
            Event::MappingStart(anchor, _) => self.open(Value::Object(Map::new()), anchor),
            Event::SequenceEnd | Event::MappingEnd => self.close(),
            Event::Alias(_) => self.fail("YAML aliases are not supported in frontmatter"),
            Event::Scalar(text, style, anchor, tag) => {
                if anchor > 0 {
                    return self.fail("YAML anchors are not supported in frontmatter");
                }
                let value = if style != TScalarStyle::Plain || tag.is_some() {
                    Value::String(text.clone())
                } else {
                    scalar(&text)
                };
                self.insert(value, Some(text));
            }
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => {}
        }
    }
}

/// A plain scalar as the YAML core schema reads it.
fn scalar(text: &str) -> Value {
    match yaml::Yaml::from_str(text) {
        Yaml::Integer(i) => Value::from(i),
        Yaml::Real(r) => r
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map_or_else(|| Value::String(text.to_owned()), Value::Number),
        Yaml::Boolean(b) => Value::Bool(b),
        Yaml::Null => Value::Null,
        _ => Value::String(text.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontmatter_reads_as_json() {
        let text = "---\nname: pdf-processing\ndescription: Extract PDFs\nlicense: MIT\n\
                    metadata:\n  version: \"2.1\"\n  count: 3\n  tags: [a, b]\n---\n\n# Body\n";
        let map = parse(text).unwrap_or_default();
        assert_eq!(
            Value::Object(map),
            serde_json::json!({"name": "pdf-processing", "description": "Extract PDFs",
                "license": "MIT", "metadata": {"version": "2.1", "count": 3, "tags": ["a", "b"]}})
        );
    }

    #[test]
    fn bad_frontmatter_is_an_error() {
        for text in [
            "# no frontmatter\n",
            "---\nname: x\n",
            "---\nname: x\n---\n",
            "---\nname: x\ndescription: \"\"\n---\n",
            "---\n- a\n---\n",
            "---\nname: x\ndescription: y\na: &a [1]\nb: *a\n---\n",
            "---\nname: x\ndescription: y\nname: z\n---\n",
            "---\nname: [unclosed\n---\n",
        ] {
            assert!(parse(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn names_follow_the_agent_skills_rules() {
        for good in ["a", "pdf-processing", "x1-2"] {
            assert!(valid_name(good), "{good}");
        }
        for bad in ["", "-a", "a-", "a--b", "Pdf", "a_b", &"a".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
