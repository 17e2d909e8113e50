//! `check`'s comparison of the index files with the containers (see
//! [`crate::repository::index_files`]).

use super::{entry_pair, CheckReport, EntryIds};
use crate::backend::{Backend, FileKind};
use crate::error::Result;
use crate::format::container::ContainerId;
use crate::format::index_file;
use std::collections::HashMap;

/// Checks every index file: it must decode, and each record of a container that exists must
/// list exactly the container's entries (a record naming a chunk the container does not hold
/// would send a fresh client to a chunk that is not there: a problem). Records of containers
/// that no longer exist are a notice only: readers ignore them, and a prune killed before it
/// replaced the index files, or a prune by an older build, leaves them; the next prune drops
/// them. Containers whose metadata is unreadable are reported by the metadata step.
pub(super) fn check_index_files(
    backend: &dyn Backend,
    entry_ids: &EntryIds,
    bad_meta: &HashMap<ContainerId, String>,
    report: &mut CheckReport,
) -> Result<()> {
    for (name, _) in backend.list(FileKind::Index)? {
        let what = format!("index file {name}");
        let decoded = backend
            .get(FileKind::Index, &name)
            .map_err(crate::error::Error::from)
            .and_then(|bytes| index_file::decode(&bytes, &what));
        let records = match decoded {
            Ok(r) => r,
            Err(e) => {
                report.problem(
                    None,
                    None,
                    format!(
                        "{e}: readers ignore it and read its containers' metadata; the next \
                         prune replaces it"
                    ),
                );
                continue;
            }
        };
        let mut stale = 0u64;
        for (rec, meta) in records {
            if bad_meta.contains_key(&rec.id) {
                continue;
            }
            let Some(entries) = entry_ids.get(&rec.id) else {
                stale += 1;
                continue;
            };
            let listed: Vec<_> = meta.entries.iter().map(entry_pair).collect();
            if &listed != entries {
                let at = listed
                    .iter()
                    .zip(entries.iter())
                    .position(|(a, b)| a != b)
                    .unwrap_or(listed.len().min(entries.len()));
                let chunk = listed
                    .get(at)
                    .map_or("nothing".to_string(), |(id, _)| format!("chunk {id}"));
                report.problem(
                    None,
                    None,
                    format!(
                        "{what}: its record of container {} names {chunk} at entry {at}, \
                         which the container does not hold there; readers would use it \
                         (run `dedelta prune` or `repair packs` to rewrite the index files)",
                        rec.id
                    ),
                );
            }
        }
        if stale > 0 {
            report.notices.push(format!(
                "{what} names {stale} containers that no longer exist (ignored by readers; \
                 the next prune drops them)"
            ));
        }
    }
    Ok(())
}
