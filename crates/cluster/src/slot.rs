//! Redis Cluster's hash slots: which of the 16,384 buckets a key belongs to.

/// Hash slots in a cluster (Redis Cluster's count, so its clients route by themselves).
pub const SLOTS: u16 = 16_384;

/// CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with (its `crc16.c`).
const CRC16: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);

/// The slot of `key`: CRC16 of the key modulo 16,384, or of its hash tag, the bytes between
/// the first `{` and the first `}` after it when there are any (so `{user1}.a` and `{user1}.b`
/// share a slot and one command may use both).
pub fn key_slot(key: &[u8]) -> u16 {
    CRC16.checksum(hash_tag(key)) % SLOTS
}

/// The part of `key` that is hashed: its tag if it has a non-empty one, else all of it.
fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &key[open + 1..open + 1 + len],
        _ => key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_clusters() {
        // The check value of CRC16/XMODEM, and slots Redis answers for CLUSTER KEYSLOT.
        assert_eq!(CRC16.checksum(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"somekey"), 11058);
        assert_eq!(key_slot(b"hello"), 866);
        assert_eq!(key_slot(b""), 0);
    }

    #[test]
    fn a_hash_tag_decides_the_slot() {
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(
            key_slot(b"{user1000}.followers"),
            key_slot(b"{user1000}.following")
        );
        // Only the first `{` counts, an empty tag is no tag, an unclosed one neither.
        assert_eq!(
            key_slot(b"foo{}{bar}"),
            CRC16.checksum(b"foo{}{bar}") % SLOTS
        );
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"{open"), CRC16.checksum(b"{open") % SLOTS);
    }
}
