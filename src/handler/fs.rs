//! Opening files beneath a folder without ever leaving it: the primitive the skills
//! directory uses, public so that a server serving a folder (examples/files) does the
//! same.
//!
//! A [`Dir`] holds its folder open; every path opened through it is resolved by the
//! kernel relative to that descriptor with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`, or, on kernels without `openat2` (before 5.6, `ENOSYS`, or a
//! seccomp filter's `EPERM`), one component at a time with `openat(O_NOFOLLOW)`. Either way no symlink is followed, at
//! any depth, and no `..` climbs out, so a folder swapped for a symlink between a check
//! and the open cannot redirect it. Files are opened with `O_NONBLOCK` (a FIFO swapped in
//! cannot block the open) and checked on the descriptor: [`read_regular`] reads only a
//! regular file with one link, and at most its limit plus one byte (a file that grows
//! after it was measured is still caught).
//!
//! `unsafe` here is for the system calls std does not wrap (`openat2`, `openat`,
//! `fstatat`, `readlinkat`, `fdopendir`/`readdir`); each block says why it is sound, and
//! only safe functions leave the module.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Why a path could not be opened beneath its folder.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Empty, absolute, or with a `..` component: not a path below the folder.
    #[error("{0:?} is not a relative path below the folder")]
    NotBeneath(PathBuf),
    /// A symlink somewhere on the path (no symlink is followed).
    #[error("{0:?} goes through a symlink")]
    Symlink(PathBuf),
    /// The system call failed (missing, not a directory, permissions...).
    #[error("{path:?}: {source}")]
    Io {
        /// The path asked for.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// Why an opened file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// A FIFO, socket, device or directory.
    #[error("not a regular file")]
    NotRegular,
    /// A regular file with more than one name: its other name may be anywhere.
    #[error("a hard link ({0} names)")]
    HardLink(u64),
    /// Over the limit.
    #[error("{size} bytes, over the limit of {limit}")]
    TooLarge {
        /// Its size (at least).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// `fstat` or the read failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// What an entry of a folder is, as `lstat` sees it (a symlink is not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A regular file.
    File,
    /// A folder.
    Dir,
    /// A symlink.
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// A folder held open: what is opened through it stays beneath it.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
}

impl Dir {
    /// Opens the folder at `path`. The path itself is the caller's (an operator's
    /// argument): symlinks in it are followed, once, here.
    pub fn open(path: &Path) -> io::Result<Self> {
        let c = cstring(path.as_os_str())?;
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: `c` is a valid NUL-terminated string that outlives the call; the
        // returned descriptor, when not -1, is new and owned by nobody else.
        let fd = unsafe { libc::open(c.as_ptr(), flags) };
        owned(fd).map(|fd| Self { fd })
    }

    /// The folder at `relative` below this one, opened beneath it.
    pub fn open_dir(&self, relative: &Path) -> Result<Self, OpenError> {
        let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
        open_beneath(self.fd.as_fd(), relative, flags).map(|fd| Self { fd })
    }

    /// The file at `relative` below this one, opened beneath it for reading, without
    /// blocking on a FIFO. Check it with [`read_regular`] before trusting it is a file.
    pub fn open_file(&self, relative: &Path) -> Result<File, OpenError> {
        let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
        open_beneath(self.fd.as_fd(), relative, flags).map(File::from)
    }

    /// The bytes of the regular file at `relative`: [`Dir::open_file`], then
    /// [`read_regular`].
    pub fn read(&self, relative: &Path, limit: u64) -> Result<Vec<u8>, ReadFileError> {
        let file = self.open_file(relative)?;
        Ok(read_regular(file, limit)?)
    }

    /// The names in this folder (not `.` or `..`), unsorted, each with its kind.
    pub fn entries(&self) -> io::Result<Vec<(OsString, Kind)>> {
        let mut out = Vec::new();
        for name in self.names()? {
            let kind = self.kind(&name)?;
            out.push((name, kind));
        }
        Ok(out)
    }

    /// What the entry `name` of this folder is, without following a symlink.
    pub fn kind(&self, name: &OsStr) -> io::Result<Kind> {
        kind_at(self.fd.as_fd(), name)
    }

    /// The target of the symlink `name` in this folder, as written (not resolved).
    pub fn read_link(&self, name: &OsStr) -> io::Result<PathBuf> {
        let c = cstring(name)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize];
        // SAFETY: `buf` is writable for `buf.len()` bytes and readlinkat writes at most
        // that many; `c` is NUL-terminated.
        let n = unsafe {
            libc::readlinkat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        if n >= buf.len() {
            return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
        }
        buf.truncate(n);
        Ok(PathBuf::from(OsString::from_vec(buf)))
    }

    fn names(&self) -> io::Result<Vec<OsString>> {
        // fdopendir takes the descriptor: give it a duplicate, and rewind, since a
        // duplicate shares the offset of ours.
        let dup = self.fd.try_clone()?;
        let raw: RawFd = std::os::fd::IntoRawFd::into_raw_fd(dup);
        // SAFETY: `raw` is a valid, open directory descriptor this function owns; on
        // success the DIR owns it (closedir closes it), on failure we close it.
        let dir = unsafe { libc::fdopendir(raw) };
        if dir.is_null() {
            let error = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `raw` is still ours to close.
            drop(unsafe { OwnedFd::from_raw_fd(raw) });
            return Err(error);
        }
        let mut names = Vec::new();
        // SAFETY: `dir` is a valid DIR* until the closedir below, used by this thread
        // only; readdir's entry is read before the next readdir call, and its d_name is
        // NUL-terminated. errno is set to 0 first so that the end of the folder (NULL,
        // errno untouched) tells from an error (NULL, errno set).
        let result = unsafe {
            libc::rewinddir(dir);
            loop {
                *libc::__errno_location() = 0;
                let entry = libc::readdir(dir);
                if entry.is_null() {
                    let errno = *libc::__errno_location();
                    break if errno == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::from_raw_os_error(errno))
                    };
                }
                let name = CStr::from_ptr((*entry).d_name.as_ptr()).to_bytes();
                if name != b"." && name != b".." {
                    names.push(OsString::from_vec(name.to_vec()));
                }
            }
        };
        // SAFETY: `dir` is valid and closed once.
        unsafe { libc::closedir(dir) };
        result.map(|()| names)
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Why [`Dir::read`] did not read a file.
#[derive(Debug, thiserror::Error)]
pub enum ReadFileError {
    /// It could not be opened beneath the folder.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// It was opened, but is no regular file, has other names, or is too large.
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// Reads an opened file, checked on its descriptor: a regular file (no FIFO, socket,
/// device or directory), with one name (no hard link), at most `limit` bytes, read with
/// `take(limit + 1)` so that one that grew since it was measured is refused too.
pub fn read_regular(file: File, limit: u64) -> Result<Vec<u8>, ReadError> {
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular);
    }
    if meta.nlink() > 1 {
        return Err(ReadError::HardLink(meta.nlink()));
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge {
            size: meta.len(),
            limit,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge {
            size: bytes.len() as u64,
            limit,
        });
    }
    Ok(bytes)
}

/// Opens `relative` beneath `dir` with `flags`: `openat2` where the kernel has it, else
/// one `openat` per component. No symlink is followed, `..` and absolute paths are
/// refused before any call.
pub fn open_beneath(
    dir: BorrowedFd<'_>,
    relative: &Path,
    flags: i32,
) -> Result<OwnedFd, OpenError> {
    if OPENAT2_MISSING.load(Ordering::Relaxed) {
        return walk_beneath(dir, relative, flags);
    }
    match openat2_beneath(dir, relative, flags) {
        Err(OpenError::Io { source, .. }) if source.raw_os_error() == Some(libc::ENOSYS) => {
            OPENAT2_MISSING.store(true, Ordering::Relaxed);
            walk_beneath(dir, relative, flags)
        }
        // A seccomp filter that does not know openat2 (older container runtimes) answers
        // EPERM; the walk is as safe, and gives the real error if there is one.
        Err(OpenError::Io { source, .. }) if source.raw_os_error() == Some(libc::EPERM) => {
            walk_beneath(dir, relative, flags)
        }
        other => other,
    }
}

/// Set once `openat2` answered `ENOSYS`: this kernel has none.
static OPENAT2_MISSING: AtomicBool = AtomicBool::new(false);

/// `struct open_how` of linux/openat2.h (libc's is `non_exhaustive`, so it cannot be
/// built outside libc).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// The components of `relative`, each a plain name; `NotBeneath` for anything else.
fn components(relative: &Path) -> Result<Vec<&OsStr>, OpenError> {
    let mut out = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            _ => return Err(OpenError::NotBeneath(relative.to_path_buf())),
        }
    }
    if out.is_empty() {
        return Err(OpenError::NotBeneath(relative.to_path_buf()));
    }
    Ok(out)
}

fn error(relative: &Path, source: io::Error) -> OpenError {
    match source.raw_os_error() {
        // ELOOP: a symlink met under RESOLVE_NO_SYMLINKS or O_NOFOLLOW; EXDEV: a step
        // out of the folder under RESOLVE_BENEATH.
        Some(libc::ELOOP | libc::EXDEV) => OpenError::Symlink(relative.to_path_buf()),
        _ => OpenError::Io {
            path: relative.to_path_buf(),
            source,
        },
    }
}

/// One `openat2` call, resolved by the kernel beneath `dir` with no symlink.
pub(crate) fn openat2_beneath(
    dir: BorrowedFd<'_>,
    relative: &Path,
    flags: i32,
) -> Result<OwnedFd, OpenError> {
    components(relative)?;
    let c = cstring(relative.as_os_str()).map_err(|e| error(relative, e))?;
    let how = OpenHow {
        flags: u64::from(flags.cast_unsigned()),
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: the arguments are what openat2(2) takes: a valid directory descriptor
    // (borrowed for the call), a NUL-terminated path, a pointer to an open_how of the
    // size passed; the kernel reads them and returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &raw const how,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let fd = i32::try_from(fd).unwrap_or(-1);
    owned(fd).map_err(|e| error(relative, e))
}

/// One `openat(O_NOFOLLOW)` per component: each folder with `O_DIRECTORY`, the last with
/// `flags`; a symlink anywhere fails with `ELOOP` (or `ENOTDIR` for a folder).
pub(crate) fn walk_beneath(
    dir: BorrowedFd<'_>,
    relative: &Path,
    flags: i32,
) -> Result<OwnedFd, OpenError> {
    let names = components(relative)?;
    let mut held: Option<OwnedFd> = None;
    let last = names.len() - 1;
    for (i, name) in names.into_iter().enumerate() {
        let at = held.as_ref().map_or(dir, AsFd::as_fd);
        let step = if i == last {
            flags | libc::O_NOFOLLOW
        } else {
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC
        };
        let c = cstring(name).map_err(|e| error(relative, e))?;
        // SAFETY: `at` is a valid directory descriptor borrowed for the call, `c` a
        // NUL-terminated single name; the result is a new descriptor or -1.
        let fd = unsafe { libc::openat(at.as_raw_fd(), c.as_ptr(), step, 0) };
        let fd = owned(fd).map_err(|e| {
            // A symlink where a folder is expected fails with ENOTDIR under O_NOFOLLOW:
            // tell it as the symlink it is.
            if i < last && e.raw_os_error() == Some(libc::ENOTDIR) {
                let parent = held.as_ref().map_or(dir, AsFd::as_fd);
                if kind_at(parent, name).is_ok_and(|k| k == Kind::Symlink) {
                    return OpenError::Symlink(relative.to_path_buf());
                }
            }
            error(relative, e)
        })?;
        held = Some(fd);
    }
    held.ok_or_else(|| OpenError::NotBeneath(relative.to_path_buf()))
}

/// What the entry `name` of folder `dir` is, without following a symlink (`fstatat`).
fn kind_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Kind> {
    let c = cstring(name)?;
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `dir` is a valid descriptor borrowed for the call, `c` is NUL-terminated
    // and `stat` is writable memory of the right type; fstatat fills it when it returns
    // 0, and it is read only then.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            stat.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatat returned 0, so it wrote the whole struct.
    let mode = unsafe { stat.assume_init() }.st_mode & libc::S_IFMT;
    Ok(match mode {
        libc::S_IFREG => Kind::File,
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        _ => Kind::Other,
    })
}

fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn owned(fd: i32) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a non-negative return of open/openat/openat2 is a new descriptor that
    // nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A fresh directory under the system's temporary one, removed when dropped: for the
/// tests here and those of `skills`.
#[cfg(test)]
pub(crate) struct Scratch(PathBuf);

#[cfg(test)]
impl Scratch {
    pub(crate) fn new(name: &str) -> Self {
        let mut random = [0u8; 8];
        let _ = getrandom::fill(&mut random);
        let dir = std::env::temp_dir().join(format!(
            "otpmcp-{name}-{}-{}",
            std::process::id(),
            u64::from_le_bytes(random)
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Self(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `bytes` to `rel`, creating the folders on the way.
    pub(crate) fn write(&self, rel: &str, bytes: &[u8]) {
        let path = self.0.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{}: {e}", parent.display()));
        }
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

#[cfg(test)]
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Opener = fn(BorrowedFd<'_>, &Path, i32) -> Result<OwnedFd, OpenError>;

    /// Both ways of opening: `openat2`, and the walk kernels without it get.
    const OPENERS: [(&str, Opener); 2] = [("openat2", openat2_beneath), ("walk", walk_beneath)];

    #[test]
    fn nothing_opens_outside_the_folder() {
        let outside = Scratch::new("fs-outside");
        outside.write("secret", b"secret");
        let root = Scratch::new("fs-root");
        root.write("a/b/file", b"inside");
        // An intermediate folder that is a symlink out of the root (as if swapped in).
        std::os::unix::fs::symlink(&outside.0, root.0.join("a/swapped"))
            .unwrap_or_else(|e| panic!("{e}"));
        // A last component that is a symlink, even to a file inside.
        std::os::unix::fs::symlink(root.0.join("a/b/file"), root.0.join("a/link"))
            .unwrap_or_else(|e| panic!("{e}"));
        let dir = Dir::open(&root.0).unwrap_or_else(|e| panic!("{e}"));
        let flags = libc::O_RDONLY | libc::O_CLOEXEC;
        for (how, open) in OPENERS {
            let read = |p: &str| {
                open(dir.as_fd(), Path::new(p), flags).map(|fd| {
                    let mut text = String::new();
                    File::from(fd).read_to_string(&mut text).map(|_| text)
                })
            };
            assert!(
                matches!(read("a/b/file"), Ok(Ok(ref t)) if t == "inside"),
                "{how}"
            );
            for path in ["a/swapped/secret", "a/link"] {
                assert!(
                    matches!(read(path), Err(OpenError::Symlink(_))),
                    "{how} {path}: {:?}",
                    read(path)
                );
            }
            for path in ["../x", "a/../../x", "/etc/passwd", ""] {
                assert!(
                    matches!(read(path), Err(OpenError::NotBeneath(_))),
                    "{how} {path}"
                );
            }
        }
    }
}
