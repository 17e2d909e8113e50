//! `check --read-data-subset`: which containers a check reads whole, in restic's three forms,
//! so that a large repository's data can be verified a part at a time (`1/7` on Mondays, `2/7`
//! on Tuesdays, ...), or a random sample of it.

use crate::error::{Error, Result};
use std::collections::HashSet;

/// How much stored data a check reads and verifies.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReadData {
    /// Metadata only.
    Metadata,
    /// Every container, whole.
    All,
    /// Some containers, whole.
    Subset(DataSubset),
}

impl From<bool> for ReadData {
    fn from(read_data: bool) -> Self {
        if read_data {
            ReadData::All
        } else {
            ReadData::Metadata
        }
    }
}

/// A part of the containers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DataSubset {
    /// `n/t`: part `n` of `t` parts, by container name (the first four bytes of the id, as a
    /// big-endian number, modulo `t`, equal to `n - 1`): the same containers every time, and
    /// parts `1/t` to `t/t` cover every container once.
    Part {
        /// Which part, from 1.
        n: u32,
        /// Of how many.
        t: u32,
    },
    /// `x%`: that share of the containers, drawn at random (at least one).
    Percent(f64),
    /// `500M`, `2G`: containers drawn at random until their sizes add up to this many bytes.
    Bytes(u64),
}

impl std::str::FromStr for DataSubset {
    type Err = Error;

    /// `n/t` (1 <= n <= t), `x%` (0 < x <= 100), or a size with a unit `K`, `M`, `G` or `T`
    /// (powers of 1024).
    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| {
            Error::InvalidOption(format!(
                "--read-data-subset {s:?}: {why} (give n/t, x% or a size such as 500M)"
            ))
        };
        let s = s.trim();
        if let Some((n, t)) = s.split_once('/') {
            let (Ok(n), Ok(t)) = (n.trim().parse::<u32>(), t.trim().parse::<u32>()) else {
                return Err(bad("n and t must be whole numbers"));
            };
            if n == 0 || t == 0 || n > t {
                return Err(bad("n must be between 1 and t"));
            }
            return Ok(DataSubset::Part { n, t });
        }
        if let Some(p) = s.strip_suffix('%') {
            let x: f64 = p.trim().parse().map_err(|_| bad("not a percentage"))?;
            if x.is_nan() || x <= 0.0 || x > 100.0 {
                return Err(bad("the percentage must be above 0 and at most 100"));
            }
            return Ok(DataSubset::Percent(x));
        }
        let upper = s.to_ascii_uppercase();
        let sized = upper.strip_suffix('B').unwrap_or(&upper);
        let Some((at, unit)) = sized.char_indices().last() else {
            return Err(bad("empty"));
        };
        let shift = match unit {
            'K' => 10,
            'M' => 20,
            'G' => 30,
            'T' => 40,
            _ => return Err(bad("a size needs a unit (K, M, G or T)")),
        };
        let num = &sized[..at];
        let x: f64 = num.trim().parse().map_err(|_| bad("not a size"))?;
        if x.is_nan() || x <= 0.0 {
            return Err(bad("the size must be above 0"));
        }
        Ok(DataSubset::Bytes((x * (1u64 << shift) as f64) as u64))
    }
}

impl std::fmt::Display for DataSubset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataSubset::Part { n, t } => write!(f, "{n}/{t}"),
            DataSubset::Percent(x) => write!(f, "{x}%"),
            DataSubset::Bytes(b) => write!(f, "{:.1} MiB", *b as f64 / (1u64 << 20) as f64),
        }
    }
}

impl DataSubset {
    /// The names of the containers to read, of `containers` (name, size); `seed` draws the
    /// random forms.
    pub fn choose(&self, containers: &[(String, u64)], seed: u64) -> HashSet<String> {
        match *self {
            DataSubset::Part { n, t } => containers
                .iter()
                .filter(|(name, _)| {
                    let head = name
                        .get(..8)
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                        .unwrap_or(0);
                    head % t == n - 1
                })
                .map(|(name, _)| name.clone())
                .collect(),
            DataSubset::Percent(x) => {
                let want = ((containers.len() as f64 * x / 100.0).ceil() as usize)
                    .clamp(containers.len().min(1), containers.len());
                shuffled(containers, seed)
                    .into_iter()
                    .take(want)
                    .map(|(name, _)| name.clone())
                    .collect()
            }
            DataSubset::Bytes(bytes) => {
                let mut sum = 0u64;
                shuffled(containers, seed)
                    .into_iter()
                    .take_while(|(_, size)| {
                        let more = sum < bytes;
                        sum += size;
                        more
                    })
                    .map(|(name, _)| name.clone())
                    .collect()
            }
        }
    }
}

/// `containers` in a random order drawn from `seed` (Fisher-Yates with SplitMix64).
fn shuffled(containers: &[(String, u64)], seed: u64) -> Vec<&(String, u64)> {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut v: Vec<&(String, u64)> = containers.iter().collect();
    for i in (1..v.len()).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<(String, u64)> {
        (0..n)
            .map(|i| {
                (
                    format!(
                        "{:08x}{}",
                        (i as u32).wrapping_mul(2_654_435_761),
                        "0".repeat(56)
                    ),
                    100,
                )
            })
            .collect()
    }

    #[test]
    fn the_forms_parse_as_restic_writes_them() {
        assert_eq!(
            "2/5".parse::<DataSubset>().unwrap(),
            DataSubset::Part { n: 2, t: 5 }
        );
        assert_eq!(
            "2.5%".parse::<DataSubset>().unwrap(),
            DataSubset::Percent(2.5)
        );
        assert_eq!(
            "500M".parse::<DataSubset>().unwrap(),
            DataSubset::Bytes(500 << 20)
        );
        assert_eq!(
            "1g".parse::<DataSubset>().unwrap(),
            DataSubset::Bytes(1 << 30)
        );
        assert_eq!(
            "2KB".parse::<DataSubset>().unwrap(),
            DataSubset::Bytes(2 << 10)
        );
        for bad in ["0/5", "6/5", "a/b", "0%", "101%", "12", "-1G", "x%", ""] {
            assert!(bad.parse::<DataSubset>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_parts_cover_every_container_once() {
        let all = names(200);
        let mut seen = HashSet::new();
        for n in 1..=7 {
            let part = DataSubset::Part { n, t: 7 }.choose(&all, 0);
            assert!(!part.is_empty());
            for name in part {
                assert!(seen.insert(name), "a container in two parts");
            }
        }
        assert_eq!(seen.len(), all.len());
    }

    #[test]
    fn random_subsets_take_their_share_or_their_bytes() {
        let all = names(200);
        assert_eq!(DataSubset::Percent(10.0).choose(&all, 1).len(), 20);
        assert_eq!(DataSubset::Percent(0.1).choose(&all, 1).len(), 1);
        assert_eq!(DataSubset::Bytes(1_000).choose(&all, 1).len(), 10);
        assert_eq!(DataSubset::Bytes(1_050).choose(&all, 1).len(), 11);
        assert_ne!(
            DataSubset::Percent(10.0).choose(&all, 1),
            DataSubset::Percent(10.0).choose(&all, 2)
        );
    }
}
