//! Reads a skills root into memory, safely: every path under the canonical root, no
//! symlink that leads out of it (nor to a directory), only regular files, each within its
//! size limit, and bounded counts and depth. What is read is a snapshot: the bytes served
//! are the bytes digested.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::path::SkillPath;
use super::{SkillsError, SkillsLimits};

/// The files and directories under a root, by path.
#[derive(Debug, Default)]
pub(super) struct Tree {
    /// Every regular file read, with its bytes.
    pub(super) files: BTreeMap<SkillPath, Arc<[u8]>>,
    /// Every directory walked (the root not included).
    pub(super) dirs: BTreeSet<SkillPath>,
}

/// Walks `root` within `limits`.
pub(super) fn walk(root: &Path, limits: &SkillsLimits) -> Result<Tree, SkillsError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SkillsError::Io { path, source }
    };
    let root = fs::canonicalize(root).map_err(io(root))?;
    if !fs::metadata(&root).map_err(io(&root))?.is_dir() {
        return Err(SkillsError::NotADirectory(root));
    }
    let mut tree = Tree::default();
    let mut entries = 0usize;
    let mut total = 0u64;
    let mut pending = vec![(root.clone(), SkillPath::root())];
    while let Some((dir, at)) = pending.pop() {
        let mut names = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io(&dir))? {
            let entry = entry.map_err(io(&dir))?;
            let name = entry
                .file_name()
                .into_string()
                .map_err(|_| SkillsError::BadName(entry.path()))?;
            // Hidden entries (`.git`, `.DS_Store`) are not part of any skill.
            if !name.starts_with('.') {
                names.push(name);
            }
        }
        names.sort();
        for name in names {
            entries += 1;
            if entries > limits.max_entries {
                return Err(SkillsError::TooManyEntries(limits.max_entries));
            }
            let path = dir.join(&name);
            let rel = at
                .join(&name)
                .map_err(|_| SkillsError::BadName(path.clone()))?;
            let meta = fs::symlink_metadata(&path).map_err(io(&path))?;
            let file = if meta.file_type().is_symlink() {
                let target = fs::canonicalize(&path).map_err(io(&path))?;
                if !target.starts_with(&root) {
                    return Err(SkillsError::Escapes(path));
                }
                if !fs::metadata(&target).map_err(io(&target))?.is_file() {
                    return Err(SkillsError::NotARegularFile(path));
                }
                target
            } else if meta.is_dir() {
                if rel.depth() > limits.max_depth {
                    return Err(SkillsError::TooDeep(path));
                }
                tree.dirs.insert(rel.clone());
                pending.push((path, rel));
                continue;
            } else if meta.is_file() {
                path
            } else {
                return Err(SkillsError::NotARegularFile(path));
            };
            let bytes = read_file(&file, limits.max_file_bytes)?;
            total += bytes.len() as u64;
            if total > limits.max_total_bytes {
                return Err(SkillsError::TotalTooLarge {
                    limit: limits.max_total_bytes,
                });
            }
            tree.files.insert(rel, bytes.into());
        }
    }
    Ok(tree)
}

/// The bytes of the regular file at `path`, at most `limit` of them. Opened without
/// following a symlink and without blocking (a FIFO swapped in after the check would
/// otherwise hang), then checked again on the open file.
pub(super) fn read_file(path: &Path, limit: u64) -> Result<Vec<u8>, SkillsError> {
    let io = |source| SkillsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(SkillsError::NotARegularFile(path.to_path_buf()));
    }
    let too_large = |size| SkillsError::FileTooLarge {
        path: PathBuf::from(path),
        size,
        limit,
    };
    if meta.len() > limit {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // One byte past the limit tells a file that grew since it was measured.
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}
