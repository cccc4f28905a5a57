//! How span and event fields appear in the log lines on stderr: as `name=value`, like
//! `tracing_subscriber`'s default, but without the fields that only OpenTelemetry reads
//! (`otel.*`, `network.*`, `server.*`, `gen_ai.operation.name`).
//!
//! Why: the log layer formats a span's fields when the span is created and whenever one is
//! recorded, whether or not a line is ever logged in it. The MCP operation span carries a
//! dozen such fields; formatting them cost a `tools/call` about 20,000 instructions
//! (`scripts/callgrind-calls call`), a quarter of its whole cost.

use std::fmt;

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
        let space = if self.first { "" } else { " " };
        self.first = false;
        self.result = if name == "message" {
            write!(self.writer, "{space}{value}")
        } else {
            write!(self.writer, "{space}{name}={value}")
        };
    }
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.write(field, format_args!("{value}"));
        } else if value
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\' || b == b' ')
        {
            // Nothing to escape (the common case): quoted as is, without `Debug`'s walk
            // through every character.
            self.write(field, format_args!("\"{value}\""));
        } else {
            self.write(field, format_args!("{value:?}"));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.write(field, format_args!("{value:?}"));
    }
}
