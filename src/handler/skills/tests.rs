//! The safety of [`SkillsDirectory::open`] and what it serves.

use std::fs;

use super::*;
use crate::handler::fs::Scratch;

impl Scratch {
    /// A skill `dir` whose last segment is its name.
    fn skill(&self, dir: &str) {
        let name = dir.rsplit('/').next().unwrap_or(dir);
        let text = format!("---\nname: {name}\ndescription: The {name} skill.\n---\n\nBody.\n");
        self.write(&format!("{dir}/SKILL.md"), text.as_bytes());
    }
}

#[test]
fn a_directory_of_skills_is_served_with_digests_and_directories() {
    let root = Scratch::new("skills-served");
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
    let outside = Scratch::new("skills-outside");
    outside.write("secret.txt", b"secret");
    let root = Scratch::new("skills-escape");
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
    // A link to a directory is not followed, inside its skill or not.
    fs::remove_file(&link).unwrap_or_else(|e| panic!("{e}"));
    fs::create_dir_all(root.path().join("leaky/sub")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("sub", &link).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        SkillsDirectory::open(root.path()),
        Err(SkillsError::NotARegularFile(_))
    ));
    fs::remove_file(&link).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(root.path(), &link).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        SkillsDirectory::open(root.path()),
        Err(SkillsError::Escapes(_))
    ));
}

/// A symlink may point only at a file of its own skill: not at another skill's file,
/// nor at a hidden file (`.env`), even one inside the skill; a relative link inside it
/// is served.
#[test]
fn a_symlink_serves_only_its_own_skills_visible_files() {
    let root = Scratch::new("skills-own-skill");
    root.skill("first");
    root.skill("second");
    root.write("second/private.md", b"the second skill's");
    root.write("first/.env", b"SECRET=1");
    root.write("first/notes/real.md", b"first's own");
    let link = root.path().join("first/link.md");
    let relink = |target: &str| {
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link).unwrap_or_else(|e| panic!("{e}"));
        SkillsDirectory::open(root.path())
    };
    assert!(matches!(
        relink("../second/private.md"),
        Err(SkillsError::Escapes(p)) if p == link
    ));
    assert!(matches!(
        relink(".env"),
        Err(SkillsError::HiddenTarget(p)) if p == link
    ));
    let served = relink("notes/../notes/real.md").unwrap_or_else(|e| panic!("{e}"));
    let text = served
        .read_file("skill://first/link.md")
        .ok()
        .and_then(|c| c.text);
    assert_eq!(text.as_deref(), Some("first's own"));
    // A hidden target is served when hidden files are.
    let _ = relink(".env");
    let served = SkillsDirectory::builder(root.path())
        .serve_dot_files(true)
        .open()
        .unwrap_or_else(|e| panic!("{e}"));
    let text = served
        .read_file("skill://first/link.md")
        .ok()
        .and_then(|c| c.text);
    assert_eq!(text.as_deref(), Some("SECRET=1"));
}

/// Hidden files are neither listed nor served, unless the builder asks for them.
#[test]
fn dot_files_are_not_served_by_default() {
    let root = Scratch::new("skills-dot");
    root.skill("dotty");
    root.write("dotty/.env", b"SECRET=1");
    root.write("dotty/.git/config", b"[remote]");
    let skills = SkillsDirectory::open(root.path()).unwrap_or_else(|e| panic!("{e}"));
    assert!(skills.read_file("skill://dotty/.env").is_err());
    assert!(skills.read_file("skill://dotty/.git/config").is_err());
    let listed = skills
        .get("skill://dotty/SKILL.md")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(listed.resources.len(), 1, "{:?}", listed.resources);
    let all = SkillsDirectory::builder(root.path())
        .serve_dot_files(true)
        .open()
        .unwrap_or_else(|e| panic!("{e}"));
    let text = all
        .read_file("skill://dotty/.env")
        .ok()
        .and_then(|c| c.text);
    assert_eq!(text.as_deref(), Some("SECRET=1"));
}

/// A hard link is refused: its other name may be a secret anywhere on the file system.
#[test]
fn a_hard_link_is_refused() {
    let outside = Scratch::new("skills-hard-outside");
    outside.write("secret.txt", b"secret");
    let root = Scratch::new("skills-hard");
    root.skill("linked");
    let link = root.path().join("linked/secret.txt");
    // Same file system (both under the temporary folder), so the link can be made.
    fs::hard_link(outside.path().join("secret.txt"), &link).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        SkillsDirectory::open(root.path()),
        Err(SkillsError::HardLink(p)) if p == link
    ));
}

/// A FIFO is refused after it is opened, and opening it does not block (it would wait
/// for a writer forever without `O_NONBLOCK`).
#[test]
fn a_fifo_is_refused_without_blocking() {
    let root = Scratch::new("skills-fifo");
    root.skill("piped");
    let fifo = root.path().join("piped/pipe.md");
    // mkfifo(1): the crate's tests allow no unsafe.
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap_or_else(|e| panic!("mkfifo: {e}"));
    assert!(made.success(), "mkfifo {}", fifo.display());
    let (tx, rx) = std::sync::mpsc::channel();
    let path = root.path().to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(SkillsDirectory::open(&path).map(|_| ()));
    });
    let opened = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .unwrap_or_else(|_| {
            // Unblock the reader the old code left waiting, so the thread ends.
            let _ = fs::OpenOptions::new().write(true).open(&fifo);
            panic!("opening a skills folder with a FIFO blocked");
        });
    assert!(
        matches!(opened, Err(SkillsError::NotARegularFile(ref p)) if *p == fifo),
        "{opened:?}"
    );
}

/// A file larger than the limit is refused, its size named.
#[test]
fn a_file_over_the_limit_is_refused() {
    let root = Scratch::new("skills-large");
    root.skill("large");
    root.write("large/big.txt", &[b'x'; 4097]);
    let opened = SkillsDirectory::builder(root.path())
        .max_file_bytes(4096)
        .open();
    assert!(
        matches!(
            opened,
            Err(SkillsError::FileTooLarge {
                size: 4097,
                limit: 4096,
                ..
            })
        ),
        "{opened:?}"
    );
}

/// A folder swapped for a symlink out of the root while the root is read: whatever
/// the timing, nothing from outside is ever served (a swap mid-read may fail the
/// opening, which is fine).
#[test]
fn a_folder_swapped_for_a_symlink_never_leads_out() {
    let outside = Scratch::new("skills-swap-outside");
    outside.write("file.md", b"OUTSIDE");
    let root = Scratch::new("skills-swap");
    root.skill("swapped");
    root.write("swapped/real/file.md", b"inside");
    let real = root.path().join("swapped/real");
    let parked = root.path().join("swapped/.parked");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = {
        let (stop, real, parked, outside) = (
            stop.clone(),
            real.clone(),
            parked.clone(),
            outside.path().to_path_buf(),
        );
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // real/ becomes a symlink out of the root, then the folder again.
                let _ = fs::rename(&real, &parked);
                let _ = std::os::unix::fs::symlink(&outside, &real);
                let _ = fs::remove_file(&real);
                let _ = fs::rename(&parked, &real);
            }
        })
    };
    let mut served = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        if let Ok(skills) = SkillsDirectory::open(root.path()) {
            let text = skills
                .read_file("skill://swapped/real/file.md")
                .ok()
                .and_then(|c| c.text);
            assert_ne!(text.as_deref(), Some("OUTSIDE"), "read through the swap");
            served += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = flipper.join();
    assert!(served > 0, "never opened while the folder was swapped");
}

#[test]
fn a_file_that_is_not_regular_is_refused() {
    let root = Scratch::new("skills-socket");
    root.skill("sock");
    let socket = root.path().join("sock/listener");
    let _listener =
        std::os::unix::net::UnixListener::bind(&socket).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        SkillsDirectory::open(root.path()),
        Err(SkillsError::NotARegularFile(p)) if p == socket
    ));
}

#[test]
fn limits_are_typed_errors() {
    let root = Scratch::new("skills-limits");
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
        let root = Scratch::new("skills-manifest");
        root.write(&format!("{dir}/SKILL.md"), text.as_bytes());
        match SkillsDirectory::open(root.path()) {
            Err(e @ SkillsError::Manifest { .. }) => assert!(e.to_string().contains(why), "{e}"),
            other => panic!("{dir}: {other:?}"),
        }
    }
    let root = Scratch::new("skills-odd-name");
    root.skill("ok");
    root.write("ok/has space.md", b"x");
    assert!(matches!(
        SkillsDirectory::open(root.path()),
        Err(SkillsError::BadName(_))
    ));
}
