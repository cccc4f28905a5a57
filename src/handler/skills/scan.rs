//! Reads a skills root into memory, safely: everything is opened beneath the root's
//! descriptor with no symlink followed ([`crate::handler::fs`]), so a folder swapped for
//! a symlink cannot lead out; each file is checked on its descriptor (regular, one name,
//! within its size limit); counts and depth are bounded. A symlink is served only when it
//! points at a regular file inside its own skill's folder, by a path with no hidden
//! component. Hidden entries (`.git`, `.env`) are skipped unless asked for. What is read
//! is a snapshot: the bytes served are the bytes digested.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::path::SkillPath;
use super::{SKILL_FILE, SkillsError, SkillsLimits};
use crate::handler::fs::{Dir, Kind, OpenError, ReadError, ReadFileError};

/// The files and directories under a root, by path.
#[derive(Debug, Default)]
pub(super) struct Tree {
    /// Every regular file read, and every symlink served, with its bytes.
    pub(super) files: BTreeMap<SkillPath, Arc<[u8]>>,
    /// Every directory walked (the root not included).
    pub(super) dirs: BTreeSet<SkillPath>,
}

/// A symlink met in the walk: where it is, and the path below the root it names.
struct Link {
    at: SkillPath,
    path: PathBuf,
    target: SkillPath,
}

/// Walks `root` within `limits`; hidden entries are read only with `dot_files`.
pub(super) fn walk(
    root: &Path,
    limits: &SkillsLimits,
    dot_files: bool,
) -> Result<Tree, SkillsError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SkillsError::Io { path, source }
    };
    let root = fs::canonicalize(root).map_err(io(root))?;
    if !fs::metadata(&root).map_err(io(&root))?.is_dir() {
        return Err(SkillsError::NotADirectory(root));
    }
    let top = Dir::open(&root).map_err(io(&root))?;
    let mut tree = Tree::default();
    let mut links = Vec::new();
    let mut entries = 0usize;
    let mut total = 0u64;
    let mut count = |bytes: &[u8]| {
        total += bytes.len() as u64;
        if total > limits.max_total_bytes {
            return Err(SkillsError::TotalTooLarge {
                limit: limits.max_total_bytes,
            });
        }
        Ok(())
    };
    // Folders are opened again from the root when their turn comes (beneath it, no
    // symlink), so no more than two descriptors are held at once.
    let mut pending = vec![SkillPath::root()];
    while let Some(at) = pending.pop() {
        let full = root.join(at.to_string());
        let opened;
        let dir = if at.depth() == 0 {
            &top
        } else {
            opened = top
                .open_dir(Path::new(&at.to_string()))
                .map_err(|e| open_error(&full, e))?;
            &opened
        };
        let mut names = Vec::new();
        for (name, kind) in dir.entries().map_err(io(&full))? {
            let name = name
                .into_string()
                .map_err(|n| SkillsError::BadName(full.join(n)))?;
            // Hidden entries (`.git`, `.env`, `.DS_Store`) are not part of any skill
            // unless the directory was opened to serve them.
            if dot_files || !name.starts_with('.') {
                names.push((name, kind));
            }
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, kind) in names {
            entries += 1;
            if entries > limits.max_entries {
                return Err(SkillsError::TooManyEntries(limits.max_entries));
            }
            let path = full.join(&name);
            let rel = at
                .join(&name)
                .map_err(|_| SkillsError::BadName(path.clone()))?;
            match kind {
                Kind::Dir => {
                    if rel.depth() > limits.max_depth {
                        return Err(SkillsError::TooDeep(path));
                    }
                    tree.dirs.insert(rel.clone());
                    pending.push(rel);
                }
                Kind::File => {
                    let bytes = dir
                        .read(Path::new(&name), limits.max_file_bytes)
                        .map_err(|e| read_error(&path, e))?;
                    count(&bytes)?;
                    tree.files.insert(rel, bytes.into());
                }
                Kind::Symlink => {
                    let written = dir.read_link(name.as_ref()).map_err(io(&path))?;
                    let target = resolve(&root, &at, &written, dot_files)
                        .map_err(|why| why.into_error(path.clone()))?;
                    links.push(Link {
                        at: rel,
                        path,
                        target,
                    });
                }
                Kind::Other => return Err(SkillsError::NotARegularFile(path)),
            }
        }
    }
    // A link is served within its own skill (the innermost folder with a SKILL.md that
    // holds it); one outside every skill is not served at all.
    let skills: BTreeSet<SkillPath> = tree
        .files
        .keys()
        .chain(links.iter().map(|l| &l.at))
        .filter(|p| p.last() == Some(SKILL_FILE))
        .filter_map(SkillPath::parent)
        .filter(|d| d.depth() > 0)
        .collect();
    for link in links {
        let Some(skill) = skills
            .iter()
            .filter(|s| link.at.starts_with(s))
            .max_by_key(|s| s.depth())
        else {
            continue;
        };
        if !link.target.starts_with(skill) {
            return Err(SkillsError::Escapes(link.path));
        }
        let bytes = top
            .read(Path::new(&link.target.to_string()), limits.max_file_bytes)
            .map_err(|e| read_error(&link.path, e))?;
        count(&bytes)?;
        tree.files.insert(link.at, bytes.into());
    }
    Ok(tree)
}

/// Why a symlink's target is refused before it is opened.
enum Refused {
    Outside,
    Hidden,
}

impl Refused {
    fn into_error(self, path: PathBuf) -> SkillsError {
        match self {
            Self::Outside => SkillsError::Escapes(path),
            Self::Hidden => SkillsError::HiddenTarget(path),
        }
    }
}

/// The path below the root that the symlink in folder `at`, reading `written`, names:
/// `..` is resolved in the text (the result is then opened with no symlink, so the text
/// is what is served). An absolute target must lie under the (canonical) root.
fn resolve(
    root: &Path,
    at: &SkillPath,
    written: &Path,
    dot_files: bool,
) -> Result<SkillPath, Refused> {
    let (mut parts, rest): (Vec<String>, &Path) = if written.is_absolute() {
        let rest = written.strip_prefix(root).map_err(|_| Refused::Outside)?;
        (Vec::new(), rest)
    } else {
        let parts = at.to_string();
        let parts = parts
            .split('/')
            .filter(|p| !p.is_empty())
            .map(str::to_owned);
        (parts.collect(), written)
    };
    for component in rest.components() {
        match component {
            Component::Normal(name) => {
                let name = name.to_str().ok_or(Refused::Outside)?;
                if name.starts_with('.') && !dot_files {
                    return Err(Refused::Hidden);
                }
                parts.push(name.to_owned());
            }
            Component::ParentDir => {
                parts.pop().ok_or(Refused::Outside)?;
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return Err(Refused::Outside),
        }
    }
    let mut path = SkillPath::root();
    for part in &parts {
        path = path.join(part).map_err(|_| Refused::Outside)?;
    }
    Ok(path)
}

fn open_error(path: &Path, error: OpenError) -> SkillsError {
    match error {
        OpenError::Symlink(_) => SkillsError::NotARegularFile(path.to_path_buf()),
        OpenError::NotBeneath(_) => SkillsError::BadName(path.to_path_buf()),
        OpenError::Io { source, .. } => SkillsError::Io {
            path: path.to_path_buf(),
            source,
        },
    }
}

fn read_error(path: &Path, error: ReadFileError) -> SkillsError {
    let path = path.to_path_buf();
    match error {
        ReadFileError::Open(e) => open_error(&path, e),
        ReadFileError::Read(ReadError::NotRegular) => SkillsError::NotARegularFile(path),
        ReadFileError::Read(ReadError::HardLink(_)) => SkillsError::HardLink(path),
        ReadFileError::Read(ReadError::TooLarge { size, limit }) => {
            SkillsError::FileTooLarge { path, size, limit }
        }
        ReadFileError::Read(ReadError::Io(source)) => SkillsError::Io { path, source },
    }
}
