//! The recording: a versioned JSON Lines file. The first line says what it is; then one
//! line per HTTP request, response, SSE block and stream end, in the order the proxy saw
//! them, each with its exchange number `n` and its time `t` in milliseconds from the
//! start.
//!
//! ```text
//! {"format":"otpmcp-proxy","version":1,"upstream":"http://127.0.0.1:8080/mcp","startedMs":1764000000000}
//! {"kind":"request","n":1,"t":0.41,"method":"POST","path":"/mcp","headers":{...},"body":"{...}"}
//! {"kind":"response","n":1,"t":3.2,"status":200,"headers":{"content-type":"text/event-stream",...}}
//! {"kind":"event","n":1,"t":3.3,"raw":"id: 0cc1-1-0\nretry: 3000\ndata: \n\n","id":"0cc1-1-0","retry":3000,"data":""}
//! {"kind":"end","n":1,"t":9.0,"cut":false}
//! ```
//!
//! `raw` is the block exactly as the upstream sent it (replay writes it back byte for
//! byte); `id`, `event`, `data`, `retry` and `comments` are what it means, for readers.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// The format's name in the first line.
pub const FORMAT: &str = "otpmcp-proxy";
/// The version this build writes and reads.
pub const VERSION: u32 = 1;

/// The first line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// The server recorded.
    pub upstream: String,
    /// When recording began, Unix ms.
    pub started_ms: u64,
}

/// One line after the first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Entry {
    /// What the client sent.
    Request {
        /// The exchange.
        n: u64,
        /// Milliseconds since the start.
        t: f64,
        /// `POST`, `GET` or `DELETE`.
        method: String,
        /// Path and query.
        path: String,
        /// The headers that matter, secrets redacted.
        headers: BTreeMap<String, String>,
        /// The body as text (empty for GET and DELETE).
        #[serde(default)]
        body: String,
    },
    /// What the upstream answered, before any SSE block.
    Response {
        /// The exchange.
        n: u64,
        /// Milliseconds since the start.
        t: f64,
        /// The HTTP status.
        status: u16,
        /// The headers that matter.
        headers: BTreeMap<String, String>,
        /// The whole body, unless it is an SSE stream (then its blocks follow).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<String>,
    },
    /// One SSE block of an answer.
    Event {
        /// The exchange.
        n: u64,
        /// Milliseconds since the start.
        t: f64,
        /// The block's bytes as sent, its blank line included.
        raw: String,
        /// Its `id:`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// Its `event:`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        event: Option<String>,
        /// Its `data:` lines, joined.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        /// Its `retry:`, ms.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry: Option<u64>,
        /// Its comment lines.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        comments: Vec<String>,
    },
    /// The answer's stream ended.
    End {
        /// The exchange.
        n: u64,
        /// Milliseconds since the start.
        t: f64,
        /// The client went away first (the upstream did not end it).
        cut: bool,
        /// Bytes after the last complete block, if any.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        tail: String,
    },
}

impl Entry {
    /// The exchange the entry belongs to.
    pub fn exchange(&self) -> u64 {
        match self {
            Self::Request { n, .. }
            | Self::Response { n, .. }
            | Self::Event { n, .. }
            | Self::End { n, .. } => *n,
        }
    }
}

/// Why a recording cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// The file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// Which file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Something is already at the path and `--overwrite` was not given.
    #[error("{path} already exists: give --overwrite to replace it")]
    Exists {
        /// Which file.
        path: String,
    },
    /// A symbolic link is at the path: followed, it would let whoever planted it choose
    /// which file the recording (with its bodies) lands in.
    #[error("{path} is a symbolic link: a recording never follows one, even with --overwrite")]
    Symlink {
        /// Which file.
        path: String,
    },
    /// A directory, socket or device is at the path.
    #[error("{path} is not a regular file: --overwrite replaces only a regular file")]
    NotAFile {
        /// Which path.
        path: String,
    },
    /// A line is not what this version writes.
    #[error("{path}, line {line}: {problem}")]
    Format {
        /// Which file.
        path: String,
        /// The 1-based line.
        line: usize,
        /// What is wrong.
        problem: String,
    },
}

/// Appends entries to a recording, one flushed line each (so a proxy killed mid-session
/// leaves every line it wrote whole).
#[derive(Debug)]
pub struct Recorder {
    file: Mutex<std::fs::File>,
    start: Instant,
}

impl Recorder {
    /// Creates `path`, readable and writable by its owner only, and writes the header. An
    /// existing file is refused unless `overwrite`, and then only a regular file is
    /// replaced; a symbolic link is always refused, and the file is opened with
    /// `O_EXCL | O_NOFOLLOW`, so one planted after the check is refused too.
    pub fn create(path: &Path, upstream: &str, overwrite: bool) -> Result<Self, ArtifactError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let name = || path.display().to_string();
        let io = |source| ArtifactError::Io {
            path: name(),
            source,
        };
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(ArtifactError::Symlink { path: name() });
            }
            Ok(_) if !overwrite => return Err(ArtifactError::Exists { path: name() }),
            // Removed, not truncated: the new file gets mode 0600 whatever the old had.
            Ok(meta) if meta.is_file() => std::fs::remove_file(path).map_err(io)?,
            Ok(_) => return Err(ArtifactError::NotAFile { path: name() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o600)
            .open(path)
            .map_err(|e| match e.kind() {
                // Something appeared at the path since the check.
                std::io::ErrorKind::AlreadyExists => ArtifactError::Exists { path: name() },
                _ => io(e),
            })?;
        let recorder = Self {
            file: Mutex::new(file),
            start: Instant::now(),
        };
        let header = Header {
            format: FORMAT.into(),
            version: VERSION,
            upstream: upstream.into(),
            started_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        };
        recorder.line(&header).map_err(io)?;
        Ok(recorder)
    }

    /// Milliseconds since the recording began.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1000.0
    }

    /// Writes `entry`. A failed write is logged: the proxy goes on serving.
    pub fn write(&self, entry: &Entry) {
        if let Err(e) = self.line(entry) {
            tracing::error!(error = %e, "could not write to the recording");
        }
    }

    fn line(&self, value: &impl Serialize) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(value).map_err(std::io::Error::other)?;
        line.push(b'\n');
        // One short write per line, under a lock held for nothing else: the recorder is a
        // test and debugging tool, and its cost is in the proxy's measured latency.
        let mut file = self
            .file
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?;
        file.write_all(&line)?;
        file.flush()
    }
}

/// Reads a whole recording.
pub fn read(path: &Path) -> Result<(Header, Vec<Entry>), ArtifactError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| ArtifactError::Io {
        path: name.clone(),
        source,
    })?;
    parse(&bytes, &name)
}

/// Reads a whole recording from its bytes; `name` is what errors call it. A recording
/// may come from anywhere (`--replay` reads files it did not write): anything that is not
/// one gives an error, never a panic (the `recording` fuzz target).
pub fn parse(bytes: &[u8], name: &str) -> Result<(Header, Vec<Entry>), ArtifactError> {
    let problem = |line: usize, problem: String| ArtifactError::Format {
        path: name.to_owned(),
        line,
        problem,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = 1 + bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        problem(line, "not UTF-8".into())
    })?;
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, first)) = lines.next() else {
        return Err(problem(1, "empty file".into()));
    };
    let header: Header =
        serde_json::from_str(first).map_err(|e| problem(1, format!("not a header: {e}")))?;
    if header.format != FORMAT || header.version != VERSION {
        return Err(problem(
            1,
            format!(
                "{} version {}: this build reads {FORMAT} version {VERSION}",
                header.format, header.version
            ),
        ));
    }
    let entries = lines
        .map(|(i, line)| serde_json::from_str(line).map_err(|e| problem(i + 1, e.to_string())))
        .collect::<Result<Vec<Entry>, _>>()?;
    Ok((header, entries))
}
