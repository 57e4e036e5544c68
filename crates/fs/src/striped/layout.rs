//! Which server holds which stripe of a file.
//!
//! DataWarp's rule: a hash of the file's inode picks the server of its first stripe, and the
//! stripes after it go round the servers in order. Every client computes the same owner for
//! the same byte, so a stripe has one owner and two clients writing it meet there.

/// The smallest stripe: one extent of the servers' caches. A server's extent is its unit of
/// copy-up and write-back; a stripe that split an extent between two servers would have both
/// write back the whole extent, each with stale bytes of the other's part.
pub const MIN_STRIPE: u64 = 1 << 20;

/// The largest stripe. Nothing in the data path depends on it (a request is cut at stripe
/// boundaries whatever their size); past it, files smaller than one stripe, most of a job's,
/// would each sit on one server and the servers would share the load only by chance.
pub const MAX_STRIPE: u64 = 256 << 20;

/// The default stripe: the servers' extent, so that a job's 1 MiB writes (IOR's and most
/// MPI-IO collective buffers) each reach one server and consecutive ones reach all of them.
pub const DEFAULT_STRIPE: u64 = 1 << 20;

/// How a job's files are cut and placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    stripe: u64,
    servers: usize,
}

/// A stripe size or server count that cannot work, in words for the flag that gave it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// Not a multiple of [`MIN_STRIPE`], or outside the bounds.
    #[error(
        "stripe size {0} bytes: must be a multiple of 1 MiB (the servers' extent) from 1 MiB to 256 MiB"
    )]
    Stripe(u64),
    /// No servers.
    #[error("no cache servers given")]
    NoServers,
}

impl Layout {
    /// Stripes of `stripe` bytes over `servers` servers.
    pub fn new(stripe: u64, servers: usize) -> Result<Self, LayoutError> {
        if !(MIN_STRIPE..=MAX_STRIPE).contains(&stripe) || !stripe.is_multiple_of(MIN_STRIPE) {
            return Err(LayoutError::Stripe(stripe));
        }
        if servers == 0 {
            return Err(LayoutError::NoServers);
        }
        Ok(Self { stripe, servers })
    }

    /// The stripe size, bytes.
    pub fn stripe(&self) -> u64 {
        self.stripe
    }

    /// How many servers.
    pub fn servers(&self) -> usize {
        self.servers
    }

    /// The server holding the byte at `offset` of the file whose backing inode number is
    /// `ino`. The inode number alone: a parallel file system shows every node the same inode
    /// numbers (Lustre's come from the file's FID) but each node its own device number.
    pub fn owner(&self, ino: u64, offset: u64) -> usize {
        let first = mix(ino);
        let stripe = offset / self.stripe;
        (first.wrapping_add(stripe) % self.servers as u64) as usize
    }

    /// `offset..offset+len` of the file `ino`, cut at stripe boundaries: `(offset, len, owner)` per piece, in order.
    pub fn pieces(&self, ino: u64, offset: u64, len: u64) -> Vec<(u64, u64, usize)> {
        let mut out = Vec::new();
        let end = offset.saturating_add(len);
        let mut at = offset;
        while at < end {
            let next = ((at / self.stripe) + 1)
                .saturating_mul(self.stripe)
                .min(end);
            out.push((at, next - at, self.owner(ino, at)));
            at = next;
        }
        out
    }
}

/// SplitMix64's finaliser: the same in every process (no per-process hash keys), and an inode
/// number's low bits, which run in order within a directory, spread over every server.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_go_round_the_servers_from_a_first_one_the_inode_picks() {
        let l = Layout::new(1 << 20, 3).expect("valid");
        let first = l.owner(42, 0);
        for k in 0..9u64 {
            assert_eq!(l.owner(42, k << 20), (first + k as usize) % 3);
            assert_eq!(l.owner(42, (k << 20) + 12345), (first + k as usize) % 3);
        }
        // Files in one directory (inode numbers in a row) start on every server.
        let firsts: std::collections::HashSet<usize> =
            (1000..1030).map(|ino| l.owner(ino, 0)).collect();
        assert_eq!(firsts.len(), 3);
    }

    #[test]
    fn a_request_is_cut_at_stripe_boundaries_and_nowhere_else() {
        let l = Layout::new(2 << 20, 2).expect("valid");
        let p = l.pieces(1, (2 << 20) - 10, (4 << 20) + 20);
        let lens: Vec<u64> = p.iter().map(|x| x.1).collect();
        assert_eq!(lens, vec![10, 2 << 20, 2 << 20, 10]);
        assert_eq!(p.iter().map(|x| x.1).sum::<u64>(), (4 << 20) + 20);
        for w in p.windows(2) {
            assert_eq!(w[0].0 + w[0].1, w[1].0);
            assert_ne!(w[0].2, w[1].2, "neighbouring stripes on one of two servers");
        }
        assert!(l.pieces(1, 5, 0).is_empty());
    }

    #[test]
    fn stripe_sizes_off_the_extent_grid_or_out_of_bounds_are_refused() {
        for bad in [0, 4096, (1 << 20) + 1, 3 << 19, 512 << 20] {
            assert_eq!(Layout::new(bad, 3), Err(LayoutError::Stripe(bad)));
        }
        assert_eq!(Layout::new(1 << 20, 0), Err(LayoutError::NoServers));
        assert!(Layout::new(256 << 20, 1).is_ok());
    }
}
