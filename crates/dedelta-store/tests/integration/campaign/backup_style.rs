//! How a campaign backup finds duplicates and what it stores again: the defaults (the exact
//! index, no rewriting), or LoopDelta's options (issue 17) drawn at random. The latter leave
//! chunks stored twice (a Capping or cache-aware-filter rewrite beside the old copy, an
//! inversed delta beside the full copy it replaces), which prune, check, the repairs, a
//! rebuilt index and crashes must all handle; the campaign's rules do not change with the
//! style, since every style must store what the source holds.

use super::Rng;
use dedelta_store::commands::backup::caf::LoopDeltaOptions;
use dedelta_store::commands::backup::rewrite::Capping;
use dedelta_store::commands::backup::{
    BackupOptions, FingerprintIndexKind, FingerprintIndexOptions,
};

/// The options of one backup beyond what it backs up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct BackupStyle {
    /// Containers of the locality index's fingerprint cache (`None`: the exact index).
    locality: Option<usize>,
    /// The cache-aware filter (with the locality index only).
    caf: bool,
    /// Capping: at most this many old containers per segment of [`SEGMENT_BYTES`].
    capping: Option<usize>,
    /// Inversed delta compression (with Capping only).
    inversed: bool,
    /// LoopDelta's delta settings instead of the repository's: one-level deltas, bases only
    /// from prefetched dense containers and the backup's own chunks.
    loopdelta_delta: bool,
}

/// Capping's segment: a few containers of the campaign's (48 KiB), so that a backup of a
/// few hundred KiB has several segments to decide.
const SEGMENT_BYTES: u64 = 96 * 1024;

impl BackupStyle {
    /// The defaults half of the time; else a locality backup with a cache of one to four
    /// containers, with the filter half of those times, with Capping (and inversed deltas
    /// half of those) a third, and with LoopDelta's delta settings a third.
    pub(super) fn draw(rng: &mut Rng) -> BackupStyle {
        if rng.chance(50) {
            return BackupStyle::default();
        }
        let capping = rng.chance(33).then(|| 1 + rng.index(2));
        BackupStyle {
            locality: Some(1 + rng.index(4)),
            caf: rng.chance(50),
            capping,
            inversed: capping.is_some() && rng.chance(50),
            loopdelta_delta: rng.chance(33),
        }
    }

    /// Whether this is the defaults.
    pub(super) fn is_default(&self) -> bool {
        *self == BackupStyle::default()
    }

    /// `opts` with this style's options.
    pub(super) fn apply(&self, opts: BackupOptions) -> BackupOptions {
        let mut opts = opts;
        if let Some(containers) = self.locality {
            opts.lookup = FingerprintIndexOptions {
                kind: FingerprintIndexKind::Locality,
                cache_containers: containers,
                ..FingerprintIndexOptions::default()
            };
        }
        if let Some(level) = self.capping {
            opts.rewriting = Some(Box::new(Capping {
                segment_bytes: SEGMENT_BYTES,
                level,
            }));
        }
        if self.loopdelta_delta {
            opts.delta = Some(crate::support::loopdelta_delta());
        }
        opts.loopdelta = LoopDeltaOptions {
            cache_aware_filter: self.caf,
            inversed_delta: self.inversed,
            ..LoopDeltaOptions::default()
        };
        opts
    }
}

impl std::fmt::Display for BackupStyle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.locality {
            Some(n) => write!(f, "locality {n}")?,
            None => write!(f, "exact")?,
        }
        if self.caf {
            write!(f, ", caf")?;
        }
        if let Some(level) = self.capping {
            write!(f, ", capping {level}")?;
        }
        if self.inversed {
            write!(f, ", inversed")?;
        }
        if self.loopdelta_delta {
            write!(f, ", loopdelta deltas")?;
        }
        Ok(())
    }
}
