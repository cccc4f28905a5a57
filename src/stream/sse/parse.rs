//! Reading Server-Sent Events back, as the WHATWG HTML standard's event-stream
//! interpretation does, but keeping everything on the wire: ids, event types, data,
//! `retry:` and comments, block by block. The tests and fuzzing check that what the
//! framing writes reads back the same; a recording proxy needs the same view of an
//! upstream stream.
//!
//! ```
//! use otpmcp::stream::sse::Parser;
//!
//! let mut parser = Parser::new(1 << 20);
//! let blocks = parser.feed(b"id: 1\nevent: message\ndata: {}\n\n: ping\n\n").unwrap();
//! assert_eq!(blocks[0].id.as_deref(), Some("1"));
//! assert_eq!(blocks[0].data.as_deref(), Some("{}"));
//! assert_eq!(blocks[1].comments, vec![" ping".to_string()]);
//! ```

/// One block of lines ended by a blank line: what a frame carried.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Block {
    /// The last `id:` field, unless it held a NUL (which the standard ignores).
    pub id: Option<String>,
    /// The last `event:` field.
    pub event: Option<String>,
    /// The `data:` fields joined by line feeds; `None` without any (no event dispatched).
    pub data: Option<String>,
    /// The last `retry:` field made of ASCII digits only, in milliseconds.
    pub retry: Option<u64>,
    /// Comment lines, without their leading colon.
    pub comments: Vec<String>,
}

impl Block {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Why a stream could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// A block grew past the parser's limit without its blank line.
    #[error("an SSE block exceeds {0} bytes")]
    TooLarge(usize),
}

/// An incremental parser: feed it bytes as they arrive, get the finished blocks.
#[derive(Debug)]
pub struct Parser {
    /// The unfinished line.
    line: Vec<u8>,
    /// The block being read.
    block: Block,
    /// Bytes in the block so far, against `limit`.
    size: usize,
    limit: usize,
    /// The last byte was a CR: a LF right after it ends nothing more.
    after_cr: bool,
    /// Nothing read yet: a leading byte order mark is skipped.
    at_start: bool,
}

impl Parser {
    /// A parser that refuses blocks larger than `limit` bytes, so a peer cannot make it
    /// hold an unbounded amount.
    pub fn new(limit: usize) -> Self {
        Self {
            line: Vec::new(),
            block: Block::default(),
            size: 0,
            limit,
            after_cr: false,
            at_start: true,
        }
    }

    /// Reads `bytes`; returns the blocks they finish. An empty block (two blank lines in
    /// a row) is not returned.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<Vec<Block>, ParseError> {
        const BOM: &[u8] = "\u{feff}".as_bytes();
        if self.at_start && !bytes.is_empty() {
            // A BOM split across two reads is not worth the state: ours never send one.
            if let Some(rest) = bytes.strip_prefix(BOM) {
                bytes = rest;
            }
            self.at_start = false;
        }
        let mut out = Vec::new();
        for &b in bytes {
            match b {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    if let Some(block) = self.end_line() {
                        out.push(block);
                    }
                }
                _ => {
                    self.after_cr = false;
                    self.size += 1;
                    if self.size > self.limit {
                        return Err(ParseError::TooLarge(self.limit));
                    }
                    self.line.push(b);
                }
            }
        }
        Ok(out)
    }

    /// Handles the line just ended; returns the block a blank line finishes.
    fn end_line(&mut self) -> Option<Block> {
        if self.line.is_empty() {
            self.size = 0;
            let block = std::mem::take(&mut self.block);
            return (!block.is_empty()).then_some(block);
        }
        let line = String::from_utf8_lossy(&self.line).into_owned();
        self.line.clear();
        let (name, value) = match line.split_once(':') {
            Some(("", comment)) => {
                self.block.comments.push(comment.to_owned());
                return None;
            }
            Some((name, value)) => (name, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_str(), ""),
        };
        match name {
            "data" => match &mut self.block.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.block.data = Some(value.to_owned()),
            },
            "event" => self.block.event = Some(value.to_owned()),
            "id" if !value.contains('\0') => self.block.id = Some(value.to_owned()),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                // Digits only, so the parse fails only on overflow, which we saturate.
                self.block.retry = Some(value.parse().unwrap_or(u64::MAX));
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(text: &[u8]) -> Vec<Block> {
        match Parser::new(1 << 16).feed(text) {
            Ok(blocks) => blocks,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn lines_end_at_cr_lf_or_crlf_even_across_reads() {
        let whole = blocks(b"data: a\r\ndata: b\rdata: c\n\r\n");
        assert_eq!(whole.len(), 1);
        assert_eq!(whole[0].data.as_deref(), Some("a\nb\nc"));
        let mut parser = Parser::new(1 << 16);
        let mut split = Vec::new();
        for piece in [&b"data: a\r"[..], b"\ndata: b\r", b"\n\r", b"\n"] {
            split.extend(parser.feed(piece).unwrap_or_default());
        }
        assert_eq!(split.len(), 1);
        assert_eq!(split[0].data.as_deref(), Some("a\nb"));
    }

    #[test]
    fn fields_follow_the_standard() {
        let got =
            blocks(b"id: 7\nid: a\0b\nevent:x\nretry: 12\nretry: 1x\ndata\n: note\nfoo: bar\n\n");
        assert_eq!(
            got,
            vec![Block {
                id: Some("7".into()),
                event: Some("x".into()),
                data: Some(String::new()),
                retry: Some(12),
                comments: vec![" note".into()],
            }]
        );
    }

    #[test]
    fn blank_lines_alone_make_no_block_and_big_blocks_are_refused() {
        assert!(blocks(b"\n\n\r\n").is_empty());
        let mut parser = Parser::new(8);
        assert_eq!(
            parser.feed(b"data: 123456789"),
            Err(ParseError::TooLarge(8))
        );
    }
}
