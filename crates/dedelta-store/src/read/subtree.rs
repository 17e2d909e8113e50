//! A directory of a snapshot taken as its root: restic's `SNAPSHOT:SUBFOLDER`
//! (`restore latest:/home/me/docs --target x` restores what `docs` holds straight into `x`).
//! `restore`, `ls`, `dump` and `diff` take it.

use crate::error::{Error, Result};
use crate::format::snapshot::{Snapshot, SnapshotId};
use crate::format::tree::{Node, NodeKind};
use crate::repository::IndexedRepository;

/// The part of a snapshot a command sees: the whole tree, or what one directory holds, with
/// paths relative to that directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subtree {
    /// The directory's stored path (no leading or trailing `/`); empty for the whole tree.
    prefix: Vec<u8>,
}

impl Subtree {
    /// The whole snapshot.
    pub fn whole() -> Subtree {
        Subtree::default()
    }

    /// Whether this is the whole snapshot.
    pub fn is_whole(&self) -> bool {
        self.prefix.is_empty()
    }

    /// The directory's stored path (empty for the whole snapshot).
    pub fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// Splits a snapshot argument into the snapshot (an id prefix or `latest`) and the
    /// subfolder after the first `:`, if there is one. Snapshot ids are hex, so a `:` can
    /// only start a subfolder.
    pub fn split_spec(spec: &str) -> (&str, Option<&str>) {
        match spec.split_once(':') {
            Some((snapshot, sub)) => (snapshot, Some(sub)),
            None => (spec, None),
        }
    }

    /// The directory at `path` of `snapshot` (raw bytes, with or without a leading `/`; `/`
    /// or empty is the whole snapshot).
    ///
    /// # Errors
    /// [`Error::PathNotInSnapshot`] if no node has that path, [`Error::InvalidOption`] if it
    /// is not a directory, or an unreadable tree.
    pub fn find(
        repo: &IndexedRepository,
        id: &SnapshotId,
        snapshot: &Snapshot,
        path: &[u8],
    ) -> Result<Subtree> {
        let want = crate::commands::ls::normalize_path(path);
        if want.is_empty() {
            return Ok(Subtree::whole());
        }
        let (node, _) = crate::commands::ls::find_node(repo, id, snapshot, want)?;
        if node.kind != NodeKind::Dir {
            return Err(Error::InvalidOption(format!(
                "{}:{} is not a directory",
                id.short(),
                String::from_utf8_lossy(path)
            )));
        }
        Ok(Subtree {
            prefix: want.to_vec(),
        })
    }

    /// The node as seen from the subtree: its path below the directory, or `None` for a node
    /// outside it and for the directory itself (its own metadata is not restored: the target
    /// takes its place).
    pub fn view(&self, mut node: Node) -> Option<Node> {
        if self.prefix.is_empty() {
            return Some(node);
        }
        let below = node
            .path
            .strip_prefix(self.prefix.as_slice())?
            .strip_prefix(b"/")?;
        node.path = below.to_vec();
        Some(node)
    }

    /// The stored path of `path` (relative to the subtree, with or without a leading `/`).
    pub fn path_in_snapshot(&self, path: &[u8]) -> Vec<u8> {
        let rel = crate::commands::ls::normalize_path(path);
        match (self.prefix.is_empty(), rel.is_empty()) {
            (true, _) => rel.to_vec(),
            (false, true) => self.prefix.clone(),
            (false, false) => [self.prefix.as_slice(), b"/", rel].concat(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(path: &str) -> Node {
        Node {
            path: path.as_bytes().to_vec(),
            kind: NodeKind::File,
            mode: 0o644,
            mtime_secs: 0,
            mtime_nanos: 0,
            size: 0,
            target: Vec::new(),
            meta: Default::default(),
        }
    }

    #[test]
    fn a_subtree_sees_only_what_is_below_its_directory() {
        let sub = Subtree {
            prefix: b"home/me".to_vec(),
        };
        assert_eq!(sub.view(node("home/me/a/b")).unwrap().path, b"a/b");
        assert_eq!(sub.view(node("home/me/x")).unwrap().path, b"x");
        assert!(sub.view(node("home/me")).is_none());
        assert!(sub.view(node("home/mexico")).is_none());
        assert!(sub.view(node("home")).is_none());
        assert_eq!(
            Subtree::whole().view(node("home/me")).unwrap().path,
            b"home/me"
        );
        assert_eq!(sub.path_in_snapshot(b"/a/"), b"home/me/a");
        assert_eq!(sub.path_in_snapshot(b"/"), b"home/me");
        assert_eq!(Subtree::whole().path_in_snapshot(b"/a"), b"a");
    }

    #[test]
    fn a_snapshot_argument_splits_at_its_first_colon() {
        assert_eq!(Subtree::split_spec("latest"), ("latest", None));
        assert_eq!(
            Subtree::split_spec("ab12:/home/a:b"),
            ("ab12", Some("/home/a:b"))
        );
    }
}
