//! The files server's data: the root it serves (every path checked to stay inside it)
//! and the search index the `index` task builds.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

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
    /// No such file, or not readable.
    #[error("no such file: {0}")]
    Missing(String),
    /// A link (or its target) leads out of the root.
    #[error("{0} leads outside the root")]
    Outside(String),
    /// A folder, a device, a socket...
    #[error("{0} is not a regular file")]
    NotAFile(String),
    /// Over [`MAX_FILE_BYTES`].
    #[error("{0} is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge(String),
}

/// The folder served, canonical.
#[derive(Debug, Clone)]
pub(crate) struct Root(Arc<PathBuf>);

impl Root {
    /// `dir`, which must exist.
    pub(crate) fn open(dir: &Path) -> std::io::Result<Self> {
        Ok(Self(Arc::new(dir.canonicalize()?)))
    }

    /// The file `relative` names, once checked: inside the root after every link is
    /// followed, a regular file, at most [`MAX_FILE_BYTES`].
    pub(crate) fn resolve(&self, relative: &str) -> Result<PathBuf, PathError> {
        let path = Path::new(relative);
        let plain = !relative.is_empty()
            && path
                .components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !plain {
            return Err(PathError::NotRelative(relative.into()));
        }
        let full = self
            .0
            .join(path)
            .canonicalize()
            .map_err(|_| PathError::Missing(relative.into()))?;
        if !full.starts_with(&*self.0) {
            return Err(PathError::Outside(relative.into()));
        }
        let meta = full
            .metadata()
            .map_err(|_| PathError::Missing(relative.into()))?;
        if !meta.is_file() {
            return Err(PathError::NotAFile(relative.into()));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(PathError::TooLarge(relative.into()));
        }
        Ok(full)
    }

    /// Every regular file under the root (links are not followed), as relative paths,
    /// in a stable order, at most [`MAX_FILES`].
    pub(crate) fn walk(&self) -> Vec<String> {
        let mut found = Vec::new();
        let mut pending = vec![(self.0.as_ref().clone(), 0usize)];
        while let Some((dir, depth)) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut entries: Vec<_> = entries.flatten().collect();
            entries.sort_by_key(|e| e.file_name());
            for entry in entries {
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                let path = entry.path();
                if kind.is_dir() && depth < MAX_DEPTH {
                    pending.push((path, depth + 1));
                } else if kind.is_file()
                    && let Ok(relative) = path.strip_prefix(&*self.0)
                {
                    found.push(relative.to_string_lossy().into_owned());
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
