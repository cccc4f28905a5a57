//! The safety of [`SkillsDirectory::open`] and what it serves.

use std::fs;
use std::path::{Path, PathBuf};

use super::*;

/// A fresh directory under the system's temporary one, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let mut random = [0u8; 8];
        let _ = getrandom::fill(&mut random);
        let dir = std::env::temp_dir().join(format!(
            "otpmcp-skills-{name}-{}-{}",
            std::process::id(),
            u64::from_le_bytes(random)
        ));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Self(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn write(&self, rel: &str, bytes: &[u8]) {
        let path = self.0.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{}: {e}", parent.display()));
        }
        fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    /// A skill `dir` whose last segment is its name.
    fn skill(&self, dir: &str) {
        let name = dir.rsplit('/').next().unwrap_or(dir);
        let text = format!("---\nname: {name}\ndescription: The {name} skill.\n---\n\nBody.\n");
        self.write(&format!("{dir}/SKILL.md"), text.as_bytes());
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_directory_of_skills_is_served_with_digests_and_directories() {
    let root = Scratch::new("served");
    root.skill("pdf-processing");
    root.write("pdf-processing/references/FORMS.md", b"# Forms\n");
    root.skill("acme/billing/refunds");
    root.write("README.md", b"not in any skill");
    let skills = SkillsDirectory::open(root.path()).unwrap_or_else(|e| panic!("{e}"));
    let list = skills.list();
    let uris: Vec<&str> = list.iter().map(|s| s.uri.as_str()).collect();
    assert_eq!(
        uris,
        [
            "skill://acme/billing/refunds/SKILL.md",
            "skill://pdf-processing/SKILL.md"
        ]
    );
    let pdf = skills
        .get("skill://pdf-processing/SKILL.md")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pdf.frontmatter["name"], "pdf-processing");
    let forms = &pdf.resources[1];
    assert_eq!(forms.uri, "skill://pdf-processing/references/FORMS.md");
    assert_eq!(forms.size, 8);
    assert_eq!(forms.digest, digest(b"# Forms\n"));
    assert_eq!(forms.digest.len(), 7 + 64);
    let read = skills
        .read_file(&forms.uri)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read.text.as_deref(), Some("# Forms\n"));
    let children = skills
        .read_directory("skill://pdf-processing")
        .unwrap_or_else(|e| panic!("{e}"));
    let kinds: Vec<(&str, &str)> = children
        .iter()
        .map(|c| (c.name.as_str(), c.mime_type.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("SKILL.md", "text/markdown"),
            ("references", DIRECTORY_MIME_TYPE)
        ]
    );
    for (uri, missing) in [
        ("skill://pdf-processing/SKILL.md", false),
        ("skill://nope", true),
        ("skill://acme", true),
    ] {
        match skills.read_directory(uri) {
            Err(SkillsError::NotADirectoryResource(_)) if !missing => {}
            Err(SkillsError::NotFound(_)) if missing => {}
            other => panic!("{uri}: {other:?}"),
        }
    }
    for uri in [
        "skill://README.md",
        "skill://pdf-processing/../README.md",
        "skill://pdf-processing/references",
        "skill://nope/SKILL.md",
    ] {
        assert!(skills.read_file(uri).is_err(), "{uri}");
    }
    assert!(
        skills
            .get("skill://pdf-processing/references/FORMS.md")
            .is_err()
    );
}

#[test]
fn a_symlink_leaving_the_root_is_refused() {
    let outside = Scratch::new("outside");
    outside.write("secret.txt", b"secret");
    let root = Scratch::new("escape");
    root.skill("leaky");
    let link = root.path().join("leaky/secret.txt");
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), &link)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        SkillsDirectory::open(root.path()),
        Err(SkillsError::Escapes(p)) if p == link
    ));
    // A link that stays inside is followed.
    fs::remove_file(&link).unwrap_or_else(|e| panic!("{e}"));
    root.write("leaky/real.txt", b"inside");
    std::os::unix::fs::symlink(root.path().join("leaky/real.txt"), &link)
        .unwrap_or_else(|e| panic!("{e}"));
    let skills = SkillsDirectory::open(root.path()).unwrap_or_else(|e| panic!("{e}"));
    let text = skills
        .read_file("skill://leaky/secret.txt")
        .ok()
        .and_then(|c| c.text);
    assert_eq!(text.as_deref(), Some("inside"));
    // A link to a directory is not followed, inside or not.
    fs::remove_file(&link).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(root.path(), &link).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        SkillsDirectory::open(root.path()),
        Err(SkillsError::NotARegularFile(_))
    ));
}

#[test]
fn a_file_that_is_not_regular_is_refused() {
    let root = Scratch::new("socket");
    root.skill("sock");
    let socket = root.path().join("sock/listener");
    let _listener =
        std::os::unix::net::UnixListener::bind(&socket).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        SkillsDirectory::open(root.path()),
        Err(SkillsError::NotARegularFile(p)) if p == socket
    ));
    assert!(matches!(
        scan::read_file(&socket, 10),
        Err(SkillsError::Io { .. } | SkillsError::NotARegularFile(_))
    ));
}

#[test]
fn limits_are_typed_errors() {
    let root = Scratch::new("limits");
    root.skill("big");
    root.write("big/data.bin", &[0xff_u8; 2000]);
    let open = |b: SkillsBuilder| b.open().map(|_| ()).map_err(|e| e.to_string());
    let big = || SkillsDirectory::builder(root.path());
    assert!(matches!(
        big().max_file_bytes(1000).open(),
        Err(SkillsError::FileTooLarge {
            size: 2000,
            limit: 1000,
            ..
        })
    ));
    assert!(matches!(
        big().max_skill_bytes(1500).open(),
        Err(SkillsError::SkillTooLarge { limit: 1500, .. })
    ));
    assert!(matches!(
        big().max_files_per_skill(1).open(),
        Err(SkillsError::TooManyFiles {
            count: 2,
            limit: 1,
            ..
        })
    ));
    assert!(matches!(
        big().max_total_bytes(100).open(),
        Err(SkillsError::TotalTooLarge { limit: 100 })
    ));
    assert!(matches!(
        big().max_entries(2).open(),
        Err(SkillsError::TooManyEntries(2))
    ));
    root.write("big/a/b/c.md", b"deep");
    assert!(matches!(
        big().max_depth(2).open(),
        Err(SkillsError::TooDeep(_))
    ));
    assert_eq!(open(big()), Ok(()));
    // A binary file is served as base64.
    let skills = SkillsDirectory::open(root.path()).unwrap_or_else(|e| panic!("{e}"));
    let read = skills
        .read_file("skill://big/data.bin")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(read.text.is_none() && read.blob.is_some());
}

#[test]
fn manifests_must_name_their_directory() {
    for (dir, text, why) in [
        (
            "wrong",
            "---\nname: right\ndescription: d\n---\n",
            "not its directory's",
        ),
        (
            "Bad_Name",
            "---\nname: Bad_Name\ndescription: d\n---\n",
            "naming rules",
        ),
        ("plain", "no frontmatter\n", "frontmatter"),
    ] {
        let root = Scratch::new("manifest");
        root.write(&format!("{dir}/SKILL.md"), text.as_bytes());
        match SkillsDirectory::open(root.path()) {
            Err(e @ SkillsError::Manifest { .. }) => assert!(e.to_string().contains(why), "{e}"),
            other => panic!("{dir}: {other:?}"),
        }
    }
    let root = Scratch::new("odd-name");
    root.skill("ok");
    root.write("ok/has space.md", b"x");
    assert!(matches!(
        SkillsDirectory::open(root.path()),
        Err(SkillsError::BadName(_))
    ));
}
