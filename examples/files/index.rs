//! The files server's data: the root it serves and the search index the `index` task
//! builds. Every file is opened once, beneath the root's descriptor with no symlink
//! followed ([`otpmcp::handler::fs`]), and checked and read on that descriptor: a folder
//! swapped for a symlink cannot lead out, a FIFO swapped in cannot block, and a file that
//! grows after it was measured is still cut at the limit. Hidden files (a component
//! starting with `.`: `.env`, `.git/`) are neither served nor indexed. All of it is
//! blocking file I/O: callers run it in `spawn_blocking`.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use otpmcp::handler::fs::{Dir, Kind, OpenError, ReadError, ReadFileError};

/// Largest file read or indexed.
pub(crate) const MAX_FILE_BYTES: u64 = 1 << 20;
/// Most files one index holds.
pub(crate) const MAX_FILES: usize = 10_000;
/// Most bytes of text one index holds.
pub(crate) const MAX_INDEX_BYTES: usize = 64 << 20;
/// Deepest folder walked.
const MAX_DEPTH: usize = 16;

/// Why a path is not served.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PathError {
    /// Absolute, empty, or with `..`.
    #[error("{0:?} is not a relative path inside the root (no `..`, not absolute)")]
    NotRelative(String),
    /// A component starting with `.`.
    #[error("{0} is hidden (a name starting with `.`): not served")]
    Hidden(String),
    /// No such file, or not readable.
    #[error("no such file: {0}")]
    Missing(String),
    /// A symlink on the way: none is followed, so none leads outside the root.
    #[error("{0} goes through a symlink: links are not followed")]
    Symlink(String),
    /// A folder, a FIFO, a device, a socket...
    #[error("{0} is not a regular file")]
    NotAFile(String),
    /// A file with another name somewhere (which may be outside the root).
    #[error("{0} is a hard link: not served")]
    HardLink(String),
    /// Over [`MAX_FILE_BYTES`].
    #[error("{0} is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge(String),
    /// Not UTF-8.
    #[error("{0} is not UTF-8 text")]
    NotText(String),
}

/// The folder served, held open.
#[derive(Debug, Clone)]
pub(crate) struct Root(Arc<Dir>);

impl Root {
    /// `dir`, which must be a folder.
    pub(crate) fn open(dir: &Path) -> std::io::Result<Self> {
        Ok(Self(Arc::new(Dir::open(dir)?)))
    }

    /// The text of the file `relative` names: a relative path with no `..` and no hidden
    /// component, opened beneath the root with no symlink followed, a regular file with
    /// one name, at most [`MAX_FILE_BYTES`], UTF-8. Blocking.
    pub(crate) fn read(&self, relative: &str) -> Result<String, PathError> {
        let path = Path::new(relative);
        let mut plain = !relative.is_empty();
        for component in path.components() {
            match component {
                Component::Normal(name) if name.as_encoded_bytes().starts_with(b".") => {
                    return Err(PathError::Hidden(relative.into()));
                }
                Component::Normal(_) | Component::CurDir => {}
                _ => plain = false,
            }
        }
        if !plain {
            return Err(PathError::NotRelative(relative.into()));
        }
        let bytes = self.0.read(path, MAX_FILE_BYTES).map_err(|e| {
            let name = relative.to_owned();
            match e {
                ReadFileError::Open(OpenError::Symlink(_)) => PathError::Symlink(name),
                ReadFileError::Open(OpenError::NotBeneath(_)) => PathError::NotRelative(name),
                ReadFileError::Open(OpenError::Io { .. }) => PathError::Missing(name),
                ReadFileError::Read(ReadError::NotRegular) => PathError::NotAFile(name),
                ReadFileError::Read(ReadError::HardLink(_)) => PathError::HardLink(name),
                ReadFileError::Read(ReadError::TooLarge { .. }) => PathError::TooLarge(name),
                ReadFileError::Read(ReadError::Io(_)) => PathError::Missing(name),
            }
        })?;
        String::from_utf8(bytes).map_err(|_| PathError::NotText(relative.into()))
    }

    /// Every regular file under the root, as relative paths, in a stable order, at most
    /// [`MAX_FILES`]: links are not followed and hidden entries are skipped; each folder
    /// is opened beneath the root. Blocking.
    pub(crate) fn walk(&self) -> Vec<String> {
        let mut found = Vec::new();
        let mut pending = vec![(PathBuf::new(), 0usize)];
        while let Some((relative, depth)) = pending.pop() {
            let opened;
            let dir = if depth == 0 {
                &*self.0
            } else {
                let Ok(dir) = self.0.open_dir(&relative) else {
                    continue;
                };
                opened = dir;
                &opened
            };
            let Ok(mut entries) = dir.entries() else {
                continue;
            };
            entries.sort();
            for (name, kind) in entries {
                if name.as_encoded_bytes().starts_with(b".") {
                    continue;
                }
                let path = relative.join(&name);
                if kind == Kind::Dir && depth < MAX_DEPTH {
                    pending.push((path, depth + 1));
                } else if kind == Kind::File
                    && let Some(path) = path.to_str()
                {
                    found.push(path.to_owned());
                    if found.len() == MAX_FILES {
                        return found;
                    }
                }
            }
        }
        found.sort();
        found
    }
}

/// One indexed file.
#[derive(Debug, Clone)]
pub(crate) struct Indexed {
    /// Relative to the root.
    pub(crate) path: String,
    /// Its text (UTF-8 files only).
    pub(crate) text: String,
}

/// What the last `index` run found.
#[derive(Debug, Clone, Default)]
pub(crate) struct Index {
    pub(crate) files: Vec<Indexed>,
    /// Files left out: not UTF-8, too large, or past the index's limits.
    pub(crate) skipped: usize,
}

/// One line that matched a search.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub(crate) struct Hit {
    /// The file, relative to the root.
    pub(crate) path: String,
    /// Its line number, from 1.
    pub(crate) line: usize,
    /// The line.
    pub(crate) text: String,
}

impl Index {
    /// Adds `path` with `text` if it fits; false if it was skipped.
    pub(crate) fn add(&mut self, path: String, text: String) -> bool {
        let held: usize = self.files.iter().map(|f| f.text.len()).sum();
        if self.files.len() >= MAX_FILES || held + text.len() > MAX_INDEX_BYTES {
            self.skipped += 1;
            return false;
        }
        self.files.push(Indexed { path, text });
        true
    }

    /// The lines containing `query` (case-insensitive), at most `most`.
    pub(crate) fn search(&self, query: &str, most: usize) -> Vec<Hit> {
        let query = query.to_lowercase();
        let mut hits = Vec::new();
        for file in &self.files {
            for (n, line) in file.text.lines().enumerate() {
                if line.to_lowercase().contains(&query) {
                    hits.push(Hit {
                        path: file.path.clone(),
                        line: n + 1,
                        text: line.chars().take(200).collect(),
                    });
                    if hits.len() == most {
                        return hits;
                    }
                }
            }
        }
        hits
    }
}
