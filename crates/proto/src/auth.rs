//! Checking a password a client sent, for every server that takes one (a node, the coordination
//! store).

/// Whether `given` is the password `expected`, in time that depends on the length of `expected`
/// only, never on where the two differ (so a client cannot find the password byte by byte from
/// how long a refusal takes). Every server that checks a password checks it here.
pub fn same_password(expected: &str, given: &[u8]) -> bool {
    let expected = expected.as_bytes();
    let mut diff = u8::from(expected.len() != given.len());
    for (i, &b) in expected.iter().enumerate() {
        diff |= b ^ given.get(i).copied().unwrap_or(!b);
    }
    // Kept opaque so the compiler cannot turn the loop into an early-exit comparison.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::same_password;

    #[test]
    fn only_the_password_itself_matches() {
        assert!(same_password("s3cret", b"s3cret"));
        for wrong in [
            &b""[..],
            b"s",
            b"s3cre",
            b"s3cret!",
            b"S3CRET",
            b"s3crex",
            b"\0s3cret",
        ] {
            assert!(!same_password("s3cret", wrong), "{wrong:?}");
        }
        assert!(same_password("", b""));
        assert!(!same_password("", b"x"));
        // Bytes past the length of the password, or ones that XOR to the same, change nothing.
        assert!(!same_password("ab", b"ab\0"));
        assert!(!same_password("a", &[b'a' ^ 0xff]));
    }
}
