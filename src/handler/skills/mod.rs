//! Skills (SEP-2640): a directory of [Agent Skills](https://agentskills.io/) served as
//! `skill://` resources, with the entries `skills/list` and `skills/get` return and the
//! listings `resources/directory/read` returns.
//!
//! [`SkillsDirectory::open`] reads the whole directory once, within [`SkillsLimits`]:
//! each directory holding a `SKILL.md` is a skill, at `skill://<its path>/SKILL.md`, and
//! every file below it is one of its files (a nested skill's too). What is served is that
//! snapshot; open the directory again to serve changes.
//!
//! Reading is safe against a hostile tree: everything is opened beneath the root's
//! descriptor with no symlink followed ([`crate::handler::fs`]), files are checked on the
//! opened descriptor (regular, one name, within the limit), a symlink is served only to a
//! visible regular file of its own skill, and hidden entries only with
//! [`SkillsBuilder::serve_dot_files`]. [`crate::McpServer::with_skill_scopes`] scopes
//! who may list and read them.

mod frontmatter;
mod path;
mod scan;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::protocol::methods::{
    DIRECTORY_MIME_TYPE, DirectoryChild, ResourceContents, ResourceDefinition, Skill, SkillResource,
};
pub use path::PathError;
use path::SkillPath;

/// The file every skill has at its root.
pub const SKILL_FILE: &str = "SKILL.md";

/// What [`SkillsDirectory::open`] accepts. The defaults are the extension's own limits
/// per skill (512 files, 16 MiB) and bounds on the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillsLimits {
    /// Largest file, in bytes (default 4 MiB).
    pub max_file_bytes: u64,
    /// Most bytes in one skill's files together (default 16 MiB, the extension's).
    pub max_skill_bytes: u64,
    /// Most files in one skill, `SKILL.md` included (default 512, the extension's).
    pub max_files_per_skill: usize,
    /// Most bytes read from the whole directory, all held in memory (default 64 MiB).
    pub max_total_bytes: u64,
    /// Most files and directories under the root (default 4,096).
    pub max_entries: usize,
    /// Deepest directory below the root (default 16).
    pub max_depth: usize,
}

impl Default for SkillsLimits {
    fn default() -> Self {
        Self {
            max_file_bytes: 4 << 20,
            max_skill_bytes: 16 << 20,
            max_files_per_skill: 512,
            max_total_bytes: 64 << 20,
            max_entries: 4096,
            max_depth: 16,
        }
    }
}

/// Why a skills directory cannot be served, or a skill URI answered.
#[derive(Debug, thiserror::Error)]
pub enum SkillsError {
    /// A file or directory could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// What was read.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The root is not a directory.
    #[error("{}: not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// A name that is not UTF-8 or has a character a `skill://` URI cannot carry as is.
    #[error("{}: a name a skill:// URI cannot carry", .0.display())]
    BadName(PathBuf),
    /// A symlink leading out of its skill's folder (or out of the root).
    #[error("{}: a symlink leading out of its skill's folder", .0.display())]
    Escapes(PathBuf),
    /// A symlink to a hidden path (a component starting with `.`), while hidden files are
    /// not served ([`SkillsBuilder::serve_dot_files`]).
    #[error("{}: a symlink to a hidden file", .0.display())]
    HiddenTarget(PathBuf),
    /// A file with more than one name (a hard link): its other name may be anywhere, a
    /// secret outside the root included.
    #[error("{}: a hard link (more than one name)", .0.display())]
    HardLink(PathBuf),
    /// Neither a regular file nor a directory (a FIFO, socket, device, a symlink to a
    /// directory or to another symlink).
    #[error("{}: not a regular file", .0.display())]
    NotARegularFile(PathBuf),
    /// A file over [`SkillsLimits::max_file_bytes`].
    #[error("{}: {size} bytes, over the limit of {limit}", path.display())]
    FileTooLarge {
        /// The file.
        path: PathBuf,
        /// Its size (at least).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A skill over [`SkillsLimits::max_skill_bytes`].
    #[error("skill {skill}: {size} bytes, over the limit of {limit}")]
    SkillTooLarge {
        /// The skill's path under the root.
        skill: String,
        /// Its files' bytes together.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A skill with more files than [`SkillsLimits::max_files_per_skill`].
    #[error("skill {skill}: {count} files, over the limit of {limit}")]
    TooManyFiles {
        /// The skill's path under the root.
        skill: String,
        /// Its files.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// More than [`SkillsLimits::max_entries`] files and directories.
    #[error("more than {0} files and directories under the skills root")]
    TooManyEntries(usize),
    /// A directory deeper than [`SkillsLimits::max_depth`].
    #[error("{}: deeper than the limit", .0.display())]
    TooDeep(PathBuf),
    /// More than [`SkillsLimits::max_total_bytes`] in all.
    #[error("more than {limit} bytes under the skills root")]
    TotalTooLarge {
        /// The limit.
        limit: u64,
    },
    /// A `SKILL.md` whose frontmatter is missing or malformed, or whose name breaks the
    /// naming rules or differs from its directory's.
    #[error("{skill}/SKILL.md: {reason}")]
    Manifest {
        /// The skill's path under the root.
        skill: String,
        /// What is wrong.
        reason: String,
    },
    /// A URI that is no path under the root (`..`, an absolute path, another scheme).
    #[error("{uri}: {reason}")]
    BadUri {
        /// The URI asked for.
        uri: String,
        /// Why it names no path.
        reason: PathError,
    },
    /// No skill, file or directory is served at this URI.
    #[error("nothing is served at {0}")]
    NotFound(String),
    /// A directory read of something that is not a directory.
    #[error("{0} is not a directory resource")]
    NotADirectoryResource(String),
}

/// A served file.
#[derive(Debug)]
struct File {
    bytes: Arc<[u8]>,
    digest: String,
}

/// A directory of skills, read once into memory and served by
/// [`McpServer::with_skills`](crate::McpServer::with_skills).
#[derive(Debug, Default)]
pub struct SkillsDirectory {
    files: BTreeMap<SkillPath, File>,
    dirs: std::collections::BTreeSet<SkillPath>,
    /// By the skill's directory, in path order.
    skills: BTreeMap<SkillPath, Skill>,
}

/// Opens a [`SkillsDirectory`] with limits other than the defaults.
#[derive(Debug, Clone)]
pub struct SkillsBuilder {
    root: PathBuf,
    limits: SkillsLimits,
    dot_files: bool,
}

impl SkillsBuilder {
    /// Sets [`SkillsLimits::max_file_bytes`].
    pub fn max_file_bytes(mut self, bytes: u64) -> Self {
        self.limits.max_file_bytes = bytes;
        self
    }

    /// Sets [`SkillsLimits::max_skill_bytes`].
    pub fn max_skill_bytes(mut self, bytes: u64) -> Self {
        self.limits.max_skill_bytes = bytes;
        self
    }

    /// Sets [`SkillsLimits::max_files_per_skill`].
    pub fn max_files_per_skill(mut self, files: usize) -> Self {
        self.limits.max_files_per_skill = files;
        self
    }

    /// Sets [`SkillsLimits::max_total_bytes`].
    pub fn max_total_bytes(mut self, bytes: u64) -> Self {
        self.limits.max_total_bytes = bytes;
        self
    }

    /// Sets [`SkillsLimits::max_entries`].
    pub fn max_entries(mut self, entries: usize) -> Self {
        self.limits.max_entries = entries;
        self
    }

    /// Sets [`SkillsLimits::max_depth`].
    pub fn max_depth(mut self, depth: usize) -> Self {
        self.limits.max_depth = depth;
        self
    }

    /// Sets every limit.
    pub fn limits(mut self, limits: SkillsLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Serves hidden entries too: files and folders whose name starts with `.`, and
    /// symlinks whose target path has such a component. Off by default, since a skills
    /// folder is often a checkout whose `.git/config` or `.env` is no skill's.
    pub fn serve_dot_files(mut self, serve: bool) -> Self {
        self.dot_files = serve;
        self
    }

    /// Reads the directory (blocking file I/O: call it before serving, or in
    /// `spawn_blocking`).
    pub fn open(self) -> Result<SkillsDirectory, SkillsError> {
        SkillsDirectory::read(&self.root, &self.limits, self.dot_files)
    }
}

impl SkillsDirectory {
    /// Reads the skills under `root` with the default [`SkillsLimits`].
    pub fn open(root: impl AsRef<Path>) -> Result<Self, SkillsError> {
        Self::builder(root).open()
    }

    /// A builder to set limits before opening `root`.
    pub fn builder(root: impl AsRef<Path>) -> SkillsBuilder {
        SkillsBuilder {
            root: root.as_ref().to_path_buf(),
            limits: SkillsLimits::default(),
            dot_files: false,
        }
    }

    fn read(root: &Path, limits: &SkillsLimits, dot_files: bool) -> Result<Self, SkillsError> {
        let tree = scan::walk(root, limits, dot_files)?;
        let files: BTreeMap<SkillPath, File> = tree
            .files
            .into_iter()
            .map(|(path, bytes)| {
                let digest = digest(&bytes);
                (path, File { bytes, digest })
            })
            .collect();
        let mut skills = BTreeMap::new();
        for (path, file) in &files {
            if path.last() != Some(SKILL_FILE) {
                continue;
            }
            let Some(dir) = path.parent().filter(|d| d.depth() > 0) else {
                return Err(manifest(
                    &SkillPath::root(),
                    "SKILL.md at the root is no skill",
                ));
            };
            let skill = entry(&dir, file, &files, limits)?;
            skills.insert(dir, skill);
        }
        // Only what belongs to a skill is served.
        let in_skill = |p: &SkillPath| skills.keys().any(|s| p.starts_with(s));
        let files = files.into_iter().filter(|(p, _)| in_skill(p)).collect();
        let dirs = tree.dirs.into_iter().filter(|d| in_skill(d)).collect();
        Ok(Self {
            files,
            dirs,
            skills,
        })
    }

    /// True when no skill was found.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// Every skill's entry, in path order.
    pub fn list(&self) -> Vec<Skill> {
        self.skills.values().cloned().collect()
    }

    /// The entry of the skill whose `SKILL.md` is at `uri`.
    pub fn get(&self, uri: &str) -> Result<Skill, SkillsError> {
        let path = parse(uri)?;
        path.parent()
            .filter(|_| path.last() == Some(SKILL_FILE))
            .and_then(|dir| self.skills.get(&dir))
            .cloned()
            .ok_or_else(|| SkillsError::NotFound(uri.to_owned()))
    }

    /// The contents of the file at `uri`: text when it is UTF-8, else base64.
    pub fn read_file(&self, uri: &str) -> Result<ResourceContents, SkillsError> {
        let path = parse(uri)?;
        let file = self
            .files
            .get(&path)
            .ok_or_else(|| SkillsError::NotFound(uri.to_owned()))?;
        let (text, blob) = match std::str::from_utf8(&file.bytes) {
            Ok(text) => (Some(text.to_owned()), None),
            Err(_) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(&file.bytes)),
            ),
        };
        Ok(ResourceContents {
            uri: uri.to_owned(),
            mime_type: Some(mime_type(&path).to_owned()),
            text,
            blob,
        })
    }

    /// The direct children of the directory at `uri` (a skill's root or a directory
    /// below it), by URI; each directory as [`DIRECTORY_MIME_TYPE`], each file with its
    /// size.
    pub fn read_directory(&self, uri: &str) -> Result<Vec<DirectoryChild>, SkillsError> {
        let path = parse(uri)?;
        if !self.dirs.contains(&path) {
            return Err(if self.files.contains_key(&path) {
                SkillsError::NotADirectoryResource(uri.to_owned())
            } else {
                SkillsError::NotFound(uri.to_owned())
            });
        }
        let child = |p: &SkillPath| p.parent().as_ref() == Some(&path);
        let dirs = self
            .dirs
            .iter()
            .filter(|d| child(d))
            .map(|d| DirectoryChild {
                uri: d.uri(),
                name: d.last().unwrap_or_default().to_owned(),
                mime_type: DIRECTORY_MIME_TYPE.to_owned(),
                size: None,
            });
        let files = self
            .files
            .iter()
            .filter(|(p, _)| child(p))
            .map(|(p, f)| DirectoryChild {
                uri: p.uri(),
                name: p.last().unwrap_or_default().to_owned(),
                mime_type: mime_type(p).to_owned(),
                size: Some(f.bytes.len() as u64),
            });
        let mut children: Vec<DirectoryChild> = dirs.chain(files).collect();
        children.sort_by(|a, b| a.uri.cmp(&b.uri));
        Ok(children)
    }

    /// Each skill's `SKILL.md` as a resource: named and described by its frontmatter.
    pub fn manifests(&self) -> Vec<ResourceDefinition> {
        self.skills
            .values()
            .map(|skill| {
                let text = |key| {
                    skill
                        .frontmatter
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                ResourceDefinition {
                    uri: skill.uri.clone(),
                    name: text("name"),
                    description: text("description"),
                    mime_type: Some("text/markdown".into()),
                }
            })
            .collect()
    }

    /// True when `uri` is a file or directory served here.
    pub fn contains(&self, uri: &str) -> bool {
        SkillPath::from_uri(uri)
            .is_ok_and(|p| self.files.contains_key(&p) || self.dirs.contains(&p))
    }
}

fn parse(uri: &str) -> Result<SkillPath, SkillsError> {
    SkillPath::from_uri(uri).map_err(|reason| SkillsError::BadUri {
        uri: uri.to_owned(),
        reason,
    })
}

fn manifest(skill: &SkillPath, reason: impl Into<String>) -> SkillsError {
    SkillsError::Manifest {
        skill: skill.to_string(),
        reason: reason.into(),
    }
}

/// The entry of the skill at `dir`, whose `SKILL.md` is `manifest_file`.
fn entry(
    dir: &SkillPath,
    manifest_file: &File,
    files: &BTreeMap<SkillPath, File>,
    limits: &SkillsLimits,
) -> Result<Skill, SkillsError> {
    let text = std::str::from_utf8(&manifest_file.bytes)
        .map_err(|_| manifest(dir, "SKILL.md is not UTF-8"))?;
    let frontmatter: Map<String, Value> = frontmatter::parse(text).map_err(|e| manifest(dir, e))?;
    let name = frontmatter
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !frontmatter::valid_name(name) {
        return Err(manifest(
            dir,
            format!("name {name:?} breaks the naming rules"),
        ));
    }
    if dir.last() != Some(name) {
        return Err(manifest(
            dir,
            format!("name {name:?} is not its directory's name"),
        ));
    }
    let resources: Vec<SkillResource> = files
        .range(dir.clone()..)
        .take_while(|(p, _)| p.starts_with(dir))
        .map(|(p, f)| SkillResource {
            uri: p.uri(),
            digest: f.digest.clone(),
            size: f.bytes.len() as u64,
        })
        .collect();
    if resources.len() > limits.max_files_per_skill {
        return Err(SkillsError::TooManyFiles {
            skill: dir.to_string(),
            count: resources.len(),
            limit: limits.max_files_per_skill,
        });
    }
    let size = resources.iter().map(|r| r.size).sum::<u64>();
    if size > limits.max_skill_bytes {
        return Err(SkillsError::SkillTooLarge {
            skill: dir.to_string(),
            size,
            limit: limits.max_skill_bytes,
        });
    }
    Ok(Skill {
        uri: format!("{}/{SKILL_FILE}", dir.uri()),
        frontmatter,
        resources,
    })
}

/// `sha256:` and the lowercase hex of the SHA-256 of `bytes`.
fn digest(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for byte in Sha256::digest(bytes) {
        out.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(byte & 15)]));
    }
    out
}

/// The MIME type of a file, by its extension.
fn mime_type(path: &SkillPath) -> &'static str {
    let name = path.last().unwrap_or_default();
    let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("md" | "markdown") => "text/markdown",
        Some("txt") => "text/plain",
        Some("py") => "text/x-python",
        Some("sh") => "text/x-shellscript",
        Some("js" | "mjs") => "text/javascript",
        Some("json") => "application/json",
        Some("yaml" | "yml") => "application/yaml",
        Some("toml") => "application/toml",
        Some("html" | "htm") => "text/html",
        Some("csv") => "text/csv",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("svg") => "image/svg+xml",
        Some("pdf") => "application/pdf",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests;
