//! One trace record, whatever the format.

/// The operation a record performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// A read.
    Get,
    /// A write.
    Put,
    /// A deletion.
    Delete,
}

/// One request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// Timestamp in whole seconds, as the trace gives it.
    pub time: u64,
    /// Object id (string ids are hashed).
    pub key: u64,
    /// Object size in bytes (formats without sizes use a default).
    pub size: u32,
    /// Operation.
    pub op: Op,
    /// Index of this key's next record, or −1 if none or unknown.
    pub next_access: i64,
}

impl Record {
    /// A read of `key`.
    pub fn get(time: u64, key: u64, size: u32) -> Self {
        Self {
            time,
            key,
            size,
            op: Op::Get,
            next_access: -1,
        }
    }
}

/// A stable 64-bit hash of a string id (FNV-1a), so the same trace always maps to the same keys.
pub fn hash_id(s: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in s {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
