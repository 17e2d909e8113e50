//! `forget`: remove snapshots, by id or by a retention policy with restic's semantics.
//!
//! Snapshots are grouped by host and paths (or as `--group-by` says, see [`GroupBy`]); each
//! group is judged on its own. Within a group, newest first: `keep_last` keeps the N newest;
//! `keep_hourly` (daily, weekly, monthly, yearly) keeps the newest snapshot of each of the N
//! most recent hours (days, ...) that have one; `keep_tags` keeps every snapshot with one of
//! the tags; `keep_within` keeps every snapshot taken within that duration of the group's
//! newest snapshot. A snapshot kept by any
//! rule is kept. Forget only deletes snapshot files; `prune` frees the space.

use crate::backend::FileKind;
use crate::error::{Error, Result};
use crate::format::snapshot::{Snapshot, SnapshotId};
use crate::repository::lock::RepoLock;
use crate::repository::snapshot_filter::{GroupBy, GroupKey, SnapshotFilter};
use crate::repository::Repository;
use chrono::{DateTime, Datelike, Utc};
use std::collections::{BTreeMap, HashSet};

/// A retention policy; all zero/empty means "no policy".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeepPolicy {
    /// Keep the N newest.
    pub last: usize,
    /// Keep the newest of each of the N most recent hours.
    pub hourly: usize,
    /// ... days.
    pub daily: usize,
    /// ... ISO weeks.
    pub weekly: usize,
    /// ... months.
    pub monthly: usize,
    /// ... years.
    pub yearly: usize,
    /// Keep snapshots with any of these tags.
    pub tags: Vec<String>,
    /// Keep snapshots within this many seconds of the newest one.
    pub within_secs: Option<i64>,
}

impl KeepPolicy {
    /// Whether no rule is set.
    pub fn is_empty(&self) -> bool {
        *self == KeepPolicy::default()
    }
}

/// The decision for one snapshot.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ForgetDecision {
    /// Snapshot id (full hex).
    pub id: String,
    /// Its time.
    pub time: String,
    /// Its paths.
    pub paths: Vec<String>,
    /// Whether it stays.
    pub keep: bool,
    /// Why it stays (the rules that kept it) or `forget`.
    pub reasons: Vec<String>,
}

/// Parses a duration such as `2y5m7d3h` (y = 365 days, m = 30 days, w, d, h).
pub fn parse_duration(s: &str) -> Result<i64> {
    let mut total: i64 = 0;
    let mut num = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let n: i64 = num
            .parse()
            .map_err(|_| Error::InvalidOption(format!("bad duration {s:?}")))?;
        num.clear();
        let unit = match c {
            'y' => 365 * 86_400,
            'm' => 30 * 86_400,
            'w' => 7 * 86_400,
            'd' => 86_400,
            'h' => 3_600,
            _ => {
                return Err(Error::InvalidOption(format!(
                    "bad duration unit {c:?} in {s:?} (use y, m, w, d, h)"
                )))
            }
        };
        total = total.saturating_add(n.saturating_mul(unit));
    }
    if !num.is_empty() || s.is_empty() {
        return Err(Error::InvalidOption(format!(
            "bad duration {s:?} (e.g. 1y2m3d4h)"
        )));
    }
    Ok(total)
}

fn time_of(s: &Snapshot) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(&s.time)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

/// Applies `policy` to all snapshots, judged per host and paths (restic's default groups);
/// returns a decision per snapshot, newest first within each group.
pub fn apply_policy(
    snapshots: &[(SnapshotId, Snapshot)],
    policy: &KeepPolicy,
) -> Vec<ForgetDecision> {
    apply_policy_grouped(snapshots, policy, GroupBy::HOST_PATHS)
}

/// [`apply_policy`] with the snapshots judged per group of `group_by` (`--group-by`).
pub fn apply_policy_grouped(
    snapshots: &[(SnapshotId, Snapshot)],
    policy: &KeepPolicy,
    group_by: GroupBy,
) -> Vec<ForgetDecision> {
    let mut groups: BTreeMap<GroupKey, Vec<&(SnapshotId, Snapshot)>> = BTreeMap::new();
    for s in snapshots {
        groups.entry(group_by.key(&s.1)).or_default().push(s);
    }
    let mut out = Vec::new();
    for (_, mut group) in groups {
        // Newest first; ties as in the snapshot listing.
        group.sort_by(|a, b| {
            time_of(&b.1)
                .cmp(&time_of(&a.1))
                .then_with(|| crate::repository::snapshots::tie_order(b, a))
        });
        let newest = group.first().map(|s| time_of(&s.1)).unwrap_or_default();
        type Bucket = fn(&DateTime<Utc>) -> String;
        let rules: [(&str, usize, Bucket); 5] = [
            ("hourly", policy.hourly, |t| {
                t.format("%Y-%m-%d %H").to_string()
            }),
            ("daily", policy.daily, |t| t.format("%Y-%m-%d").to_string()),
            ("weekly", policy.weekly, |t| {
                format!("{}-{}", t.iso_week().year(), t.iso_week().week())
            }),
            ("monthly", policy.monthly, |t| {
                format!("{}-{}", t.year(), t.month())
            }),
            ("yearly", policy.yearly, |t| t.year().to_string()),
        ];
        let mut last_bucket: Vec<Option<String>> = vec![None; rules.len()];
        let mut kept_by_rule = vec![0usize; rules.len()];
        for (i, (id, snap)) in group.iter().map(|s| (&s.0, &s.1)).enumerate() {
            let t = time_of(snap);
            let mut reasons = Vec::new();
            if i < policy.last {
                reasons.push("last".to_string());
            }
            for (r, (name, n, bucket)) in rules.iter().enumerate() {
                if *n == 0 {
                    continue;
                }
                let b = bucket(&t);
                if last_bucket[r].as_ref() != Some(&b) {
                    last_bucket[r] = Some(b);
                    if kept_by_rule[r] < *n {
                        kept_by_rule[r] += 1;
                        reasons.push(name.to_string());
                    }
                }
            }
            if snap.tags.iter().any(|t| policy.tags.contains(t)) {
                reasons.push("tag".to_string());
            }
            if let Some(w) = policy.within_secs {
                if (newest - t).num_seconds() <= w {
                    reasons.push("within".to_string());
                }
            }
            out.push(ForgetDecision {
                id: id.to_hex(),
                time: snap.time.clone(),
                paths: snap.paths.clone(),
                keep: !reasons.is_empty(),
                reasons,
            });
        }
    }
    out
}

/// Decides and (unless `dry_run`) deletes: snapshots named in `ids` and those the policy does
/// not keep. The caller holds the exclusive lock.
pub fn forget(
    repo: &Repository,
    lock: &RepoLock,
    ids: &[String],
    policy: &KeepPolicy,
    dry_run: bool,
) -> Result<Vec<ForgetDecision>> {
    let all = (&SnapshotFilter::default(), GroupBy::HOST_PATHS);
    forget_selected(repo, lock, ids, policy, all, dry_run)
}

/// [`forget`] with the policy applied only to the snapshots `selection.0` selects, judged per
/// group of `selection.1` (restic's `--host`/`--tag`/`--path` and `--group-by`); snapshots
/// named in `ids` go whatever the filter.
pub fn forget_selected(
    repo: &Repository,
    _lock: &RepoLock,
    ids: &[String],
    policy: &KeepPolicy,
    selection: (&SnapshotFilter, GroupBy),
    dry_run: bool,
) -> Result<Vec<ForgetDecision>> {
    let listed = repo.snapshots()?;
    let all = listed.snapshots;
    let mut decisions = if policy.is_empty() {
        Vec::new()
    } else {
        let (filter, group_by) = selection;
        let selected: Vec<_> = all
            .iter()
            .filter(|s| filter.matches(&s.1))
            .cloned()
            .collect();
        apply_policy_grouped(&selected, policy, group_by)
    };
    let mut named: HashSet<String> = HashSet::new();
    for spec in ids {
        named.insert(crate::repository::snapshots::resolve_name(
            repo.backend().as_ref(),
            spec,
        )?);
    }
    // A damaged or stray file can be removed by naming it; a policy never touches it.
    for bad in &listed.unreadable {
        if named.contains(&bad.name) {
            decisions.push(ForgetDecision {
                id: bad.name.clone(),
                time: String::new(),
                paths: Vec::new(),
                keep: false,
                reasons: vec!["named (unreadable)".into()],
            });
        }
    }
    for (id, snap) in &all {
        let hex = id.to_hex();
        if named.contains(&hex) {
            match decisions.iter_mut().find(|d| d.id == hex) {
                Some(d) => {
                    d.keep = false;
                    d.reasons = vec!["named".into()];
                }
                None => decisions.push(ForgetDecision {
                    id: hex,
                    time: snap.time.clone(),
                    paths: snap.paths.clone(),
                    keep: false,
                    reasons: vec!["named".into()],
                }),
            }
        }
    }
    if !dry_run {
        for d in decisions.iter().filter(|d| !d.keep) {
            repo.backend().delete(FileKind::Snapshot, &d.id)?;
        }
    }
    Ok(decisions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::snapshot::{BackupSummary, TreeRef};

    fn snap(time: &str, tags: &[&str]) -> (SnapshotId, Snapshot) {
        let s = Snapshot {
            time: time.into(),
            host: "h".into(),
            paths: vec!["/p".into()],
            tags: tags.iter().map(|t| t.to_string()).collect(),
            tree: TreeRef::default(),
            summary: BackupSummary::default(),
            ..Default::default()
        };
        (SnapshotId(dedelta_core::ChunkId::of(time.as_bytes()).0), s)
    }

    fn kept(d: &[ForgetDecision]) -> Vec<String> {
        let mut v: Vec<String> = d
            .iter()
            .filter(|d| d.keep)
            .map(|d| d.time.clone())
            .collect();
        v.sort();
        v
    }

    /// A rewritten snapshot keeps its original's time: keep-last 1 keeps the rewrite, whatever
    /// the two ids (the ids of the two orders both ways round).
    #[test]
    fn of_two_tied_in_time_the_rewritten_one_is_the_newer() {
        let (old_id, old) = snap("2026-01-01T10:00:00Z", &[]);
        let rewritten = Snapshot {
            original: Some(old_id.to_hex()),
            ..old.clone()
        };
        let p = KeepPolicy {
            last: 1,
            ..Default::default()
        };
        for new_id in [SnapshotId([0; 32]), SnapshotId([0xff; 32])] {
            let snaps = vec![(old_id, old.clone()), (new_id, rewritten.clone())];
            let d = apply_policy(&snaps, &p);
            let kept: Vec<&str> = d.iter().filter(|d| d.keep).map(|d| d.id.as_str()).collect();
            assert_eq!(kept, vec![new_id.to_hex()], "{d:?}");
        }
    }

    #[test]
    fn policies_follow_restic() {
        let snaps = vec![
            snap("2026-01-01T10:00:00Z", &[]),
            snap("2026-01-01T11:00:00Z", &[]),
            snap("2026-01-02T09:00:00Z", &["keep"]),
            snap("2026-01-03T09:00:00Z", &[]),
            snap("2026-01-03T18:00:00Z", &[]),
            snap("2026-02-10T09:00:00Z", &[]),
        ];
        let p = KeepPolicy {
            last: 2,
            ..Default::default()
        };
        assert_eq!(
            kept(&apply_policy(&snaps, &p)),
            vec!["2026-01-03T18:00:00Z", "2026-02-10T09:00:00Z"]
        );
        let p = KeepPolicy {
            daily: 3,
            ..Default::default()
        };
        assert_eq!(
            kept(&apply_policy(&snaps, &p)),
            vec![
                "2026-01-02T09:00:00Z",
                "2026-01-03T18:00:00Z",
                "2026-02-10T09:00:00Z"
            ]
        );
        let p = KeepPolicy {
            monthly: 5,
            tags: vec!["keep".into()],
            ..Default::default()
        };
        assert_eq!(
            kept(&apply_policy(&snaps, &p)),
            vec![
                "2026-01-02T09:00:00Z",
                "2026-01-03T18:00:00Z",
                "2026-02-10T09:00:00Z"
            ]
        );
        let p = KeepPolicy {
            within_secs: Some(parse_duration("38d").unwrap()),
            ..Default::default()
        };
        assert_eq!(kept(&apply_policy(&snaps, &p)).len(), 3);
        assert_eq!(
            parse_duration("1y2m3w4d5h").unwrap(),
            365 * 86400 + 60 * 86400 + 21 * 86400 + 4 * 86400 + 5 * 3600
        );
        assert!(
            parse_duration("5x").is_err()
                && parse_duration("5").is_err()
                && parse_duration("").is_err()
        );
    }
}
