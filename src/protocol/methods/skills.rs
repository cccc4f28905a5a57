//! The skills extension (SEP-2640, `io.modelcontextprotocol/skills`): skill entries,
//! `skills/list`, `skills/get` and `resources/directory/read`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The extension's identifier, the key under `capabilities.extensions`.
pub const SKILLS_EXTENSION: &str = "io.modelcontextprotocol/skills";

/// The URI scheme skills are served under.
pub const SKILL_SCHEME: &str = "skill://";

/// The MIME type of a directory resource (`resources/directory/read`).
pub const DIRECTORY_MIME_TYPE: &str = "inode/directory";

/// One file of a skill: its URI, the SHA-256 of its bytes and their number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkillResource {
    /// The file's resource URI.
    pub uri: String,
    /// `sha256:` and 64 lowercase hex digits of the file's raw bytes.
    pub digest: String,
    /// Length of the file's raw bytes.
    pub size: u64,
}

/// A skill entry, as `skills/list` and `skills/get` return it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skill {
    /// The URI of the skill's `SKILL.md`.
    pub uri: String,
    /// The `SKILL.md` YAML frontmatter, as a JSON object (`name` and `description`
    /// always present).
    pub frontmatter: Map<String, Value>,
    /// Every file of the skill, `SKILL.md` included, each once.
    pub resources: Vec<SkillResource>,
}

/// `skills/get` params.
#[derive(Debug, Clone, Deserialize)]
pub struct GetSkillParams {
    /// The URI of the skill's `SKILL.md`.
    pub uri: String,
}

/// `skills/get` result.
#[derive(Debug, Clone, Serialize)]
pub struct GetSkillResult {
    /// The skill's entry.
    pub skill: Skill,
}

/// `resources/directory/read` params.
#[derive(Debug, Clone, Deserialize)]
pub struct ReadDirectoryParams {
    /// The directory resource's URI (no trailing slash).
    pub uri: String,
    /// The page wanted (none: the first).
    pub cursor: Option<String>,
}

/// A direct child of a directory resource: a file, or a directory
/// ([`DIRECTORY_MIME_TYPE`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryChild {
    /// Its URI.
    pub uri: String,
    /// Its last path segment.
    pub name: String,
    /// Its MIME type; [`DIRECTORY_MIME_TYPE`] for a directory.
    pub mime_type: String,
    /// A file's size in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}
