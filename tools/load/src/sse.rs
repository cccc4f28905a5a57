//! Incremental `text/event-stream` parsing, enough for what MCP servers send: `id`,
//! `data`, `event`, `retry` and comment lines.

/// One dispatched SSE event. An event with an id and empty data is a priming event: it
/// carries no message, only a position to resume from.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Event {
    /// The event's `id:` field, when it had one.
    pub(crate) id: Option<String>,
    /// The `data:` lines joined with `\n` (a JSON-RPC message for MCP), or empty.
    pub(crate) data: String,
}

/// Splits a byte stream into events. Bytes are fed as they arrive; an event is returned
/// once its terminating blank line has been seen.
#[derive(Debug, Default)]
pub(crate) struct Parser {
    buf: Vec<u8>,
    /// Start of the bytes not yet parsed; consumed bytes are dropped on the next feed so
    /// the buffer does not grow with the stream.
    pos: usize,
    id: Option<String>,
    data: String,
    data_lines: usize,
    /// Whether any field was seen since the last dispatch, so that a lone `id:` or
    /// `retry:` (a priming event) is dispatched while blank keep-alive lines are not.
    pending: bool,
}

impl Parser {
    /// Appends bytes received from the body.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete event, if the bytes fed so far hold one.
    pub(crate) fn next_event(&mut self) -> Option<Event> {
        loop {
            let rest = &self.buf[self.pos..];
            let nl = rest.iter().position(|&b| b == b'\n')?;
            let raw = &rest[..nl];
            self.pos += nl + 1;
            let line = raw.strip_suffix(b"\r").unwrap_or(raw);
            if line.is_empty() {
                if self.pending {
                    self.pending = false;
                    self.data_lines = 0;
                    return Some(Event {
                        id: self.id.take(),
                        data: std::mem::take(&mut self.data),
                    });
                }
                continue;
            }
            let (field, value) = match line.iter().position(|&b| b == b':') {
                Some(0) => continue, // a comment, e.g. a keep-alive
                Some(i) => {
                    let value = &line[i + 1..];
                    (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
                }
                None => (line, &b""[..]),
            };
            match field {
                b"data" => {
                    if self.data_lines > 0 {
                        self.data.push('\n');
                    }
                    self.data.push_str(&String::from_utf8_lossy(value));
                    self.data_lines += 1;
                }
                b"id" => self.id = Some(String::from_utf8_lossy(value).into_owned()),
                _ => {} // `event`, `retry`: nothing the load tool needs
            }
            self.pending = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Event, Parser};

    fn all(parser: &mut Parser) -> Vec<Event> {
        std::iter::from_fn(|| parser.next_event()).collect()
    }

    #[test]
    fn events_split_across_feeds_and_priming_events() {
        let mut p = Parser::default();
        p.feed(b"id: a-1-0\nretry: 5000\ndata:\n\n: keep-alive\n\nid: a-1-1\r\ndata: {\"x\"");
        assert_eq!(
            all(&mut p),
            vec![Event {
                id: Some("a-1-0".into()),
                data: String::new()
            }]
        );
        p.feed(b":1}\r\n\r\ndata: a\ndata: b\n\n");
        assert_eq!(
            all(&mut p),
            vec![
                Event {
                    id: Some("a-1-1".into()),
                    data: "{\"x\":1}".into()
                },
                Event {
                    id: None,
                    data: "a\nb".into()
                }
            ]
        );
    }
}
