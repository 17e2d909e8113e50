//! A command's I/O, as `backup --json` and `restore --json` report it under `io`: the
//! requests and bytes a metered repository ([`crate::Repository::metered`]) counted, by
//! direction and by purpose, and the seconds they would have taken under the disk and
//! object-store models of [`crate::backend::cost`].
//!
//! ```json
//! {"requests": 41, "bytes": 5242880,
//!  "read": {"requests": 30, "bytes": 5200000}, "write": {...}, "query": {...},
//!  "purposes": {"container_metadata": {"requests": 9, "bytes": 4096,
//!                                      "read": {...}, "write": {...}, "query": {...}},
//!               "chunk_data": {...}, "base_reads": {...}, "prefetch": {...},
//!               "index": {...}, "snapshots": {...}, "other": {...}},
//!  "modelled_seconds": {"disk": 0.31, "object_store": 1.29}}
//! ```
//!
//! Every purpose and direction is present, zero or not, so that scripts need not test for
//! keys.

use crate::backend::cost::{IoModels, ModelledSeconds};
use crate::backend::wrap::metered::{Direction, IoCounts, Purpose, Traffic};
use serde::ser::{Serialize, SerializeMap, Serializer};

/// Counted I/O with its modelled seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IoReport {
    /// Requests and bytes by purpose and direction.
    pub counts: IoCounts,
    /// Their seconds under the models the report was made with.
    pub modelled: ModelledSeconds,
}

impl IoReport {
    /// The report of `counts` under `models`.
    pub fn new(counts: IoCounts, models: &IoModels) -> Self {
        IoReport {
            counts,
            modelled: models.seconds(&counts),
        }
    }
}

/// `{"requests": n, "bytes": n}`.
struct TrafficJson(Traffic);

impl Serialize for TrafficJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("requests", &self.0.requests)?;
        m.serialize_entry("bytes", &self.0.bytes)?;
        m.end()
    }
}

/// A total, then its traffic in each direction (`of` gives a direction's).
fn traffic_with_directions<M: SerializeMap>(
    m: &mut M,
    total: Traffic,
    of: impl Fn(Direction) -> Traffic,
) -> Result<(), M::Error> {
    m.serialize_entry("requests", &total.requests)?;
    m.serialize_entry("bytes", &total.bytes)?;
    for d in Direction::ALL {
        m.serialize_entry(d.name(), &TrafficJson(of(d)))?;
    }
    Ok(())
}

/// One purpose: its total and its directions.
struct PurposeJson<'a>(&'a IoCounts, Purpose);

impl Serialize for PurposeJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let PurposeJson(c, p) = *self;
        let mut m = s.serialize_map(Some(2 + Direction::ALL.len()))?;
        traffic_with_directions(&mut m, c.purpose(p), |d| c.get(p, d))?;
        m.end()
    }
}

/// Every purpose, in [`Purpose::ALL`] order.
struct PurposesJson<'a>(&'a IoCounts);

impl Serialize for PurposesJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(Purpose::ALL.len()))?;
        for p in Purpose::ALL {
            m.serialize_entry(p.name(), &PurposeJson(self.0, p))?;
        }
        m.end()
    }
}

/// `{"disk": s, "object_store": s}`.
struct ModelledJson(ModelledSeconds);

impl Serialize for ModelledJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("disk", &self.0.disk)?;
        m.serialize_entry("object_store", &self.0.object_store)?;
        m.end()
    }
}

impl Serialize for IoReport {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = &self.counts;
        let mut m = s.serialize_map(Some(2 + Direction::ALL.len() + 2))?;
        traffic_with_directions(&mut m, c.total(), |d| c.direction(d))?;
        m.serialize_entry("purposes", &PurposesJson(c))?;
        m.serialize_entry("modelled_seconds", &ModelledJson(self.modelled))?;
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_every_purpose_and_direction_and_the_models() {
        let mut c = IoCounts::default();
        c.add(Purpose::ContainerMeta, Direction::Read, 2, 100);
        c.add(Purpose::ChunkData, Direction::Write, 1, 1000);
        let r = IoReport::new(c, &IoModels::default());
        let v = serde_json::to_value(r).unwrap();
        assert_eq!(v["requests"], 3);
        assert_eq!(v["bytes"], 1100);
        assert_eq!(v["read"]["requests"], 2);
        assert_eq!(v["write"]["bytes"], 1000);
        assert_eq!(v["query"]["requests"], 0);
        for p in Purpose::ALL {
            let e = &v["purposes"][p.name()];
            for key in ["requests", "bytes"] {
                assert!(e[key].is_u64(), "{} {key}", p.name());
            }
            for d in Direction::ALL {
                assert!(
                    e[d.name()]["requests"].is_u64(),
                    "{} {}",
                    p.name(),
                    d.name()
                );
            }
        }
        assert_eq!(v["purposes"]["container_metadata"]["read"]["bytes"], 100);
        assert_eq!(v["purposes"]["chunk_data"]["requests"], 1);
        assert_eq!(v["purposes"]["base_reads"]["requests"], 0);
        assert_eq!(v["modelled_seconds"]["disk"], r.modelled.disk);
        assert_eq!(
            v["modelled_seconds"]["object_store"],
            r.modelled.object_store
        );
    }
}
