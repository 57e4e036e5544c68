//! A seeded random-frame fuzzer for the protocol parser: frames built at random (requests, and
//! every RESP3 type nested), then mutated (bytes flipped, cut, duplicated, inserted), fed whole
//! and in pieces to both parsers. Run for millions of frames by `pliant bench frames`, for a few
//! thousand in the suite. A panic is the failure it looks for; a hang would be one too, so every
//! call is bounded by the input's length (each parse is linear in its buffer).

use std::time::Instant;

use crate::frame::{Cursor, Frame, FrameError, Limits, Protocol};

/// What a fuzzing run saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct FuzzReport {
    /// Inputs tried.
    pub inputs: u64,
    /// Inputs a parser read a frame from.
    pub parsed: u64,
    /// Inputs a parser found incomplete.
    pub incomplete: u64,
    /// Inputs a parser refused as a protocol error.
    pub refused: u64,
    /// Inputs whose piecewise parse (through a [`Cursor`]) disagreed with the whole parse: must
    /// be 0.
    pub disagreements: u64,
    /// Seconds taken.
    pub seconds: f64,
}

/// Fuzzes the parsers with `count` inputs from `seed`; `progress` hears how many are done.
pub fn fuzz_frames(count: u64, seed: u64, progress: &dyn Fn(u64)) -> FuzzReport {
    let start = Instant::now();
    let mut rng = Rng(seed.max(1));
    let limits = Limits {
        max_bulk: 1 << 16,
        max_elements: 1 << 10,
        max_depth: 8,
        max_inline: 1 << 10,
        ..Limits::default()
    };
    let mut r = FuzzReport::default();
    let mut buf = Vec::new();
    for i in 0..count {
        buf.clear();
        let frame = random_frame(&mut rng, 0);
        frame.write(
            if rng.below(2) == 0 {
                Protocol::Resp2
            } else {
                Protocol::Resp3
            },
            &mut buf,
        );
        mutate(&mut rng, &mut buf);
        r.inputs += 1;
        let request = rng.below(2) == 0;
        let whole = if request {
            Frame::parse_request(&buf, &limits).map(|(_, n)| n)
        } else {
            Frame::parse(&buf, &limits).map(|(_, n)| n)
        };
        match &whole {
            Ok(_) => r.parsed += 1,
            Err(FrameError::Incomplete) => r.incomplete += 1,
            Err(FrameError::Protocol(_)) => r.refused += 1,
        }
        // The same bytes in random pieces through one cursor must end the same way.
        let mut cursor = Cursor::default();
        let mut end = 0;
        let piecewise = loop {
            end = (end + 1 + rng.below(8) as usize).min(buf.len());
            let got = if request {
                cursor.parse_request(&buf[..end], &limits).map(|(_, n)| n)
            } else {
                cursor.parse(&buf[..end], &limits).map(|(_, n)| n)
            };
            if !matches!(got, Err(FrameError::Incomplete)) || end == buf.len() {
                break got;
            }
        };
        let same = match (&whole, &piecewise) {
            (Ok(a), Ok(b)) => a == b,
            (Err(FrameError::Incomplete), Err(FrameError::Incomplete)) => true,
            (Err(FrameError::Protocol(_)), Err(FrameError::Protocol(_))) => true,
            // A frame or a refusal found in a prefix is one the whole buffer holds too.
            _ => false,
        };
        if !same {
            r.disagreements += 1;
        }
        if i % 65_536 == 0 {
            progress(i);
        }
    }
    progress(count);
    r.seconds = start.elapsed().as_secs_f64();
    r
}

/// xorshift64*: small, seeded, and good enough to pick shapes and bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn bytes(&mut self, max: u64) -> Vec<u8> {
        let n = self.below(max + 1);
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn random_frame(rng: &mut Rng, depth: u32) -> Frame {
    let leaf = depth >= 4 || rng.below(3) > 0;
    if leaf {
        match rng.below(10) {
            0 => Frame::Simple("OK".into()),
            1 => Frame::Error("ERR x".into()),
            2 => Frame::Integer(rng.next() as i64),
            3 => Frame::Null,
            4 => Frame::Double(f64::from_bits(rng.next())),
            5 => Frame::Boolean(rng.below(2) == 0),
            6 => Frame::BigNumber(rng.below(1_000_000).to_string()),
            7 => Frame::Verbatim(rng.bytes(24).into()),
            _ => Frame::Bulk(rng.bytes(32).into()),
        }
    } else {
        let n = rng.below(6) as usize;
        let items: Vec<Frame> = (0..n).map(|_| random_frame(rng, depth + 1)).collect();
        match rng.below(5) {
            0 => Frame::Map(
                items
                    .into_iter()
                    .map(|f| (Frame::Bulk(bytes::Bytes::from_static(b"k")), f))
                    .collect(),
            ),
            1 => Frame::Set(items),
            2 => Frame::Push(items),
            _ => Frame::Array(items),
        }
    }
}

/// Zero to three random edits: flip a byte, cut the tail, duplicate a span, insert digits or
/// protocol bytes.
fn mutate(rng: &mut Rng, buf: &mut Vec<u8>) {
    for _ in 0..rng.below(4) {
        if buf.is_empty() {
            return;
        }
        let at = rng.below(buf.len() as u64) as usize;
        match rng.below(4) {
            0 => buf[at] = rng.next() as u8,
            1 => buf.truncate(at),
            2 => {
                let end = (at + 1 + rng.below(16) as usize).min(buf.len());
                let span = buf[at..end].to_vec();
                buf.splice(at..at, span);
            }
            _ => {
                const INSERTS: [&[u8]; 6] = [b"*", b"$", b"\r\n", b"999999999", b"-1", b"*1\r\n"];
                let ins = INSERTS[rng.below(INSERTS.len() as u64) as usize];
                buf.splice(at..at, ins.iter().copied());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_thousand_random_frames_neither_panic_nor_disagree() {
        let r = fuzz_frames(10_000, 42, &|_| {});
        assert_eq!(r.inputs, 10_000);
        assert_eq!(r.disagreements, 0, "{r:?}");
        // The generator must reach every outcome, or it tests less than it claims.
        assert!(
            r.parsed > 1_000 && r.incomplete > 100 && r.refused > 100,
            "{r:?}"
        );
    }
}
