//! Runs on: the caller's thread (inside the walker, and for `backup --dry-run`).
//!
//! Which entries of the sources a backup stores: restic's selection options (`--exclude`,
//! `--iexclude`, `--exclude-caches`, `--exclude-if-present`, `--exclude-larger-than`,
//! `--one-file-system`) as one [`Selection`], and [`SelectedWalk`], the walk of one source
//! that applies it. The backup's walker and the dry run both walk through it, so a dry run
//! lists exactly what a backup would read.

use crate::error::{Error, Result};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The signature a `CACHEDIR.TAG` starts with (<https://bford.info/cachedir/>).
pub const CACHEDIR_TAG_SIGNATURE: &str = "Signature: 8a477f597d28d172789f06886806bc55";

/// What to leave out of a backup (restic's names).
#[derive(Clone, Debug, Default)]
pub struct SelectOptions {
    /// Glob patterns; an entry is skipped when one matches its full path or its name.
    pub excludes: Vec<String>,
    /// The same, ignoring case.
    pub iexcludes: Vec<String>,
    /// Skip a directory that holds a `CACHEDIR.TAG` starting with the cache directory
    /// signature (`--exclude-caches`).
    pub exclude_caches: bool,
    /// Skip a directory that holds a file of this name; `NAME:HEADER` only if that file starts
    /// with HEADER (`--exclude-if-present`).
    pub exclude_if_present: Vec<String>,
    /// Skip regular files larger than this many bytes.
    pub exclude_larger_than: Option<u64>,
}

/// A marker file that excludes its directory.
#[derive(Debug)]
struct Marker {
    name: OsString,
    header: Option<Vec<u8>>,
}

/// The compiled [`SelectOptions`].
#[derive(Debug)]
pub struct Selection {
    excludes: GlobSet,
    iexcludes: GlobSet,
    markers: Vec<Marker>,
    larger_than: Option<u64>,
}

impl Selection {
    /// Compiles the options.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a pattern that is not a glob, or an empty marker name.
    pub fn new(opts: &SelectOptions) -> Result<Self> {
        let mut markers = Vec::new();
        if opts.exclude_caches {
            markers.push(Marker {
                name: "CACHEDIR.TAG".into(),
                header: Some(CACHEDIR_TAG_SIGNATURE.as_bytes().to_vec()),
            });
        }
        for spec in &opts.exclude_if_present {
            let (name, header) = match spec.split_once(':') {
                Some((n, h)) => (n, Some(h.as_bytes().to_vec())),
                None => (spec.as_str(), None),
            };
            if name.is_empty() || name.contains('/') {
                return Err(Error::InvalidOption(format!(
                    "--exclude-if-present {spec:?}: give a file name, optionally NAME:HEADER"
                )));
            }
            markers.push(Marker {
                name: name.into(),
                header,
            });
        }
        Ok(Selection {
            excludes: globs(&opts.excludes, false)?,
            iexcludes: globs(&opts.iexcludes, true)?,
            markers,
            larger_than: opts.exclude_larger_than,
        })
    }

    /// Whether a pattern matches the entry's full path or its name.
    fn excluded_by_pattern(&self, p: &Path) -> bool {
        [&self.excludes, &self.iexcludes].iter().any(|set| {
            !set.is_empty() && (set.is_match(p) || p.file_name().is_some_and(|n| set.is_match(n)))
        })
    }

    /// Whether the directory `dir` holds one of the marker files.
    fn excluded_by_marker(&self, dir: &Path) -> bool {
        self.markers.iter().any(|m| {
            let f = dir.join(&m.name);
            match &m.header {
                None => std::fs::symlink_metadata(&f).is_ok(),
                Some(h) => std::fs::File::open(&f)
                    .and_then(|file| {
                        let mut start = Vec::with_capacity(h.len());
                        file.take(h.len() as u64).read_to_end(&mut start)?;
                        Ok(start == *h)
                    })
                    .unwrap_or(false),
            }
        })
    }
}

/// One glob set; case-insensitive with `icase`.
fn globs(patterns: &[String], icase: bool) -> Result<GlobSet> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let flag = if icase { "iexclude" } else { "exclude" };
        // A relative pattern with a `/` (`build/out`) matches at any depth, as in restic.
        let anywhere = (!p.starts_with('/') && !p.starts_with("**") && p.contains('/'))
            .then(|| format!("**/{p}"));
        for glob in std::iter::once(p).chain(anywhere.as_ref()) {
            b.add(
                GlobBuilder::new(glob)
                    .case_insensitive(icase)
                    .build()
                    .map_err(|e| Error::InvalidOption(format!("--{flag} pattern {p:?}: {e}")))?,
            );
        }
    }
    b.build().map_err(|e| Error::InvalidOption(e.to_string()))
}

/// What [`SelectedWalk`] yields.
pub enum Entry {
    /// An entry to store, with its `lstat` metadata.
    Selected(walkdir::DirEntry, std::fs::Metadata),
    /// An entry that could not be read (a warning: the backup goes on).
    Unreadable(String),
}

/// The walk of one source (depth first, names sorted, symlinks not followed) with the
/// selection applied: excluded entries and the contents of excluded directories are never
/// visited, and with `one_file_system` a directory on another file system is yielded
/// (kept, as a mount point) but not entered.
pub struct SelectedWalk<'a> {
    it: walkdir::IntoIter,
    selection: &'a Selection,
    one_file_system: bool,
    root_dev: Option<u64>,
}

impl<'a> SelectedWalk<'a> {
    /// Walks `root`.
    pub fn new(root: &Path, selection: &'a Selection, one_file_system: bool) -> Self {
        let it = walkdir::WalkDir::new(root)
            .follow_links(false)
            .follow_root_links(false)
            .sort_by(|a, b| a.file_name().cmp(b.file_name()))
            .into_iter();
        SelectedWalk {
            it,
            selection,
            one_file_system,
            root_dev: None,
        }
    }
}

impl Iterator for SelectedWalk<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        loop {
            let ent = match self.it.next()? {
                Ok(e) => e,
                Err(e) => {
                    let p = e
                        .path()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default();
                    return Some(Entry::Unreadable(format!("{p}: {e}")));
                }
            };
            let is_dir = ent.file_type().is_dir();
            let path = ent.path();
            if self.selection.excluded_by_pattern(path)
                || (is_dir && self.selection.excluded_by_marker(path))
            {
                if is_dir {
                    self.it.skip_current_dir();
                }
                continue;
            }
            let md = match ent.metadata() {
                Ok(m) => m,
                Err(e) => return Some(Entry::Unreadable(format!("{}: {e}", path.display()))),
            };
            if md.is_file() && self.selection.larger_than.is_some_and(|max| md.len() > max) {
                continue;
            }
            if is_dir {
                let root_dev = *self.root_dev.get_or_insert(md.dev());
                if self.one_file_system && md.dev() != root_dev {
                    // A mount point: kept, its contents are another file system's.
                    self.it.skip_current_dir();
                }
            }
            return Some(Entry::Selected(ent, md));
        }
    }
}

/// What `backup --dry-run` found: what a backup with the same options would store.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct DryRun {
    /// Regular files.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Symlinks.
    pub symlinks: u64,
    /// FIFOs, sockets and devices.
    pub special_files: u64,
    /// Bytes of the regular files (as `lstat` gives them).
    pub bytes: u64,
    /// Entries that could not be read.
    pub warnings: Vec<String>,
}

/// Walks `paths` as a backup with `sources`' options and `excludes` would, reading no file and
/// writing nothing; `visit` sees each entry a backup would store.
///
/// # Errors
/// A source that does not exist, or an invalid option.
pub fn dry_run(
    paths: &[std::path::PathBuf],
    sources: &super::unchanged::SourceOptions,
    visit: &mut dyn FnMut(&Path, &std::fs::Metadata),
) -> Result<DryRun> {
    let selection = Selection::new(&sources.select)?;
    let mut out = DryRun::default();
    for root in super::walk::resolve_sources(paths)? {
        for entry in SelectedWalk::new(&root, &selection, sources.one_file_system) {
            match entry {
                Entry::Unreadable(msg) => out.warnings.push(msg),
                Entry::Selected(ent, md) => {
                    let ft = md.file_type();
                    if ft.is_dir() {
                        out.dirs += 1;
                    } else if ft.is_file() {
                        out.files += 1;
                        out.bytes += md.len();
                    } else if ft.is_symlink() {
                        out.symlinks += 1;
                    } else {
                        out.special_files += 1;
                    }
                    visit(ent.path(), &md);
                }
            }
        }
    }
    Ok(out)
}

/// Parses a size as restic does: bytes, or a number with `k`, `m`, `g` or `t` (either case,
/// powers of 1024).
///
/// # Errors
/// [`Error::InvalidOption`] for anything else.
pub fn parse_size(s: &str) -> Result<u64> {
    let bad = || Error::InvalidOption(format!("size {s:?}: expected a number with k, m, g or t"));
    let t = s.trim();
    let (num, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_lowercase() {
                'k' => 10,
                'm' => 20,
                'g' => 30,
                't' => 40,
                _ => return Err(bad()),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = num.trim().parse().map_err(|_| bad())?;
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_restic_does() {
        assert_eq!(parse_size("100").unwrap(), 100);
        assert_eq!(parse_size("2k").unwrap(), 2048);
        assert_eq!(parse_size("3M").unwrap(), 3 << 20);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("1t").unwrap(), 1 << 40);
        assert!(parse_size("1x").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999999t").is_err());
    }

    #[test]
    fn iexclude_ignores_case_and_exclude_does_not() {
        let sel = Selection::new(&SelectOptions {
            excludes: vec!["*.tmp".into()],
            iexcludes: vec!["*.LOG".into()],
            ..Default::default()
        })
        .unwrap();
        assert!(sel.excluded_by_pattern(Path::new("/a/b.tmp")));
        assert!(!sel.excluded_by_pattern(Path::new("/a/b.TMP")));
        assert!(sel.excluded_by_pattern(Path::new("/a/b.log")));
        assert!(sel.excluded_by_pattern(Path::new("/a/b.Log")));
        // A relative pattern with a slash matches at any depth; an absolute one at the root.
        let sel = Selection::new(&SelectOptions {
            excludes: vec!["build/out".into(), "/top/x".into()],
            ..Default::default()
        })
        .unwrap();
        assert!(sel.excluded_by_pattern(Path::new("/src/proj/build/out")));
        assert!(!sel.excluded_by_pattern(Path::new("/src/proj/build/outside")));
        assert!(sel.excluded_by_pattern(Path::new("/top/x")));
        assert!(!sel.excluded_by_pattern(Path::new("/a/top/x")));
    }

    #[test]
    fn a_cache_tag_needs_its_signature() {
        let d = tempfile::tempdir().unwrap();
        let sel = Selection::new(&SelectOptions {
            exclude_caches: true,
            ..Default::default()
        })
        .unwrap();
        std::fs::write(d.path().join("CACHEDIR.TAG"), b"not a tag").unwrap();
        assert!(!sel.excluded_by_marker(d.path()));
        std::fs::write(
            d.path().join("CACHEDIR.TAG"),
            format!("{CACHEDIR_TAG_SIGNATURE}\n# a cache\n"),
        )
        .unwrap();
        assert!(sel.excluded_by_marker(d.path()));
    }
}
