//! Which nodes of a snapshot a restore writes: restic's `--include` / `--exclude` patterns,
//! and `--overwrite`, what to do with a file already in the target.
//!
//! A pattern is a glob over the node's path with a leading `/` (`*` stays within one name,
//! `**` crosses names). A pattern that starts with `/` is anchored at the snapshot's root;
//! any other matches at any depth, as in restic (`*.txt`, `src/main.rs`). A node is selected
//! when it or a directory above it matches an include (or there is no include) and neither it
//! nor a directory above it matches an exclude. A pattern that is not UTF-8 is taken as a
//! literal path (stored names need not be UTF-8).

use crate::commands::ls::normalize_path;
use crate::error::{Error, Result};
use crate::format::tree::{Node, NodeKind};
use globset::{GlobBuilder, GlobMatcher};
use std::os::unix::fs::MetadataExt;

/// What to do with an entry already in the target (restic's `--overwrite`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overwrite {
    /// Replace it (the default).
    #[default]
    Always,
    /// Replace a file only if its size or modification time differ from the snapshot's.
    IfChanged,
    /// Replace a file only if the snapshot's is newer.
    IfNewer,
    /// Never replace anything that exists.
    Never,
}

impl Overwrite {
    /// Parses `always`, `if-changed`, `if-newer` or `never`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "always" => Overwrite::Always,
            "if-changed" => Overwrite::IfChanged,
            "if-newer" => Overwrite::IfNewer,
            "never" => Overwrite::Never,
            _ => return None,
        })
    }

    /// Whether `node` must be written over `existing` (what the target holds at its path).
    pub fn replaces(self, node: &Node, existing: &std::fs::Metadata) -> bool {
        let same_kind = existing.is_file() == (node.kind == NodeKind::File);
        match self {
            Overwrite::Always => true,
            Overwrite::Never => false,
            // Directories are merged into, whatever the policy.
            _ if node.kind == NodeKind::Dir => true,
            Overwrite::IfChanged => {
                !same_kind
                    || existing.len() != node.size
                    || (existing.mtime(), existing.mtime_nsec())
                        != (node.mtime_secs, i64::from(node.mtime_nanos))
            }
            Overwrite::IfNewer => {
                !same_kind
                    || (existing.mtime(), existing.mtime_nsec())
                        < (node.mtime_secs, i64::from(node.mtime_nanos))
            }
        }
    }
}

/// One include or exclude pattern.
#[derive(Clone, Debug)]
enum Pattern {
    Glob(GlobMatcher),
    /// A path that is not UTF-8, compared as bytes (without leading or trailing `/`).
    Literal(Vec<u8>),
}

impl Pattern {
    fn new(raw: &[u8], flag: &str, icase: bool) -> Result<Self> {
        let Ok(text) = std::str::from_utf8(raw) else {
            return Ok(Pattern::Literal(normalize_path(raw).to_vec()));
        };
        let trimmed = text.trim_end_matches('/');
        let glob = if trimmed.starts_with('/') {
            trimmed.to_string()
        } else {
            format!("**/{trimmed}")
        };
        let m = GlobBuilder::new(&glob)
            .case_insensitive(icase)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| Error::InvalidOption(format!("{flag} pattern {text:?}: {e}")))?
            .compile_matcher();
        Ok(Pattern::Glob(m))
    }

    /// Whether this matches the node at `path` (stored form: no leading `/`) itself.
    fn matches(&self, path: &[u8]) -> bool {
        match self {
            Pattern::Literal(l) => path == l.as_slice(),
            Pattern::Glob(g) => {
                let mut full = Vec::with_capacity(path.len() + 1);
                full.push(b'/');
                full.extend_from_slice(path);
                let os = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&full);
                g.is_match(os)
            }
        }
    }
}

/// The include and exclude patterns of a restore.
#[derive(Clone, Debug, Default)]
pub struct Selector {
    include: Vec<Pattern>,
    exclude: Vec<Pattern>,
    /// The include patterns as given, for messages.
    include_text: Vec<String>,
}

/// The paths of `path` and each directory above it, shortest first.
fn self_and_ancestors(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    path.iter()
        .enumerate()
        .filter(|(_, b)| **b == b'/')
        .map(|(i, _)| &path[..i])
        .chain(std::iter::once(path))
        .filter(|p| !p.is_empty())
}

impl Selector {
    /// Compiles the patterns.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a pattern that is not a glob.
    pub fn new(include: &[Vec<u8>], exclude: &[Vec<u8>]) -> Result<Self> {
        Self::with_case(include, exclude, false)
    }

    /// [`Self::new`], the patterns ignoring case with `icase` (`--iinclude`, `--iexclude`).
    pub fn with_case(include: &[Vec<u8>], exclude: &[Vec<u8>], icase: bool) -> Result<Self> {
        let i = if icase { "--i" } else { "--" };
        Ok(Selector {
            include: include
                .iter()
                .map(|p| Pattern::new(p, &format!("{i}include"), icase))
                .collect::<Result<_>>()?,
            exclude: exclude
                .iter()
                .map(|p| Pattern::new(p, &format!("{i}exclude"), icase))
                .collect::<Result<_>>()?,
            include_text: include
                .iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect(),
        })
    }

    /// Adds `other`'s patterns to these.
    pub fn merged(mut self, other: Selector) -> Self {
        self.include.extend(other.include);
        self.exclude.extend(other.exclude);
        self.include_text.extend(other.include_text);
        self
    }

    /// Whether there are include patterns (then directories above a match are created only
    /// when something below them is selected).
    pub fn has_includes(&self) -> bool {
        !self.include.is_empty()
    }

    /// Whether the node at `path` (stored form) is excluded, by itself or a directory above.
    pub fn excluded(&self, path: &[u8]) -> bool {
        self_and_ancestors(path).any(|p| self.exclude.iter().any(|x| x.matches(p)))
    }

    /// The index of the first include pattern that matches the node at `path` or a directory
    /// above it.
    fn included_by(&self, path: &[u8]) -> Option<usize> {
        self_and_ancestors(path).find_map(|p| self.include.iter().position(|i| i.matches(p)))
    }

    /// Whether the node at `path` (stored form) is restored.
    pub fn selects(&self, path: &[u8]) -> bool {
        (self.include.is_empty() || self.included_by(path).is_some()) && !self.excluded(path)
    }

    /// Records in `hit` which include patterns the node at `path` matches (itself only: its
    /// ancestors are nodes of their own).
    pub fn mark_hits(&self, path: &[u8], hit: &mut [bool]) {
        if self.excluded(path) {
            return;
        }
        for (i, p) in self.include.iter().enumerate() {
            if !hit[i] && p.matches(path) {
                hit[i] = true;
            }
        }
    }

    /// A fresh record for [`Self::mark_hits`].
    pub fn no_hits(&self) -> Vec<bool> {
        vec![false; self.include.len()]
    }

    /// The error for the include patterns `hit` says matched nothing, if any.
    pub fn unmatched(&self, hit: &[bool]) -> Result<()> {
        let missing: Vec<String> = hit
            .iter()
            .zip(&self.include_text)
            .filter(|(h, _)| !**h)
            .map(|(_, t)| format!("{t:?}"))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(Error::InvalidOption(format!(
            "--include {} matches nothing in the snapshot (`dedelta ls SNAPSHOT` lists its paths)",
            missing.join(", ")
        )))
    }
}

/// Whether `dir` (stored form) is a directory above `path`.
pub fn is_ancestor(dir: &[u8], path: &[u8]) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(inc: &[&str], exc: &[&str]) -> Selector {
        let v = |s: &[&str]| s.iter().map(|p| p.as_bytes().to_vec()).collect::<Vec<_>>();
        Selector::new(&v(inc), &v(exc)).unwrap()
    }

    #[test]
    fn patterns_follow_restic() {
        let s = sel(&["*.txt"], &[]);
        assert!(s.selects(b"a/b/c.txt"));
        assert!(!s.selects(b"a/b/c.rs"));
        // Anchored: only at the root.
        let s = sel(&["/a/*"], &[]);
        assert!(s.selects(b"a/b"));
        assert!(s.selects(b"a/b/deeper")); // below a match
        assert!(!s.selects(b"x/a/b"));
        // A literal path, with or without its slashes, and what is below it.
        let s = sel(&["/home/u/docs/"], &[]);
        assert!(s.selects(b"home/u/docs"));
        assert!(s.selects(b"home/u/docs/x"));
        assert!(!s.selects(b"home/u/docsx"));
        // Excludes win, also below an excluded directory.
        let s = sel(&[], &["cache"]);
        assert!(s.selects(b"a/b"));
        assert!(!s.selects(b"a/cache"));
        assert!(!s.selects(b"a/cache/x"));
        // Glob characters in a name are escaped with a backslash.
        let s = sel(&["/a/b\\[1\\]"], &[]);
        assert!(s.selects(b"a/b[1]"));
        assert!(!s.selects(b"a/b1"));
    }

    #[test]
    fn iinclude_ignores_case() {
        let v = |s: &str| vec![s.as_bytes().to_vec()];
        let s = Selector::with_case(&v("*.TXT"), &[], true).unwrap();
        assert!(s.selects(b"a/b.txt"));
        let s = Selector::new(&v("*.TXT"), &[]).unwrap();
        assert!(!s.selects(b"a/b.txt"));
    }

    #[test]
    fn unmatched_includes_are_named() {
        let s = sel(&["*.txt", "nope"], &[]);
        let mut hit = s.no_hits();
        s.mark_hits(b"a/b.txt", &mut hit);
        let err = s.unmatched(&hit).unwrap_err().to_string();
        assert!(err.contains("\"nope\""), "{err}");
        assert!(!err.contains("*.txt"), "{err}");
    }
}
