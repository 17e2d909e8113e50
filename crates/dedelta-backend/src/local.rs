//! The local-directory backend.
//!
//! Layout: `config`, `containers/<2 hex>/<64 hex>`, `snapshots/<64 hex>`, `locks/<name>`.
//! Writes go to a temp file in the target folder, are fsynced, renamed into place, and the
//! folder is fsynced: so an object is either absent or whole and durable (locks are whole but
//! not fsynced, see [`is_durable`]). Temp files start with `.tmp-` and are ignored by `list`.

use crate::{Backend, BackendError as Error, FileKind, IoContext, Result};
use std::fs::{self, File};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A repository in a local directory.
#[derive(Debug)]
pub struct LocalBackend {
    root: PathBuf,
    tmp_counter: AtomicU64,
}

impl LocalBackend {
    /// A backend rooted at `root` (which need not exist yet).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalBackend {
            root: root.into(),
            tmp_counter: AtomicU64::new(0),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates the folder layout.
    pub fn create_layout(&self) -> Result<()> {
        for kind in [FileKind::Container, FileKind::Snapshot, FileKind::Lock] {
            let d = self.root.join(kind.dir());
            fs::create_dir_all(&d).ctx(|| format!("creating {}", d.display()))?;
        }
        sync_dir(&self.root)
    }

    fn path(&self, kind: FileKind, name: &str) -> PathBuf {
        match kind {
            FileKind::Config => self.root.join("config"),
            FileKind::Container => {
                let shard = name.get(..2).unwrap_or("00");
                self.root.join(kind.dir()).join(shard).join(name)
            }
            _ => self.root.join(kind.dir()).join(name),
        }
    }

    fn tmp_path(&self, target: &Path) -> PathBuf {
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let dir = target.parent().unwrap_or(&self.root);
        dir.join(format!(".tmp-{}-{n}", std::process::id()))
    }
}

/// Whether writes and deletes of `kind` are fsynced. Locks are not: a lock matters only while
/// its holder runs, and a crash of the machine ends the holder too (a lock that survived
/// would only be stale). Other processes see a lock once it is renamed into place, synced or
/// not; the fsyncs were a third of a one-byte backup's wait on a busy disk (issue 20).
fn is_durable(kind: FileKind) -> bool {
    kind != FileKind::Lock
}

/// fsyncs a directory so that a rename or create in it is durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .ctx(|| format!("syncing directory {}", dir.display()))
}

fn read_error(e: std::io::Error, path: &Path, kind: FileKind, name: &str) -> Error {
    if e.kind() == ErrorKind::NotFound {
        kind.missing(name)
    } else {
        Error::io(format!("reading {}", path.display()), e)
    }
}

impl LocalBackend {
    /// Calls `f` with every entry of `kind`'s folder (for containers, of its subfolders) and
    /// its name, leaving out temporary files; a missing folder has none.
    fn each_file(
        &self,
        kind: FileKind,
        mut f: impl FnMut(&fs::DirEntry, String) -> Result<()>,
    ) -> Result<()> {
        let dir = self.root.join(kind.dir());
        if kind != FileKind::Container {
            return each_entry(&dir, &mut f);
        }
        let mut shards = Vec::new();
        each_entry(&dir, &mut |ent, _| {
            if ent.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                shards.push(ent.path());
            }
            Ok(())
        })?;
        for d in shards {
            each_entry(&d, &mut f)?;
        }
        Ok(())
    }
}

/// Calls `f` with every entry of the folder `d` but temporary files, and its name; a missing
/// folder has none.
fn each_entry(d: &Path, f: &mut dyn FnMut(&fs::DirEntry, String) -> Result<()>) -> Result<()> {
    let rd = match fs::read_dir(d) {
        Ok(rd) => rd,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(format!("listing {}", d.display()), e)),
    };
    for ent in rd {
        let ent = ent.ctx(|| format!("listing {}", d.display()))?;
        let name = ent.file_name().to_string_lossy().into_owned();
        if !name.starts_with(".tmp-") {
            f(&ent, name)?;
        }
    }
    Ok(())
}

impl Backend for LocalBackend {
    fn get(&self, kind: FileKind, name: &str) -> Result<Vec<u8>> {
        let p = self.path(kind, name);
        fs::read(&p).map_err(|e| read_error(e, &p, kind, name))
    }

    fn get_range(&self, kind: FileKind, name: &str, offset: i64, len: usize) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        self.get_range_into(kind, name, offset, len, &mut buf)?;
        Ok(buf)
    }

    fn get_tail(&self, kind: FileKind, name: &str, max_len: usize) -> Result<Vec<u8>> {
        let p = self.path(kind, name);
        let mut f = File::open(&p).map_err(|e| read_error(e, &p, kind, name))?;
        let size = f
            .metadata()
            .ctx(|| format!("reading the size of {}", p.display()))?
            .len();
        let len = usize::try_from(size).map_or(max_len, |s| s.min(max_len));
        f.seek(SeekFrom::Start(size - len as u64))
            .ctx(|| format!("seeking in {}", p.display()))?;
        let mut buf = vec![0; len];
        f.read_exact(&mut buf)
            .ctx(|| format!("reading the last {len} bytes of {}", p.display()))?;
        Ok(buf)
    }

    fn get_range_into(
        &self,
        kind: FileKind,
        name: &str,
        offset: i64,
        len: usize,
        buf: &mut Vec<u8>,
    ) -> Result<()> {
        let p = self.path(kind, name);
        let mut f = File::open(&p).map_err(|e| read_error(e, &p, kind, name))?;
        let pos = if offset < 0 {
            SeekFrom::End(offset)
        } else {
            SeekFrom::Start(offset as u64)
        };
        f.seek(pos).ctx(|| format!("seeking in {}", p.display()))?;
        buf.clear();
        buf.resize(len, 0);
        f.read_exact(buf)
            .ctx(|| format!("reading {len} bytes at {offset} of {}", p.display()))
    }

    fn put(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<()> {
        let p = self.path(kind, name);
        let dir = p.parent().unwrap_or(&self.root).to_path_buf();
        if !dir.exists() {
            fs::create_dir_all(&dir).ctx(|| format!("creating {}", dir.display()))?;
            if let Some(parent) = dir.parent() {
                sync_dir(parent)?;
            }
        }
        let tmp = self.tmp_path(&p);
        let durable = is_durable(kind);
        let write = || -> std::io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(data)?;
            if durable {
                f.sync_all()?;
            }
            fs::rename(&tmp, &p)
        };
        if let Err(e) = write() {
            let _ = fs::remove_file(&tmp);
            return Err(Error::io(format!("writing {}", p.display()), e));
        }
        if durable {
            sync_dir(&dir)?;
        }
        Ok(())
    }

    fn create_new(&self, kind: FileKind, name: &str, data: &[u8]) -> Result<bool> {
        // Written whole to a temp file, then linked into place: link(2) fails if the name
        // exists, and the object appears complete or not at all (a disk filling up while the
        // bytes are written leaves no empty object behind).
        let p = self.path(kind, name);
        let dir = p.parent().unwrap_or(&self.root).to_path_buf();
        fs::create_dir_all(&dir).ctx(|| format!("creating {}", dir.display()))?;
        let tmp = self.tmp_path(&p);
        let written = (|| -> std::io::Result<()> {
            let mut f = File::create(&tmp)?;
            f.write_all(data)?;
            f.sync_all()
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(Error::io(format!("writing {}", p.display()), e));
        }
        let linked = fs::hard_link(&tmp, &p);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(Error::io(format!("creating {}", p.display()), e)),
        }
        sync_dir(&dir)?;
        Ok(true)
    }

    fn list(&self, kind: FileKind) -> Result<Vec<(String, u64)>> {
        let mut out = Vec::new();
        self.each_file(kind, |ent, name| {
            let md = ent
                .metadata()
                .ctx(|| format!("stat {}", ent.path().display()))?;
            if md.is_file() {
                out.push((name, md.len()));
            }
            Ok(())
        })?;
        out.sort();
        Ok(out)
    }

    fn list_names(&self, kind: FileKind) -> Result<Vec<String>> {
        let mut out = Vec::new();
        self.each_file(kind, |ent, name| {
            // The file type comes with the directory entry (no `stat`, except on file
            // systems that do not record it, where the standard library asks).
            let ty = ent
                .file_type()
                .ctx(|| format!("stat {}", ent.path().display()))?;
            if ty.is_file() {
                out.push(name);
            }
            Ok(())
        })?;
        out.sort();
        Ok(out)
    }

    fn delete(&self, kind: FileKind, name: &str) -> Result<()> {
        let p = self.path(kind, name);
        match fs::remove_file(&p) {
            Ok(()) if !is_durable(kind) => Ok(()),
            Ok(()) => sync_dir(p.parent().unwrap_or(&self.root)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("deleting {}", p.display()), e)),
        }
    }

    fn size(&self, kind: FileKind, name: &str) -> Result<u64> {
        let p = self.path(kind, name);
        fs::metadata(&p)
            .map(|m| m.len())
            .map_err(|e| read_error(e, &p, kind, name))
    }

    fn exists(&self, kind: FileKind, name: &str) -> Result<bool> {
        Ok(self.path(kind, name).exists())
    }

    fn location(&self) -> String {
        self.root.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 12: a lock written with a plain create could be left empty by a full disk.
    /// `create_new` publishes the object whole (temp file, then link) and leaves no temp file.
    #[test]
    fn create_new_is_whole_and_exclusive() {
        let tmp = tempfile::tempdir().unwrap();
        let b = LocalBackend::new(tmp.path());
        b.create_layout().unwrap();
        assert!(b.create_new(FileKind::Lock, "x", b"first").unwrap());
        assert!(!b.create_new(FileKind::Lock, "x", b"second").unwrap());
        assert_eq!(b.get(FileKind::Lock, "x").unwrap(), b"first");
        let names: Vec<_> = fs::read_dir(tmp.path().join("locks"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("x")]);
        assert!(matches!(
            b.get(FileKind::Snapshot, "nope"),
            Err(Error::Missing { .. })
        ));
    }
}
