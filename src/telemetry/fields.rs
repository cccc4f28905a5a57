//! How span and event fields appear in the log lines on stderr: as `name=value`, like
//! `tracing_subscriber`'s default, with three differences:
//!
//! - Fields that only OpenTelemetry reads (`otel.*`, `network.*`, `server.*`,
//!   `gen_ai.operation.name`, `mcp.protocol.version`) are left out. The log layer formats
//!   a span's fields when the span is created, whether or not a line is ever logged in
//!   it; formatting these cost a `tools/call` about 20,000 instructions
//!   (`scripts/callgrind-calls call`), a quarter of its whole cost.
//! - Every value is escaped and capped at [`MAX_VALUE_CHARS`]: ids, methods and header
//!   values come from clients, and a newline or an ANSI escape in one would forge a log
//!   line. Control characters are written as `\n`, `\u{1b}` and so on.
//! - A session id, the session's only credential, is shortened to its first
//!   [`SESSION_ID_CHARS`] characters, and so is an event id (which starts with one).
//!   Spans sent over OTLP keep the whole id.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// Prefixes of the fields left out of log lines.
const HIDDEN: &[&str] = &[
    "otel.",
    "network.",
    "server.",
    "gen_ai.operation.",
    "mcp.protocol.",
];

/// Fields that hold a session id (an event id starts with its session's).
const SESSION_IDS: &[&str] = &["mcp.session.id", "session_id", "session", "last_event_id"];

/// Longest a logged value gets, in characters.
const MAX_VALUE_CHARS: usize = 256;

/// Characters of a session id that are logged.
const SESSION_ID_CHARS: usize = 8;

/// The field formatter of the log layer.
#[derive(Debug, Default)]
pub(super) struct LogFields;

impl<'writer> FormatFields<'writer> for LogFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = Visitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct Visitor<'a> {
    writer: Writer<'a>,
    first: bool,
    result: fmt::Result,
}

impl Visitor<'_> {
    fn write(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        let name = field.name();
        if self.result.is_err() || HIDDEN.iter().any(|p| name.starts_with(p)) {
            return;
        }
        let cap = if SESSION_IDS.contains(&name) {
            SESSION_ID_CHARS
        } else {
            MAX_VALUE_CHARS
        };
        let space = if self.first { "" } else { " " };
        self.first = false;
        self.result = if name == "message" {
            write!(self.writer, "{space}")
                .and_then(|()| write_escaped(&mut self.writer, value, MAX_VALUE_CHARS * 4))
        } else {
            write!(self.writer, "{space}{name}=")
                .and_then(|()| write_escaped(&mut self.writer, value, cap))
        };
    }
}

/// Writes `value` to `out` with control characters escaped, cut after `cap` characters
/// (marked with `…`).
fn write_escaped(out: &mut dyn fmt::Write, value: fmt::Arguments<'_>, cap: usize) -> fmt::Result {
    let mut escaping = Escaping {
        out,
        left: cap,
        cut: false,
    };
    match escaping.write_fmt(value) {
        // The error is ours: the cap was reached.
        Err(_) if escaping.cut => escaping.out.write_char('…'),
        other => other,
    }
}

struct Escaping<'a> {
    out: &'a mut dyn fmt::Write,
    left: usize,
    cut: bool,
}

impl fmt::Write for Escaping<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            if self.left == 0 {
                self.cut = true;
                return Err(fmt::Error);
            }
            self.left -= 1;
            if c.is_control() {
                write!(self.out, "{}", c.escape_default())?;
            } else {
                self.out.write_char(c)?;
            }
        }
        Ok(())
    }
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.write(field, format_args!("{value}"));
        } else {
            self.write(field, format_args!("{value:?}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.write(field, format_args!("{value:?}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(value: &str, cap: usize) -> String {
        let mut out = String::new();
        let written = write_escaped(&mut out, format_args!("{value}"), cap);
        assert!(written.is_ok());
        out
    }

    #[test]
    fn control_characters_cannot_start_a_line_or_colour_it() {
        let forged = "1\n2026-01-01T00:00:00Z  INFO forged\u{1b}[31m";
        let out = escaped(forged, 256);
        assert!(!out.contains('\n') && !out.contains('\u{1b}'), "{out}");
        assert_eq!(out, "1\\n2026-01-01T00:00:00Z  INFO forged\\u{1b}[31m");
    }

    #[test]
    fn long_values_are_cut_and_marked() {
        assert_eq!(escaped("0123456789abcdef", 8), "01234567…");
        assert_eq!(escaped("short", 8), "short");
    }
}
