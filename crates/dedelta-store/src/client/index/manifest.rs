//! The index manifest: which run files make up the index, the containers it has taken in,
//! and facts about the index itself. Replaced whole (temporary file and rename, no fsync: see
//! [`Manifest::store`]) at every change, so a reader sees the old manifest or the new one.
//!
//! Layout (little-endian): `DDIXMAN\0`, version u32 = 2; complete u8; damage digest u64;
//! next run number u64; next global entry number u64; run count u32, then per run: number
//! u64, chunk entries u64, super-feature keys u64, file length u64, tail CRC-32C u32;
//! container count u32, then per container: id (32 bytes), first global entry number u64,
//! entry count u32, flags u8 (bit 0 known, bit 1 trimmed, bit 2 deltas left out, the others
//! zero); (version 4) superseded count u32, then that many global entry numbers u64, strictly
//! increasing, each inside a container's range; (version 5) layout epoch u64; CRC-32C of
//! everything before it (u32).

use crate::error::{Error, Result};
use crate::format::container::ContainerId;
use std::io::Write;
use std::path::Path;

const MAGIC: [u8; 8] = *b"DDIXMAN\0";
/// The manifest version; an index with another is rebuilt. 2: the runs' super-feature keys
/// are 40 bits (run version 2); an index of version 1 (32-bit keys) is rebuilt, never read.
/// 3: a container's byte is a set of flags (trimmed, deltas left out); a manifest of
/// version 2 is still read, every container counting as trimmed (nothing is known of what
/// was removed from it, so the locality fingerprint index trusts none of its entries).
/// 4: the entries superseded by a newer copy of their chunk are listed
/// ([`Manifest::superseded`]); a manifest of version 2 or 3 is still read, with none listed.
/// 5: the layout epoch ([`Manifest::epoch`]); an older manifest is read with epoch 0.
pub const VERSION: u32 = 5;

/// The oldest manifest version this build reads.
const OLDEST_VERSION: u32 = 2;

/// Flag bits of a container's byte.
const FLAG_KNOWN: u8 = 1;
const FLAG_TRIMMED: u8 = 2;
const FLAG_DELTAS_LEFT_OUT: u8 = 4;

/// What the manifest records about one run file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunRecord {
    /// The run's number (its file name).
    pub seq: u64,
    /// Chunk entries.
    pub chunks: u64,
    /// Super-feature keys.
    pub sketches: u64,
    /// File length.
    pub file_len: u64,
    /// CRC-32C of its tail.
    pub tail_crc: u32,
}

/// A container the index has a range of global entry numbers for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The container.
    pub id: ContainerId,
    /// Global entry number of its entry 0.
    pub first: u64,
    /// Its entry count.
    pub entries: u32,
    /// Whether the index has taken it in (see `ChunkIndex::known_containers`); a container
    /// forgotten (deleted by this client) keeps its range until the next rebuild.
    pub known: bool,
    /// Entries of it were removed from the index after it was taken in (a prune's dead
    /// chunks, check's damaged copies): its metadata lists chunks the index does not hold.
    pub trimmed: bool,
    /// Delta entries of it were left out when it was taken in (a rebuild or catch-up sets
    /// delta copies aside and takes only those whose base has a copy): its full entries are
    /// all indexed unless it is also trimmed, its delta entries maybe not.
    pub deltas_left_out: bool,
}

/// The slot whose range holds global entry number `n`, among `slots` in order of their
/// ranges (a binary search).
pub(super) fn slot_holding(slots: &[Slot], n: u64) -> Option<&Slot> {
    let i = slots.partition_point(|s| s.first + u64::from(s.entries) <= n);
    slots.get(i).filter(|s| s.first <= n)
}

impl Slot {
    pub(super) fn flags(&self) -> u8 {
        [
            (self.known, FLAG_KNOWN),
            (self.trimmed, FLAG_TRIMMED),
            (self.deltas_left_out, FLAG_DELTAS_LEFT_OUT),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .fold(0, |flags, (_, bit)| flags | bit)
    }
}

/// The manifest's contents.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The index holds every container's entries (set only by a rebuild).
    pub complete: bool,
    /// Digest of the damage records applied.
    pub damage_digest: u64,
    /// The number the next run file gets.
    pub next_seq: u64,
    /// The first global entry number the next container gets.
    pub next_entry: u64,
    /// The runs, oldest first.
    pub runs: Vec<RunRecord>,
    /// Containers in order of their global entry numbers.
    pub slots: Vec<Slot>,
    /// Global entry numbers whose chunk the index names at a newer number: a copy stored
    /// again (a rewrite by Capping or the cache-aware filter, a prune's repack, a rebuild
    /// meeting two copies), which the container's metadata still lists. Sorted. The locality
    /// fingerprint cache leaves them out, so that it answers with the copy the index names
    /// whichever containers it holds (see `crate::backup::fingerprint_index`). Only numbers
    /// of known, untrimmed containers are kept ([`Manifest::tidy_superseded`]).
    pub superseded: Vec<u64>,
    /// Drawn afresh ([`Manifest::new_epoch`]) whenever an indexed chunk may leave the index
    /// or change its copy: a new or reset index, a rebuild, a removal (prune, repair packs),
    /// an entry superseded. Part of the [`super::LayoutMark`]: a rebuild that numbers the containers
    /// as before, and leaves some copies out (check's damaged ones), changes no slot.
    pub epoch: u64,
}

impl Manifest {
    /// Encodes the manifest.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.runs.len() * 36 + self.slots.len() * 45);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.push(u8::from(self.complete));
        out.extend_from_slice(&self.damage_digest.to_le_bytes());
        out.extend_from_slice(&self.next_seq.to_le_bytes());
        out.extend_from_slice(&self.next_entry.to_le_bytes());
        out.extend_from_slice(&(self.runs.len() as u32).to_le_bytes());
        for r in &self.runs {
            for v in [r.seq, r.chunks, r.sketches, r.file_len] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&r.tail_crc.to_le_bytes());
        }
        out.extend_from_slice(&(self.slots.len() as u32).to_le_bytes());
        for s in &self.slots {
            out.extend_from_slice(&s.id.0);
            out.extend_from_slice(&s.first.to_le_bytes());
            out.extend_from_slice(&s.entries.to_le_bytes());
            out.push(s.flags());
        }
        out.extend_from_slice(&(self.superseded.len() as u32).to_le_bytes());
        for n in &self.superseded {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(&self.epoch.to_le_bytes());
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a manifest; `Err` says why the bytes are not one (torn, damaged, another
    /// version).
    pub fn decode(bytes: &[u8]) -> std::result::Result<Manifest, String> {
        if bytes.len() < 12 || bytes[..8] != MAGIC {
            return Err("not an index manifest".into());
        }
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if !(OLDEST_VERSION..=VERSION).contains(&version) {
            return Err(format!(
                "index manifest version {version}, this build reads {OLDEST_VERSION} to {VERSION}"
            ));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err("index manifest checksum mismatch (torn or damaged)".into());
        }
        let mut r = Reader { b: body, at: 12 };
        let bad = || "malformed index manifest".to_string();
        let complete = match r.take(1).ok_or_else(bad)?[0] {
            0 => false,
            1 => true,
            _ => return Err(bad()),
        };
        let damage_digest = r.u64().ok_or_else(bad)?;
        let next_seq = r.u64().ok_or_else(bad)?;
        let next_entry = r.u64().ok_or_else(bad)?;
        let n = r.u32().ok_or_else(bad)? as usize;
        let mut runs = Vec::with_capacity(n.min(body.len() / 36));
        for _ in 0..n {
            runs.push(RunRecord {
                seq: r.u64().ok_or_else(bad)?,
                chunks: r.u64().ok_or_else(bad)?,
                sketches: r.u64().ok_or_else(bad)?,
                file_len: r.u64().ok_or_else(bad)?,
                tail_crc: r.u32().ok_or_else(bad)?,
            });
        }
        let n = r.u32().ok_or_else(bad)? as usize;
        let mut slots = Vec::with_capacity(n.min(body.len() / 45));
        let mut end = 0u64;
        for _ in 0..n {
            let mut id = [0u8; 32];
            id.copy_from_slice(r.take(32).ok_or_else(bad)?);
            let first = r.u64().ok_or_else(bad)?;
            let entries = r.u32().ok_or_else(bad)?;
            let flags = r.take(1).ok_or_else(bad)?[0];
            let all = if version == 2 {
                FLAG_KNOWN
            } else {
                FLAG_KNOWN | FLAG_TRIMMED | FLAG_DELTAS_LEFT_OUT
            };
            if flags & !all != 0 {
                return Err(bad());
            }
            // Ranges follow each other: a lookup finds a container by binary search.
            if first < end {
                return Err(bad());
            }
            end = first.checked_add(u64::from(entries)).ok_or_else(bad)?;
            slots.push(Slot {
                id: ContainerId(id),
                first,
                entries,
                known: flags & FLAG_KNOWN != 0,
                trimmed: version == 2 || flags & FLAG_TRIMMED != 0,
                deltas_left_out: flags & FLAG_DELTAS_LEFT_OUT != 0,
            });
        }
        let mut superseded = Vec::new();
        if version >= 4 {
            let n = r.u32().ok_or_else(bad)? as usize;
            superseded.reserve(n.min(body.len() / 8));
            for _ in 0..n {
                let e = r.u64().ok_or_else(bad)?;
                if superseded.last().is_some_and(|&last| e <= last) || e >= next_entry {
                    return Err(bad());
                }
                superseded.push(e);
            }
        }
        let epoch = if version >= 5 {
            r.u64().ok_or_else(bad)?
        } else {
            0
        };
        let seqs_ok = runs.iter().all(|run| run.seq < next_seq);
        if r.at != body.len() || end > next_entry || !seqs_ok {
            return Err(bad());
        }
        Ok(Manifest {
            complete,
            damage_digest,
            next_seq,
            next_entry,
            runs,
            slots,
            superseded,
            epoch,
        })
    }

    /// A manifest with nothing in it and a fresh epoch (a new or reset index, or a rebuild's
    /// start), keeping `next_seq` so that no run file number is used twice.
    pub fn fresh(next_seq: u64) -> Manifest {
        let mut m = Manifest {
            next_seq,
            ..Manifest::default()
        };
        m.new_epoch();
        m
    }

    /// Draws a new [`Self::epoch`]: an indexed chunk may leave the index or change its copy.
    pub fn new_epoch(&mut self) {
        let mut b = [0u8; 8];
        let drawn = getrandom::getrandom(&mut b).map(|()| u64::from_le_bytes(b));
        // Without a random source: the clock's nanoseconds, mixed with the last epoch.
        self.epoch = drawn.unwrap_or_else(|_| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            (nanos ^ self.epoch.rotate_left(17)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        });
    }

    /// Records that global entry numbers `numbers` are superseded (see [`Self::superseded`]).
    pub fn note_superseded(&mut self, numbers: impl IntoIterator<Item = u64>) {
        let before = self.superseded.len();
        self.superseded.extend(numbers);
        if self.superseded.len() != before {
            self.superseded.sort_unstable();
            self.superseded.dedup();
            if self.superseded.len() != before {
                self.new_epoch();
            }
        }
    }

    /// Keeps only the superseded numbers of known, untrimmed containers: the others' entries
    /// are not trusted by the fingerprint cache anyway, or are gone with their container.
    pub fn tidy_superseded(&mut self) {
        let slots = &self.slots;
        self.superseded
            .retain(|&n| slot_holding(slots, n).is_some_and(|s| s.known && !s.trimmed));
    }

    /// Replaces the manifest at `path` atomically: a temporary file renamed over it, without
    /// fsync. The index is a cache, and a crash cannot make it answer wrongly: a manifest
    /// that did not reach the disk leaves the previous one (an index behind the repository,
    /// which the catch-up at the next open takes the missing containers into, or one ahead
    /// of it, naming containers a prune deleted, which the catch-up rebuilds), and a torn one
    /// fails its CRC (the index is rebuilt at the next open). The run files a manifest names
    /// were fsynced before it was written, so whichever manifest survives names only whole
    /// runs. Two fsyncs at the end of every backup, on its critical path, are saved (issue 20).
    pub fn store(&self, path: &Path) -> Result<()> {
        let tmp = tmp_path(path);
        let io = |p: &Path| {
            let p = p.display().to_string();
            move |e| Error::io(format!("writing index manifest {p}"), e)
        };
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(&self.encode()).map_err(io(&tmp))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(io(path))?;
        Ok(())
    }
}

/// The temporary file a new manifest is written to before it replaces `path`.
pub fn tmp_path(path: &Path) -> std::path::PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|s| u32::from_le_bytes(s.try_into().unwrap_or([0; 4])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            complete: true,
            damage_digest: 77,
            next_seq: 9,
            next_entry: 30,
            runs: vec![RunRecord {
                seq: 3,
                chunks: 10,
                sketches: 4,
                file_len: 999,
                tail_crc: 5,
            }],
            slots: vec![
                Slot {
                    id: ContainerId([1; 32]),
                    first: 0,
                    entries: 10,
                    known: true,
                    trimmed: false,
                    deltas_left_out: true,
                },
                Slot {
                    id: ContainerId([2; 32]),
                    first: 10,
                    entries: 20,
                    known: false,
                    trimmed: true,
                    deltas_left_out: false,
                },
            ],
            superseded: vec![3, 12],
            epoch: 99,
        }
    }

    /// A version 4 manifest (no epoch) is read with epoch 0; the epoch round-trips, and a new
    /// superseded entry draws another.
    #[test]
    fn the_epoch_round_trips_and_changes_with_a_superseded_entry() {
        let m = sample();
        assert_eq!(Manifest::decode(&m.encode()).unwrap().epoch, 99);
        let mut v4 = m.encode();
        let n = v4.len();
        v4.drain(n - 12..n - 4);
        v4.truncate(v4.len() - 4);
        v4[8] = 4;
        let crc = crc32c::crc32c(&v4);
        v4.extend_from_slice(&crc.to_le_bytes());
        let read = Manifest::decode(&v4).unwrap();
        assert_eq!(read.epoch, 0);
        assert_eq!(read.superseded, m.superseded);
        let mut changed = m.clone();
        changed.note_superseded([20]);
        assert_ne!(changed.epoch, m.epoch);
        let mut same = m.clone();
        same.note_superseded([3]);
        assert_eq!(same.epoch, m.epoch, "nothing new superseded");
    }

    /// The layout mark holds while containers are only added, and breaks with anything that
    /// can give an indexed chunk another copy: a superseded entry, a container trimmed,
    /// forgotten or gone, a range renumbered.
    #[test]
    fn the_layout_mark_holds_while_containers_are_only_added() {
        let m = sample();
        let mark = m.layout_mark();
        assert!(m.layout_kept_since(&mark));
        let mut added = m.clone();
        added.slots.push(Slot {
            id: ContainerId([3; 32]),
            first: 30,
            entries: 5,
            known: true,
            trimmed: false,
            deltas_left_out: false,
        });
        assert!(added.layout_kept_since(&mark));
        assert_ne!(added.layout_mark(), mark);
        let changes: [fn(&mut Manifest); 7] = [
            |m| m.note_superseded([20]),
            |m| m.new_epoch(),
            |m| m.slots[0].trimmed = true,
            |m| m.slots[0].known = false,
            |m| m.slots[1].deltas_left_out = true,
            |m| {
                m.slots.remove(0);
            },
            |m| m.slots[1].first = 11,
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut changed = added.clone();
            change(&mut changed);
            assert!(!changed.layout_kept_since(&mark), "change {i}");
        }
        let mut shorter = m.clone();
        shorter.slots.pop();
        assert!(!shorter.layout_kept_since(&mark));
    }

    /// `m` encoded as a manifest of `version` 2 or 3 (no superseded list).
    fn encode_before_4(m: &Manifest, version: u8) -> Vec<u8> {
        let mut bytes = m.encode();
        let n = bytes.len();
        bytes.truncate(n - 4 - 8 - 4 - 8 * m.superseded.len());
        bytes[8] = version;
        let crc = crc32c::crc32c(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes
    }

    #[test]
    fn round_trips_and_refuses_every_torn_or_changed_byte() {
        let m = sample();
        let bytes = m.encode();
        assert_eq!(Manifest::decode(&bytes), Ok(m));
        for cut in 0..bytes.len() {
            assert!(Manifest::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x04;
            assert!(Manifest::decode(&bad).is_err(), "byte {at}");
        }
    }

    #[test]
    fn another_version_is_named() {
        let mut bytes = sample().encode();
        bytes[8] = 1;
        let err = Manifest::decode(&bytes).unwrap_err();
        assert!(err.contains("version 1"), "{err}");
    }

    /// A version 2 manifest (a known byte of 0 or 1) is read, every container trimmed: what
    /// was removed from it is not recorded.
    #[test]
    fn version_2_reads_with_every_container_trimmed() {
        let mut m = sample();
        for s in &mut m.slots {
            s.trimmed = false;
            s.deltas_left_out = false;
        }
        let read = Manifest::decode(&encode_before_4(&m, 2)).unwrap();
        assert!(read.slots.iter().all(|s| s.trimmed));
        assert!(read.slots[0].known);
        assert!(!read.slots[1].known);
        assert!(read.superseded.is_empty());
        // Flags other than known are refused in a version 2 manifest.
        assert!(Manifest::decode(&encode_before_4(&sample(), 2)).is_err());
    }

    /// A version 3 manifest is read as it was written, with no superseded entry listed.
    #[test]
    fn version_3_reads_with_nothing_superseded() {
        let m = sample();
        let read = Manifest::decode(&encode_before_4(&m, 3)).unwrap();
        assert_eq!(read.slots, m.slots);
        assert!(read.superseded.is_empty());
    }

    #[test]
    fn superseded_numbers_out_of_order_or_range_are_refused() {
        for bad in [vec![12, 3], vec![3, 3], vec![30]] {
            let mut m = sample();
            m.superseded = bad;
            assert!(Manifest::decode(&m.encode()).is_err(), "{:?}", m.superseded);
        }
    }

    #[test]
    fn tidying_keeps_the_superseded_entries_of_known_untrimmed_containers() {
        let mut m = sample();
        m.note_superseded([25, 3, 0]);
        assert_eq!(m.superseded, vec![0, 3, 12, 25]);
        m.tidy_superseded();
        // The second container is neither known nor untrimmed.
        assert_eq!(m.superseded, vec![0, 3]);
    }

    #[test]
    fn overlapping_ranges_are_refused() {
        let mut m = sample();
        m.slots[1].first = 5;
        assert!(Manifest::decode(&m.encode()).is_err());
    }

    #[test]
    fn store_replaces_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chunks.idx");
        sample().store(&path).unwrap();
        let mut m = sample();
        m.damage_digest = 1;
        m.store(&path).unwrap();
        assert_eq!(Manifest::decode(&std::fs::read(&path).unwrap()), Ok(m));
        assert!(!tmp_path(&path).exists());
    }
}
