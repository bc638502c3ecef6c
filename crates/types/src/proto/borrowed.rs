//! Borrowed encodings and decodings of the hot lookup path: a batch of
//! committed reads is sent from one buffer of keys and its answer decoded
//! in place, byte for byte as the owned `ClientRequest::Batch` and
//! `ClientResponse::Batch` are.

use super::*;

/// A committed read of a `ClientRequest::Batch` whose key and column list
/// are borrowed: encodes exactly like the `KeyOp` it stands for, so that a
/// batch of lookups is sent from one buffer of keys (see `BatchOf`).
#[derive(Serialize)]
#[serde(rename = "KeyOp")]
pub struct LookupOpRef<'a> {
    pub table: TableId,
    pub table_version: u32,
    pub partition: u32,
    #[serde(with = "serde_bytes")]
    pub key: &'a [u8],
    pub kind: &'static OpKind,
    pub projection: Option<&'a [ColumnId]>,
}

/// The `kind` of every `LookupOpRef`.
pub static COMMITTED_READ: OpKind = OpKind::Read { lock: LockMode::Committed };

/// Serializes exactly like `ClientRequest::Batch` of the operations that
/// its content serializes as a sequence of (`KeyOp`s or `LookupOpRef`s; a
/// slice, not an array, which serde writes as a tuple without its length):
/// the client sends borrowed operations, and keeps them to retry after a
/// layout change.
pub struct BatchOf<T>(pub T);

impl<T: Serialize> Serialize for BatchOf<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_newtype_variant("ClientRequest", 0, "Batch", &self.0)
    }
}

/// Serializes exactly like `ClientResponse::Batch` of the results that its
/// content serializes as a sequence of (`OpResult`s or `OpResultRef`s).
pub struct BatchAnswerOf<T>(pub T);

impl<T: Serialize> Serialize for BatchAnswerOf<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_newtype_variant("ClientResponse", 1, "Batch", &self.0)
    }
}

/// One operation's result in an answer to a batch, its row borrowed:
/// from the frame (`decode_batch_answer`), or from the data node's table
/// (an answer is serialized as `OpResult` is).
#[derive(Debug, PartialEq, Serialize)]
#[serde(rename = "OpResult")]
pub enum OpResultRef<'a> {
    Row(#[serde(with = "serde_bytes")] &'a [u8]),
    NotFound,
    Done,
    Error(DbError),
    Unchanged,
}

/// Decodes an answer to a `Batch` request without copying its rows:
/// `each` gets every operation's result in order, and the count is
/// returned. Any other answer (an error for the whole batch) comes back
/// decoded as `Err`.
pub fn decode_batch_answer(
    body: &[u8],
    each: impl FnMut(OpResultRef<'_>) -> Result<()>,
) -> Result<std::result::Result<usize, ClientResponse>> {
    use bincode::Options;
    // The variant index of `ClientResponse::Batch`, as the codec writes it
    // (checked by `batch_answers_decode_borrowed_like_owned`).
    const BATCH: [u8; 4] = 1u32.to_le_bytes();
    if body.get(..4) != Some(&BATCH[..]) {
        return decode_body::<ClientResponse>(body).map(Err);
    }
    let mut failed = None;
    let seed = answer_decode::Answer { each, failed: &mut failed };
    let decoded = codec().with_limit(body.len() as u64 * 4 + 1024).deserialize_seed(seed, body);
    if let Some(e) = failed {
        return Err(e);
    }
    decoded.map(Ok).map_err(|e| DbError::malformed(format!("could not decode the message: {e}")))
}

/// A committed read of a `Batch` request, its key borrowed from the frame
/// (`decode_lookups`).
#[derive(Debug, PartialEq)]
pub struct LookupRead<'a> {
    pub table: TableId,
    pub table_version: u32,
    pub partition: u32,
    pub key: &'a [u8],
    /// The columns to return, `columns[start..end]` of `decode_lookups`
    /// (reads listing the same columns one after the other share them);
    /// None: the whole row.
    pub projection: Option<(u32, u32)>,
}

/// Decodes a `Batch` request made only of committed reads without an
/// allocation per read: keys stay in the frame, and every read's column
/// list goes to `columns`. Says false for any other request or a batch
/// holding any other operation (and for a malformed one), which is then
/// decoded whole as usual.
pub fn decode_lookups<'a>(body: &'a [u8], reads: &mut Vec<LookupRead<'a>>, columns: &mut Vec<ColumnId>) -> bool {
    use bincode::Options;
    // The variant index of `ClientRequest::Batch`, as the codec writes it
    // (checked by `lookups_decode_borrowed_like_owned`).
    if body.get(..4) != Some(&0u32.to_le_bytes()[..]) {
        return false;
    }
    let seed = lookup_decode::Request { reads, columns };
    codec().with_limit(body.len() as u64 * 4 + 1024).deserialize_seed(seed, body).is_ok()
}

/// The serde visitors of `decode_lookups`.
mod lookup_decode {
    use super::{ColumnId, LockMode, LookupRead};
    use serde::de::{self, DeserializeSeed, EnumAccess, SeqAccess, VariantAccess, Visitor};
    use std::fmt;

    pub(super) struct Request<'r, 'a> {
        pub reads: &'r mut Vec<LookupRead<'a>>,
        pub columns: &'r mut Vec<ColumnId>,
    }

    impl<'de> DeserializeSeed<'de> for Request<'_, 'de> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_enum("ClientRequest", &["Batch"], self)
        }
    }

    impl<'de> Visitor<'de> for Request<'_, 'de> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a batch of committed reads")
        }
        fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
            let (variant, access): (u32, _) = data.variant()?;
            if variant != 0 {
                return Err(de::Error::custom("not a batch"));
            }
            access.newtype_variant_seed(Reads(self))
        }
    }

    struct Reads<'r, 'a>(Request<'r, 'a>);

    impl<'de> DeserializeSeed<'de> for Reads<'_, 'de> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de> Visitor<'de> for Reads<'_, 'de> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of operations")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while let Some(read) = seq.next_element_seed(Read(&mut *self.0.columns))? {
                // Sized once the first operation shows a batch of reads: a
                // batch of writes is turned away without an allocation.
                if self.0.reads.is_empty() {
                    self.0.reads.reserve(seq.size_hint().unwrap_or(0).min(1 << 16) + 1);
                }
                self.0.reads.push(read);
            }
            Ok(())
        }
    }

    struct Read<'r>(&'r mut Vec<ColumnId>);

    const FIELDS: &[&str] = &["table", "table_version", "partition", "key", "kind", "projection"];

    impl<'de> DeserializeSeed<'de> for Read<'_> {
        type Value = LookupRead<'de>;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<LookupRead<'de>, D::Error> {
            d.deserialize_struct("KeyOp", FIELDS, self)
        }
    }

    impl<'de> Visitor<'de> for Read<'_> {
        type Value = LookupRead<'de>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an operation")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<LookupRead<'de>, A::Error> {
            let missing = || de::Error::custom("an operation is cut short");
            let table = seq.next_element()?.ok_or_else(missing)?;
            let table_version = seq.next_element()?.ok_or_else(missing)?;
            let partition = seq.next_element()?.ok_or_else(missing)?;
            let key: &'de [u8] = seq.next_element()?.ok_or_else(missing)?;
            // Told from its variant, a write is refused before its row is read.
            seq.next_element_seed(CommittedRead)?.ok_or_else(missing)?;
            let start = self.0.len();
            let listed = seq.next_element_seed(Projection(&mut *self.0))?.ok_or_else(missing)?;
            let projection = match listed {
                false => None,
                true => {
                    let end = self.0.len();
                    // The same list as the read before: share it.
                    let len = end - start;
                    if start >= len && self.0[start - len..start] == self.0[start..end] {
                        self.0.truncate(start);
                        Some(((start - len) as u32, start as u32))
                    } else {
                        Some((start as u32, end as u32))
                    }
                }
            };
            Ok(LookupRead { table, table_version, partition, key, projection })
        }
    }

    /// An `OpKind` that must be a committed read.
    struct CommittedRead;

    impl<'de> DeserializeSeed<'de> for CommittedRead {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_enum("OpKind", &["Read"], self)
        }
    }

    impl<'de> Visitor<'de> for CommittedRead {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a committed read")
        }
        fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
            let (variant, access): (u32, _) = data.variant()?;
            // `OpKind::Read` is variant 0 (`lookups_decode_borrowed_like_owned`).
            if variant != 0 {
                return Err(de::Error::custom("not a read"));
            }
            access.struct_variant(&["lock"], self)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            match seq.next_element::<LockMode>()? {
                Some(LockMode::Committed) => Ok(()),
                _ => Err(de::Error::custom("not a committed read")),
            }
        }
    }

    /// An optional column list, appended to the batch's: says whether
    /// there was one.
    struct Projection<'r>(&'r mut Vec<ColumnId>);

    impl<'de> DeserializeSeed<'de> for Projection<'_> {
        type Value = bool;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            d.deserialize_option(self)
        }
    }

    impl<'de> Visitor<'de> for Projection<'_> {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an optional list of columns")
        }
        fn visit_none<E: de::Error>(self) -> Result<bool, E> {
            Ok(false)
        }
        fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
            d.deserialize_seq(self)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
            while let Some(column) = seq.next_element::<ColumnId>()? {
                self.0.push(column);
            }
            Ok(true)
        }
    }
}

/// The serde visitors of `decode_batch_answer`.
mod answer_decode {
    use super::{DbError, OpResultRef};
    use serde::de::{self, DeserializeSeed, EnumAccess, SeqAccess, VariantAccess, Visitor};
    use std::fmt;

    pub(super) struct Answer<'f, F> {
        pub each: F,
        /// An error `each` returned (decoding stops at it).
        pub failed: &'f mut Option<DbError>,
    }

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> DeserializeSeed<'de> for Answer<'_, F> {
        type Value = usize;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
            d.deserialize_enum("ClientResponse", &["Hello", "Batch"], self)
        }
    }

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> Visitor<'de> for Answer<'_, F> {
        type Value = usize;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a batch answer")
        }
        fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<usize, A::Error> {
            let (variant, access): (u32, _) = data.variant()?;
            if variant != 1 {
                return Err(de::Error::custom(format!("answer variant {variant} is not a batch answer")));
            }
            access.newtype_variant_seed(Results(self))
        }
    }

    struct Results<'f, F>(Answer<'f, F>);

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> DeserializeSeed<'de> for Results<'_, F> {
        type Value = usize;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> Visitor<'de> for Results<'_, F> {
        type Value = usize;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of operation results")
        }
        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<usize, A::Error> {
            let mut count = 0;
            while let Some(()) = seq.next_element_seed(OneResult(&mut self.0))? {
                count += 1;
            }
            Ok(count)
        }
    }

    struct OneResult<'a, 'f, F>(&'a mut Answer<'f, F>);

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> DeserializeSeed<'de> for OneResult<'_, '_, F> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_enum("OpResult", &["Row", "NotFound", "Done", "Error", "Unchanged"], self)
        }
    }

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> Visitor<'de> for OneResult<'_, '_, F> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an operation result")
        }
        fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
            let (variant, access): (u32, _) = data.variant()?;
            let result = match variant {
                0 => return access.newtype_variant_seed(RowBytes(self.0)),
                1 => access.unit_variant().map(|_| OpResultRef::NotFound)?,
                2 => access.unit_variant().map(|_| OpResultRef::Done)?,
                3 => OpResultRef::Error(access.newtype_variant::<DbError>()?),
                4 => access.unit_variant().map(|_| OpResultRef::Unchanged)?,
                other => return Err(de::Error::custom(format!("operation result variant {other} does not exist"))),
            };
            deliver(self.0, result)
        }
    }

    fn deliver<E: de::Error, F: FnMut(OpResultRef<'_>) -> crate::Result<()>>(
        answer: &mut Answer<'_, F>,
        result: OpResultRef<'_>,
    ) -> Result<(), E> {
        (answer.each)(result).map_err(|e| {
            let message = e.message.clone();
            *answer.failed = Some(e);
            E::custom(message)
        })
    }

    struct RowBytes<'a, 'f, F>(&'a mut Answer<'f, F>);

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> DeserializeSeed<'de> for RowBytes<'_, '_, F> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_bytes(self)
        }
    }

    impl<'de, F: FnMut(OpResultRef<'_>) -> crate::Result<()>> Visitor<'de> for RowBytes<'_, '_, F> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a row's bytes")
        }
        fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<(), E> {
            deliver(self.0, OpResultRef::Row(bytes))
        }
    }
}
