//! The repository format: exactly what docs/format.md specifies, and nothing that runs.
//!
//! Each module encodes and decodes one kind of object; constants mirror the document's byte
//! tables. Decoders reject malformed input with an error and never panic (fuzz targets in
//! `fuzz/`).

/// Serde for a 32-byte id type with `to_hex` and `from_hex`: in JSON it is its 64-character
/// lowercase hex form, and a reader refuses any other form.
macro_rules! hex_id_serde {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_hex())
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                <$t>::from_hex(&s)
                    .ok_or_else(|| serde::de::Error::custom("not 64 lowercase hex digits"))
            }
        }
    };
}

pub mod config;
pub mod container;
pub mod damage;
pub mod dense;
pub mod envelope;
pub mod index_file;
pub mod sealed;
pub mod snapshot;
pub mod tree;
