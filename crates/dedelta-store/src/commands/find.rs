//! `find`: the nodes of snapshots whose name or path matches glob patterns (restic's `find`).
//!
//! A pattern without `/` matches a node's name (`*.rs`); one with `/` matches its path: from
//! the snapshot's root when it starts with `/` (`/src/*.rs`), else at any depth
//! (`src/*.rs` is `**/src/*.rs`). `*` and `?` stay within one name, `**` crosses
//! directories. Optionally only nodes modified within a time range (`--oldest`/`--newest`,
//! restic's names for the file time range).

use crate::error::{Error, Result};
use crate::format::snapshot::{Snapshot, SnapshotId};
use crate::format::tree::Node;
use crate::read::walk_tree;
use crate::repository::IndexedRepository;
use globset::{Glob, GlobBuilder, GlobMatcher};

/// What `find` looks for.
#[derive(Clone, Debug, Default)]
pub struct FindOptions {
    /// Glob patterns (a node matching any is found).
    pub patterns: Vec<String>,
    /// Match case-insensitively.
    pub ignore_case: bool,
    /// Only nodes modified at or after this time (seconds since the epoch).
    pub oldest: Option<i64>,
    /// Only nodes modified at or before this time (seconds since the epoch).
    pub newest: Option<i64>,
}

/// A compiled pattern: on the name or on the path.
#[derive(Clone, Debug)]
enum Pattern {
    Name(GlobMatcher),
    Path(GlobMatcher),
}

/// The compiled [`FindOptions`].
#[derive(Clone, Debug)]
pub struct NodeMatcher {
    patterns: Vec<Pattern>,
    oldest: Option<i64>,
    newest: Option<i64>,
}

impl NodeMatcher {
    /// Compiles the patterns.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for no pattern, or one that is not a valid glob.
    pub fn new(opts: &FindOptions) -> Result<Self> {
        if opts.patterns.is_empty() {
            return Err(Error::InvalidOption("give at least one pattern".into()));
        }
        let build = |glob: &str, shown: &str| -> Result<GlobMatcher> {
            let g: Glob = GlobBuilder::new(glob)
                .literal_separator(true)
                .case_insensitive(opts.ignore_case)
                .backslash_escape(true)
                .build()
                .map_err(|e| Error::InvalidOption(format!("pattern {shown:?}: {e}")))?;
            Ok(g.compile_matcher())
        };
        let mut patterns = Vec::new();
        for p in &opts.patterns {
            let trimmed = p.trim_end_matches('/');
            patterns.push(if let Some(rooted) = trimmed.strip_prefix('/') {
                Pattern::Path(build(rooted, p)?)
            } else if trimmed.contains('/') {
                Pattern::Path(build(&format!("**/{trimmed}"), p)?)
            } else {
                Pattern::Name(build(trimmed, p)?)
            });
        }
        Ok(NodeMatcher {
            patterns,
            oldest: opts.oldest,
            newest: opts.newest,
        })
    }

    /// Whether `node` is found.
    pub fn matches(&self, node: &Node) -> bool {
        if self.oldest.is_some_and(|t| node.mtime_secs < t)
            || self.newest.is_some_and(|t| node.mtime_secs > t)
        {
            return false;
        }
        let path = String::from_utf8_lossy(&node.path);
        let name = path.rsplit('/').next().unwrap_or(&path);
        self.patterns.iter().any(|p| match p {
            Pattern::Name(m) => m.is_match(name),
            Pattern::Path(m) => m.is_match(&*path),
        })
    }
}

/// Calls `found` for every node of `snapshot` that `matcher` matches, in tree order.
pub fn find_in_snapshot(
    repo: &IndexedRepository,
    snapshot: &Snapshot,
    matcher: &NodeMatcher,
    mut found: impl FnMut(Node) -> Result<()>,
) -> Result<()> {
    walk_tree(repo, snapshot, |n, _| {
        if matcher.matches(&n) {
            found(n)?;
        }
        Ok(())
    })
}

/// The nodes `matcher` finds in each of `snapshots`: (snapshot, its matches), snapshots
/// without one left out.
pub fn find(
    repo: &IndexedRepository,
    snapshots: &[(SnapshotId, Snapshot)],
    matcher: &NodeMatcher,
) -> Result<Vec<(SnapshotId, Vec<Node>)>> {
    let mut out = Vec::new();
    for (id, snap) in snapshots {
        let mut nodes = Vec::new();
        find_in_snapshot(repo, snap, matcher, |n| {
            nodes.push(n);
            Ok(())
        })?;
        if !nodes.is_empty() {
            out.push((*id, nodes));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::tree::{NodeKind, NodeMeta};

    fn node(path: &str, mtime: i64) -> Node {
        Node {
            path: path.as_bytes().to_vec(),
            kind: NodeKind::File,
            mode: 0o644,
            mtime_secs: mtime,
            mtime_nanos: 0,
            size: 0,
            target: Vec::new(),
            meta: NodeMeta::default(),
        }
    }

    fn m(patterns: &[&str]) -> NodeMatcher {
        NodeMatcher::new(&FindOptions {
            patterns: patterns.iter().map(|p| p.to_string()).collect(),
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn names_paths_and_depth() {
        let rs = m(&["*.rs"]);
        assert!(rs.matches(&node("a/b/main.rs", 0)) && rs.matches(&node("x.rs", 0)));
        assert!(!rs.matches(&node("a.rs/b", 0)));
        let rel = m(&["src/*.rs"]);
        assert!(rel.matches(&node("proj/src/lib.rs", 0)) && rel.matches(&node("src/a.rs", 0)));
        assert!(!rel.matches(&node("proj/src/sub/lib.rs", 0)));
        let rooted = m(&["/src/*.rs"]);
        assert!(rooted.matches(&node("src/a.rs", 0)) && !rooted.matches(&node("p/src/a.rs", 0)));
        let deep = m(&["/a/**/z"]);
        assert!(deep.matches(&node("a/b/c/z", 0)) && deep.matches(&node("a/z", 0)));
        let ci = NodeMatcher::new(&FindOptions {
            patterns: vec!["README*".into()],
            ignore_case: true,
            oldest: Some(10),
            newest: Some(20),
        })
        .unwrap();
        assert!(ci.matches(&node("d/readme.md", 15)));
        assert!(!ci.matches(&node("d/readme.md", 9)) && !ci.matches(&node("d/readme.md", 21)));
        assert!(NodeMatcher::new(&FindOptions::default()).is_err());
        let bad = FindOptions {
            patterns: vec!["a[".into()],
            ..Default::default()
        };
        assert!(NodeMatcher::new(&bad).is_err());
    }
}
