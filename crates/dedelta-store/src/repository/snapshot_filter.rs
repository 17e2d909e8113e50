//! Snapshot selection shared by every command that takes snapshots (`snapshots`, `ls`,
//! `dump`, `restore`, `find`, `forget`, `tag`, `mount`), with restic's semantics:
//!
//! - hosts: a snapshot matches if its host is any of them;
//! - tags: each entry is a tag list `a,b` that matches a snapshot holding all of its tags;
//!   a snapshot matches if any entry does (`--tag a,b --tag c` is "(a and b) or c"); the
//!   empty list `""` matches snapshots without tags;
//! - paths: a snapshot matches if it holds every one of them (compared after trimming a
//!   trailing `/`);
//! - a time range (`after`, `before`), both inclusive, on the snapshot's time.
//!
//! An empty filter matches everything. [`GroupBy`] groups snapshots by host, paths and/or
//! tags (`snapshots --group-by`, `forget`'s groups), and [`latest_per_group`] keeps the
//! newest N of each (`snapshots --latest N`).

use crate::error::{Error, Result};
use crate::format::snapshot::{Snapshot, SnapshotId};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// Which snapshots a command works on. See the module doc for the rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotFilter {
    /// Any of these hosts (empty: any host).
    pub hosts: Vec<String>,
    /// Any of these tag lists, each matched when the snapshot has all its tags (empty: any
    /// tags; an empty list matches snapshots without tags).
    pub tags: Vec<Vec<String>>,
    /// All of these paths (empty: any paths).
    pub paths: Vec<String>,
    /// Taken at or after this time.
    pub after: Option<DateTime<Utc>>,
    /// Taken at or before this time.
    pub before: Option<DateTime<Utc>>,
}

/// Trims trailing `/` (but keeps `/` itself) so `--path /data/` finds `/data`.
fn trim_path(p: &str) -> &str {
    let t = p.trim_end_matches('/');
    if t.is_empty() && p.starts_with('/') {
        "/"
    } else {
        t
    }
}

/// A snapshot's time, or `None` if it does not parse (such a snapshot never matches a range).
pub fn snapshot_time(s: &Snapshot) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(&s.time)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

impl SnapshotFilter {
    /// Whether the filter selects every snapshot.
    pub fn is_empty(&self) -> bool {
        *self == SnapshotFilter::default()
    }

    /// Parses restic's tag list option values (`a,b`, repeatable) into [`Self::tags`].
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for an empty tag inside a list (`a,,b`).
    pub fn parse_tag_lists(values: &[String]) -> Result<Vec<Vec<String>>> {
        values
            .iter()
            .map(|v| {
                if v.is_empty() {
                    return Ok(Vec::new());
                }
                v.split(',')
                    .map(|t| {
                        let t = t.trim();
                        if t.is_empty() {
                            Err(Error::InvalidOption(format!("empty tag in --tag {v:?}")))
                        } else {
                            Ok(t.to_string())
                        }
                    })
                    .collect()
            })
            .collect()
    }

    /// Whether `s` is selected.
    pub fn matches(&self, s: &Snapshot) -> bool {
        if !self.hosts.is_empty() && !self.hosts.contains(&s.host) {
            return false;
        }
        if !self.tags.is_empty() {
            let any = self.tags.iter().any(|list| {
                if list.is_empty() {
                    s.tags.is_empty()
                } else {
                    list.iter().all(|t| s.tags.contains(t))
                }
            });
            if !any {
                return false;
            }
        }
        let has_path = |p: &String| s.paths.iter().any(|q| trim_path(q) == trim_path(p));
        if !self.paths.iter().all(has_path) {
            return false;
        }
        if self.after.is_some() || self.before.is_some() {
            let Some(t) = snapshot_time(s) else {
                return false;
            };
            if self.after.is_some_and(|a| t < a) || self.before.is_some_and(|b| t > b) {
                return false;
            }
        }
        true
    }

    /// The selected snapshots of `all`, in their order.
    pub fn apply(&self, all: Vec<(SnapshotId, Snapshot)>) -> Vec<(SnapshotId, Snapshot)> {
        all.into_iter().filter(|(_, s)| self.matches(s)).collect()
    }
}

/// What snapshots are grouped by (restic's `--group-by host,paths,tags`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupBy {
    /// By host.
    pub host: bool,
    /// By the list of paths.
    pub paths: bool,
    /// By the list of tags.
    pub tags: bool,
}

impl GroupBy {
    /// restic's default for `forget`: host and paths.
    pub const HOST_PATHS: GroupBy = GroupBy {
        host: true,
        paths: true,
        tags: false,
    };

    /// Parses `host,paths,tags` (any subset, `path`/`tag` also accepted; empty: no groups).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for another word.
    pub fn parse(s: &str) -> Result<Self> {
        let mut g = GroupBy::default();
        for w in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match w {
                "host" | "hosts" => g.host = true,
                "path" | "paths" => g.paths = true,
                "tag" | "tags" => g.tags = true,
                other => {
                    return Err(Error::InvalidOption(format!(
                        "unknown --group-by field {other:?} (use host, paths, tags)"
                    )))
                }
            }
        }
        Ok(g)
    }

    /// Whether nothing groups (one group of all).
    pub fn is_none(&self) -> bool {
        *self == GroupBy::default()
    }

    /// The key of `s`'s group.
    pub fn key(&self, s: &Snapshot) -> GroupKey {
        let mut tags = s.tags.clone();
        tags.sort();
        GroupKey {
            host: self.host.then(|| s.host.clone()),
            paths: self.paths.then(|| s.paths.clone()),
            tags: self.tags.then_some(tags),
        }
    }

    /// `snaps` in groups, sorted by key; each group keeps the input order.
    pub fn group(
        &self,
        snaps: Vec<(SnapshotId, Snapshot)>,
    ) -> Vec<(GroupKey, Vec<(SnapshotId, Snapshot)>)> {
        let mut groups: BTreeMap<GroupKey, Vec<(SnapshotId, Snapshot)>> = BTreeMap::new();
        for s in snaps {
            groups.entry(self.key(&s.1)).or_default().push(s);
        }
        groups.into_iter().collect()
    }
}

/// The fields a group shares (only those grouped by are set).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct GroupKey {
    /// The host, when grouped by host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The paths, when grouped by paths.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
    /// The tags (sorted), when grouped by tags.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
}

/// The newest `n` snapshots of each host and paths (restic's `snapshots --latest N`), in
/// the input order (oldest first for a [`super::snapshots::SnapshotList`]).
pub fn latest_per_group(
    snaps: Vec<(SnapshotId, Snapshot)>,
    n: usize,
) -> Vec<(SnapshotId, Snapshot)> {
    let mut seen: BTreeMap<GroupKey, usize> = BTreeMap::new();
    let mut keep = vec![false; snaps.len()];
    let mut order: Vec<usize> = (0..snaps.len()).collect();
    // Newest first; snapshots with the same time in id order, as the list sorts them.
    order.sort_by(|&a, &b| {
        let (sa, sb) = (&snaps[a].1, &snaps[b].1);
        snapshot_time(sb)
            .cmp(&snapshot_time(sa))
            .then(snaps[b].0.cmp(&snaps[a].0))
    });
    for i in order {
        let c = seen
            .entry(GroupBy::HOST_PATHS.key(&snaps[i].1))
            .or_default();
        if *c < n {
            *c += 1;
            keep[i] = true;
        }
    }
    snaps
        .into_iter()
        .zip(keep)
        .filter_map(|(s, k)| k.then_some(s))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(time: &str, host: &str, paths: &[&str], tags: &[&str]) -> (SnapshotId, Snapshot) {
        let s = Snapshot {
            time: time.into(),
            host: host.into(),
            paths: paths.iter().map(|p| p.to_string()).collect(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            ..Default::default()
        };
        let id = SnapshotId(dedelta_core::ChunkId::of(&s.to_bytes()).0);
        (id, s)
    }

    fn hosts_of(v: &[(SnapshotId, Snapshot)]) -> Vec<String> {
        v.iter().map(|(_, s)| s.time[..10].to_string()).collect()
    }

    fn sample() -> Vec<(SnapshotId, Snapshot)> {
        vec![
            snap("2026-01-01T00:00:00Z", "a", &["/x"], &["daily"]),
            snap("2026-01-02T00:00:00Z", "a", &["/x", "/y"], &["daily", "db"]),
            snap("2026-01-03T00:00:00Z", "b", &["/x"], &[]),
            snap("2026-01-04T00:00:00Z", "b", &["/y/"], &["db"]),
        ]
    }

    /// restic's rules: hosts any, tag lists or-of-ands, paths all, times inclusive.
    #[test]
    fn filter_follows_restic() {
        let f = |f: SnapshotFilter| hosts_of(&f.apply(sample()));
        assert_eq!(f(SnapshotFilter::default()).len(), 4);
        let hosts = vec!["b".to_string()];
        assert_eq!(
            f(SnapshotFilter {
                hosts,
                ..Default::default()
            }),
            ["2026-01-03", "2026-01-04"]
        );
        let tags = SnapshotFilter::parse_tag_lists(&["daily,db".into(), "".into()]).unwrap();
        assert_eq!(
            f(SnapshotFilter {
                tags,
                ..Default::default()
            }),
            ["2026-01-02", "2026-01-03"]
        );
        let paths = vec!["/x".to_string(), "/y/".to_string()];
        assert_eq!(
            f(SnapshotFilter {
                paths,
                ..Default::default()
            }),
            ["2026-01-02"]
        );
        let paths = vec!["/y".to_string()];
        assert_eq!(
            f(SnapshotFilter {
                paths,
                ..Default::default()
            }),
            ["2026-01-02", "2026-01-04"]
        );
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        assert_eq!(
            f(SnapshotFilter {
                after: Some(t("2026-01-02T00:00:00Z")),
                before: Some(t("2026-01-03T00:00:00Z")),
                ..Default::default()
            }),
            ["2026-01-02", "2026-01-03"]
        );
        assert!(SnapshotFilter::parse_tag_lists(&["a,,b".into()]).is_err());
    }

    #[test]
    fn group_by_and_latest() {
        assert!(GroupBy::parse("host,color").is_err());
        let g = GroupBy::parse("host").unwrap();
        let groups = g.group(sample());
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].0.host.as_deref(), Some("a"));
        assert_eq!(groups[1].1.len(), 2);
        let g = GroupBy::parse("tags").unwrap();
        assert_eq!(g.group(sample()).len(), 4);
        assert!(GroupBy::parse("").unwrap().is_none());
        let mut more = sample();
        more.push(snap("2026-01-05T00:00:00Z", "a", &["/x"], &[]));
        // Newest of each (host, paths): a:/x (01-05), a:/x,/y (01-02), b:/x, b:/y/.
        assert_eq!(
            hosts_of(&latest_per_group(more, 1)),
            ["2026-01-02", "2026-01-03", "2026-01-04", "2026-01-05"]
        );
    }
}
