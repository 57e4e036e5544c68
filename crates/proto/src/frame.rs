//! RESP frames: the values of the Redis protocol, RESP2 and RESP3.
//!
//! - [`Frame::parse_request`] reads what clients send: an array of bulk strings, or an inline
//!   command line (what `redis-cli` and `telnet` send), with Redis's error messages.
//! - [`Frame::parse`] reads any RESP2 or RESP3 frame, as a client reads replies.
//! - [`Frame::write`] encodes a frame in the protocol a connection speaks, downgrading the RESP3
//!   types to their RESP2 forms the way Redis does.
//!
//! The parsers take a byte slice and say how much of it one frame used, or that more bytes are
//! needed ([`FrameError::Incomplete`]), so a connection can keep one growing buffer. What a frame
//! claims is never trusted before its bytes have arrived: each parser first checks the whole
//! frame against [`Limits`] without allocating, and only then builds it. Nesting is followed with
//! an explicit stack, so a hostile frame cannot overflow the thread's stack.

use std::ops::Range;

use bytes::Bytes;

/// Which protocol a connection speaks (`HELLO 3` switches to [`Protocol::Resp3`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// RESP2, what every connection starts with.
    #[default]
    Resp2,
    /// RESP3, with maps, sets, doubles, booleans, verbatim strings, big numbers and pushes.
    Resp3,
}

/// Bounds on what one frame may make the server allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest bulk string accepted, bytes (Redis's `proto-max-bulk-len`, 512 MiB by default).
    pub max_bulk: usize,
    /// Most elements of one aggregate (array, set, push; pairs of a map); 1 048 576 by default.
    /// That was Redis's own bound on a request before 7.0; Redis 7 accepts up to 2^31 − 1, which
    /// lets one header line claim far more memory than a cache should grant a client.
    pub max_elements: usize,
    /// Deepest nesting of aggregates: a top-level array is depth 1. Requests are always depth 1.
    pub max_depth: usize,
    /// Longest line, bytes: an inline command, a simple string, or a length header (Redis's
    /// `PROTO_INLINE_MAX_SIZE`, 64 KiB).
    pub max_inline: usize,
    /// Whether the client has yet to give a password the server wants. A request array may then
    /// claim at most [`UNAUTHENTICATED_MAX_ARGS`] arguments of at most
    /// [`UNAUTHENTICATED_MAX_BULK`] bytes each ("unauthenticated multibulk length",
    /// "unauthenticated bulk length"), as in Redis since 6.2.6 (CVE-2021-32675): otherwise a
    /// client that never authenticates could make the server hold `max_bulk` bytes per
    /// connection while they arrive, since authentication is checked only once a request is
    /// whole. The claim is refused as soon as its header line is in, before any of its data.
    /// Requests only: replies come from servers the caller chose, and an inline request is
    /// bounded by `max_inline` already.
    pub unauthenticated: bool,
}

/// Most arguments of a request before the client has authenticated (Redis's bound).
pub const UNAUTHENTICATED_MAX_ARGS: usize = 10;

/// Longest argument of a request before the client has authenticated, bytes (Redis's bound:
/// room for any password).
pub const UNAUTHENTICATED_MAX_BULK: usize = 16 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk: 512 * 1024 * 1024,
            max_elements: 1_048_576,
            max_depth: 32,
            max_inline: 64 * 1024,
            unauthenticated: false,
        }
    }
}

/// A RESP value: the RESP2 types plus RESP3's.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A simple string, `+OK`.
    Simple(String),
    /// An error, `-ERR ...`: the text without the leading `-`. RESP3's blob errors (`!`) parse to
    /// this too.
    Error(String),
    /// An integer, `:1`.
    Integer(i64),
    /// A bulk string, `$3\r\nfoo`.
    Bulk(Bytes),
    /// The null bulk string: `$-1` in RESP2, `_` in RESP3.
    Null,
    /// The null array: `*-1` in RESP2, `_` in RESP3.
    NullArray,
    /// An array, `*`.
    Array(Vec<Frame>),
    /// A RESP3 map, `%`; RESP2 gets a flat array `k1 v1 k2 v2 ...`.
    Map(Vec<(Frame, Frame)>),
    /// A RESP3 set, `~`; RESP2 gets an array.
    Set(Vec<Frame>),
    /// A RESP3 double, `,`; RESP2 gets a bulk string of the number, formatted as Redis does.
    Double(f64),
    /// A RESP3 boolean, `#t` / `#f`; RESP2 gets the integer 1 or 0.
    Boolean(bool),
    /// A RESP3 verbatim string, written `=<len>\r\ntxt:<data>`; RESP2 gets a bulk string. Parsing
    /// keeps the data and drops the format (`txt`, `mkd`).
    Verbatim(Bytes),
    /// A RESP3 big number, `(`; RESP2 gets a bulk string of its digits.
    BigNumber(String),
    /// A RESP3 push, `>` (out-of-band data such as pub/sub messages); RESP2 gets an array.
    Push(Vec<Frame>),
}

/// Why bytes are not (yet) a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// More bytes are needed: read more and try again.
    #[error("incomplete frame")]
    Incomplete,
    /// The bytes can never become a valid frame. The message is what Redis says after
    /// `-ERR Protocol error: ` (e.g. "invalid bulk length", "invalid multibulk length",
    /// "too big inline request", "unbalanced quotes in request", "expected '$', got 'x'").
    #[error("Protocol error: {0}")]
    Protocol(String),
}

fn protocol(msg: impl Into<String>) -> FrameError {
    FrameError::Protocol(msg.into())
}

impl Frame {
    /// `+OK`.
    #[inline]
    pub fn ok() -> Frame {
        Frame::Simple("OK".to_owned())
    }

    /// An error reply with this text (without the leading `-`).
    #[inline]
    pub fn error(msg: impl Into<String>) -> Frame {
        Frame::Error(msg.into())
    }

    /// A bulk string.
    #[inline]
    pub fn bulk(b: impl Into<Bytes>) -> Frame {
        Frame::Bulk(b.into())
    }

    /// Parses one request from the start of `buf`, returning it and how many bytes it used.
    ///
    /// A request is either a RESP array of bulk strings, `*<n>\r\n` then n `$<len>\r\n<bytes>\r\n`,
    /// or an inline command: a line ending in `\n` or `\r\n`, split into arguments by Redis's
    /// rules (`"..."` with `\n \r \t \b \a \\ \" \xHH` escapes, `'...'` with `\'`; a closing quote
    /// must be followed by a space or the end of the line; the line ends at a NUL byte). Either
    /// way the result is a [`Frame::Array`] of [`Frame::Bulk`]s. An empty or blank line, `*0` and
    /// any negative count give an empty array, which callers skip, as Redis does.
    ///
    /// Errors, with Redis's messages: a count over `limits.max_elements` or malformed ("invalid
    /// multibulk length"); anything but a bulk string inside the array ("expected '$', got 'X'");
    /// a bulk length over `limits.max_bulk`, negative or malformed ("invalid bulk length"); a
    /// line longer than `limits.max_inline` ("too big inline request", "too big mbulk count
    /// string", "too big bulk count string"); unbalanced quotes ("unbalanced quotes in
    /// request"); under `limits.unauthenticated`, more than [`UNAUTHENTICATED_MAX_ARGS`]
    /// arguments ("unauthenticated multibulk length") or one longer than
    /// [`UNAUTHENTICATED_MAX_BULK`] ("unauthenticated bulk length"). Stricter than Redis: a bulk
    /// string must be followed by `\r\n` ("invalid bulk terminator"), and a header line must
    /// end in `\r\n`, not `\r` alone.
    ///
    /// Every strict prefix of a valid request is [`FrameError::Incomplete`]. Nothing is
    /// allocated until the whole request is in `buf`, and one call takes time linear in `buf`;
    /// a connection whose requests arrive in pieces should keep a [`Cursor`] instead, so that it
    /// does not rescan them. The line limit applies however the bytes arrive: unlike Redis,
    /// which checks it only while the line is incomplete, a longer line is refused even when it
    /// arrives whole.
    pub fn parse_request(buf: &[u8], limits: &Limits) -> Result<(Frame, usize), FrameError> {
        Cursor::default().parse_request(buf, limits)
    }

    /// Parses any one RESP2 or RESP3 frame from the start of `buf`, as a client reads replies,
    /// returning it and how many bytes it used.
    ///
    /// `$-1` parses to [`Frame::Null`], `*-1` to [`Frame::NullArray`], `_` to [`Frame::Null`];
    /// blob errors (`!`) to [`Frame::Error`]. Attributes (`|`) are read and dropped: the result is
    /// the frame they annotate. Simple strings and errors that are not UTF-8 are converted
    /// lossily. RESP3's streamed strings and aggregates (`$?`, `*?`) are not supported.
    ///
    /// The same [`Limits`] apply as for requests, plus `max_depth` on nesting (deeper is a
    /// protocol error, found without recursion). Every strict prefix of a valid frame is
    /// [`FrameError::Incomplete`], nothing is allocated until the whole frame is in `buf`, and
    /// one call takes time linear in `buf` (see [`Cursor`] for frames that arrive in pieces).
    pub fn parse(buf: &[u8], limits: &Limits) -> Result<(Frame, usize), FrameError> {
        Cursor::default().parse(buf, limits)
    }

    /// Appends the frame's encoding in `proto` to `out`.
    ///
    /// In RESP2 the RESP3 types become what Redis sends a RESP2 client: a map a flat array, a set
    /// or push an array, a double, verbatim string or big number a bulk string, a boolean the
    /// integer 1 or 0, [`Frame::Null`] `$-1` and [`Frame::NullArray`] `*-1`. Errors are written
    /// as `-<text>` in both protocols. `\r` and `\n` in simple strings, errors and big numbers
    /// are written as spaces, since they would end the line early.
    pub fn write(&self, proto: Protocol, out: &mut Vec<u8>) {
        let resp3 = proto == Protocol::Resp3;
        match self {
            Frame::Simple(s) => write_line(out, b'+', s.as_bytes()),
            Frame::Error(s) => write_line(out, b'-', s.as_bytes()),
            Frame::Integer(n) => {
                out.push(b':');
                push_i64(out, *n);
                out.extend_from_slice(b"\r\n");
            }
            Frame::Bulk(b) => write_blob(out, b'$', b),
            Frame::Null if resp3 => out.extend_from_slice(b"_\r\n"),
            Frame::Null => out.extend_from_slice(b"$-1\r\n"),
            Frame::NullArray if resp3 => out.extend_from_slice(b"_\r\n"),
            Frame::NullArray => out.extend_from_slice(b"*-1\r\n"),
            Frame::Array(items) => write_items(out, b'*', items, proto),
            Frame::Map(pairs) => {
                if resp3 {
                    write_header(out, b'%', pairs.len());
                } else {
                    write_header(out, b'*', pairs.len().saturating_mul(2));
                }
                for (k, v) in pairs {
                    k.write(proto, out);
                    v.write(proto, out);
                }
            }
            Frame::Set(items) => write_items(out, if resp3 { b'~' } else { b'*' }, items, proto),
            Frame::Push(items) => write_items(out, if resp3 { b'>' } else { b'*' }, items, proto),
            Frame::Double(d) => {
                let text = format_double(*d);
                if resp3 {
                    write_line(out, b',', text.as_bytes());
                } else {
                    write_blob(out, b'$', text.as_bytes());
                }
            }
            Frame::Boolean(b) if resp3 => {
                out.extend_from_slice(if *b { b"#t\r\n" } else { b"#f\r\n" });
            }
            Frame::Boolean(b) => out.extend_from_slice(if *b { b":1\r\n" } else { b":0\r\n" }),
            Frame::Verbatim(data) if resp3 => {
                write_header(out, b'=', data.len() + 4);
                out.extend_from_slice(b"txt:");
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
            }
            Frame::Verbatim(data) => write_blob(out, b'$', data),
            Frame::BigNumber(s) if resp3 => write_line(out, b'(', s.as_bytes()),
            Frame::BigNumber(s) => write_blob(out, b'$', s.as_bytes()),
        }
    }
}

/// How far a parse got through a frame that was not all there yet, so that the next parse of
/// the same buffer, grown, resumes there.
///
/// [`Frame::parse_request`] and [`Frame::parse`] start from the first byte every time, so a frame
/// of n elements that arrives in k pieces costs O(n·k) to read: a client sending a request of a
/// million arguments one packet at a time could make the server rescan it thousands of times. A
/// connection that keeps a `Cursor` beside its read buffer checks each element once, then builds
/// the frame in one more pass.
///
/// Between calls the buffer may only grow at its end. Once a call returns a frame or a protocol
/// error the cursor starts afresh, ready for the next frame once the caller has removed the used
/// bytes. Using a cursor for requests after frames, or the other way round, also starts afresh.
/// If the buffer changes in any other way, results are unspecified (but there is no panic).
#[derive(Debug, Clone, Default)]
pub struct Cursor {
    resume: Resume,
    /// The ranges of a finished request, kept for the next ([`Cursor::recycle`]).
    spare: Vec<Range<usize>>,
}

#[derive(Debug, Clone, Default)]
enum Resume {
    #[default]
    Start,
    /// An inline request with no `\n` in its first `scanned` bytes.
    Inline { scanned: usize },
    /// A request array whose next bulk string starts at `pos`, with `left` to go, and where the
    /// arguments read so far are.
    Request {
        pos: usize,
        left: usize,
        args: Vec<Range<usize>>,
    },
    /// A frame whose next token starts at `pos`, inside the aggregates of `open`.
    Frame { pos: usize, open: Vec<Open> },
}

/// A request as a server reads it: where its arguments are in the buffer (a request array:
/// nothing is copied, the caller slices what it keeps), or an inline request's arguments
/// (unquoted, so built).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The arguments of a request array, as ranges of the buffer.
    Ranges(Vec<Range<usize>>),
    /// The arguments of an inline request.
    Inline(Vec<Bytes>),
}

impl Cursor {
    /// [`Frame::parse_request`], resuming where the previous call stopped.
    pub fn parse_request(
        &mut self,
        buf: &[u8],
        limits: &Limits,
    ) -> Result<(Frame, usize), FrameError> {
        let (request, used) = self.request(buf, limits)?;
        let args = match request {
            Request::Ranges(r) => r
                .into_iter()
                .map(|r| Frame::Bulk(Bytes::copy_from_slice(&buf[r])))
                .collect(),
            Request::Inline(a) => a.into_iter().map(Frame::Bulk).collect(),
        };
        Ok((Frame::Array(args), used))
    }

    /// Reads one request from the start of `buf`, resuming where the previous call stopped, as
    /// [`Frame::parse_request`] does, but without copying a request array's arguments: it says
    /// where they are. Returns the request and how many bytes it used.
    pub fn request(&mut self, buf: &[u8], limits: &Limits) -> Result<(Request, usize), FrameError> {
        let resume = std::mem::take(&mut self.resume);
        match buf.first() {
            None => Err(FrameError::Incomplete),
            Some(b'*') => {
                let (mut pos, mut left, mut args) = match resume {
                    Resume::Request { pos, left, args } if pos <= buf.len() => (pos, left, args),
                    _ => {
                        let (pos, left) = request_header(buf, limits)?;
                        // Grown as arguments arrive, so a claimed count costs nothing up front;
                        // the previous request's, if the caller gave it back.
                        let mut args = std::mem::take(&mut self.spare);
                        args.clear();
                        args.reserve(left.min(16));
                        (pos, left, args)
                    }
                };
                while left > 0 {
                    match request_arg(buf, pos, limits) {
                        Ok((data, next)) => {
                            args.push(data);
                            pos = next;
                            left -= 1;
                        }
                        Err(FrameError::Incomplete) => {
                            self.resume = Resume::Request { pos, left, args };
                            return Err(FrameError::Incomplete);
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok((Request::Ranges(args), pos))
            }
            Some(_) => {
                let scanned = match resume {
                    Resume::Inline { scanned } => scanned,
                    _ => 0,
                };
                let parsed = inline(buf, limits, scanned);
                if parsed == Err(FrameError::Incomplete) {
                    self.resume = Resume::Inline { scanned: buf.len() };
                }
                let (frame, used) = parsed?;
                let args = match frame {
                    Frame::Array(items) => items
                        .into_iter()
                        .filter_map(|f| match f {
                            Frame::Bulk(b) => Some(b),
                            _ => None,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                Ok((Request::Inline(args), used))
            }
        }
    }

    /// Gives back the ranges of a request the caller is done with, so the next request fills
    /// them instead of allocating.
    // Called once a request from pliant-kv: without it, a call across the crates.
    #[inline]
    pub fn recycle(&mut self, ranges: Vec<Range<usize>>) {
        self.spare = ranges;
    }

    /// [`Frame::parse`], resuming where the previous call stopped.
    pub fn parse(&mut self, buf: &[u8], limits: &Limits) -> Result<(Frame, usize), FrameError> {
        let (mut pos, mut open) = match std::mem::take(&mut self.resume) {
            Resume::Frame { pos, open } if pos <= buf.len() => (pos, open),
            _ => (0, Vec::new()),
        };
        match walk(buf, limits, false, &mut pos, &mut open) {
            Ok(_) => {}
            Err(FrameError::Incomplete) => {
                self.resume = Resume::Frame { pos, open };
                return Err(FrameError::Incomplete);
            }
            Err(e) => return Err(e),
        }
        let mut end = 0;
        let frame = walk(buf, limits, true, &mut end, &mut Vec::new())?;
        Ok((frame, end))
    }
}

// ---- Lines and numbers ----

/// Why a line has no end yet, or never will.
enum LineFault {
    Incomplete,
    TooLong,
    /// A `\r` not followed by `\n`.
    BadEnd,
}

impl LineFault {
    fn into_error(self, too_long: &str, bad: &str) -> FrameError {
        match self {
            LineFault::Incomplete => FrameError::Incomplete,
            LineFault::TooLong => protocol(too_long),
            LineFault::BadEnd => protocol(bad),
        }
    }
}

/// The index of the `\r` of the `\r\n` ending the line that starts at `start`, whose content may
/// be at most `max` bytes. Only `max + 1` bytes are looked at, so a caller's scans stay linear.
fn line_end(buf: &[u8], start: usize, max: usize) -> Result<usize, LineFault> {
    let window_end = buf.len().min(start.saturating_add(max).saturating_add(1));
    let window = buf.get(start..window_end).unwrap_or_default();
    match window.iter().position(|&b| b == b'\r') {
        Some(i) => match buf.get(start + i + 1) {
            None => Err(LineFault::Incomplete),
            Some(b'\n') => Ok(start + i),
            Some(_) => Err(LineFault::BadEnd),
        },
        None if buf.len() - start > max => Err(LineFault::TooLong),
        None => Err(LineFault::Incomplete),
    }
}

/// Parses a decimal integer as Redis's `string2ll` does: an optional `-`, then digits without
/// leading zeros (`0` alone, never `-0`), no `+`, no spaces, no overflow.
fn parse_i64(s: &[u8]) -> Option<i64> {
    let (negative, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    match digits {
        [b'0'] if !negative => return Some(0),
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    if negative {
        0i64.checked_sub_unsigned(v)
    } else {
        i64::try_from(v).ok()
    }
}

pub(crate) fn push_u64(out: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        // The remainder is below 10, so the narrowing is exact.
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

fn push_i64(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    push_u64(out, n.unsigned_abs());
}

/// Formats a double as Redis 7.2+ does (`d2string`): `nan`, `inf`, `-inf`, `0` and `-0`;
/// integral values below 2^62 as integers; anything else as the shortest digits that read back
/// to the same value, laid out as Redis's `fpconv_dtoa` lays them out. Older Redis used
/// `%.17g`, which reads back the same but prints 0.1 as 0.10000000000000001.
fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "nan".to_owned();
    }
    if d.is_infinite() {
        return if d < 0.0 { "-inf" } else { "inf" }.to_owned();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    // Redis's `double2ll` bound: below it, an integral double converts to i64 exactly.
    const INTEGRAL_LIMIT: f64 = (i64::MAX / 2) as f64;
    if d.fract() == 0.0 && (-INTEGRAL_LIMIT..=INTEGRAL_LIMIT).contains(&d) {
        // Integral and within ±2^62, so the conversion is exact.
        return (d as i64).to_string();
    }
    // Rust's `{:e}` gives the shortest round-tripping digits as `d.ddde<exp>`.
    let sci = format!("{:e}", d.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let ndigits = digits.len() as i64;
    // The value is digits × 10^k, as fpconv's `emit_digits` sees it.
    let k = exp - (ndigits - 1);
    let mut s = String::new();
    if d < 0.0 {
        s.push('-');
    }
    if k >= 0 && exp < ndigits + 7 {
        s.push_str(&digits);
        s.extend(std::iter::repeat_n('0', k as usize));
    } else if k < 0 && (k > -7 || exp.abs() < 4) {
        let point = ndigits + k;
        if point <= 0 {
            s.push_str("0.");
            s.extend(std::iter::repeat_n('0', (-point) as usize));
            s.push_str(&digits);
        } else {
            let (int, frac) = digits.split_at(point as usize);
            s.push_str(int);
            s.push('.');
            s.push_str(frac);
        }
    } else {
        let (first, rest) = digits.split_at(1);
        s.push_str(first);
        if !rest.is_empty() {
            s.push('.');
            s.push_str(rest);
        }
        s.push('e');
        s.push(if exp < 0 { '-' } else { '+' });
        s.push_str(&exp.abs().to_string());
    }
    s
}

// ---- Writing ----

pub(crate) fn write_header(out: &mut Vec<u8>, ty: u8, n: usize) {
    out.push(ty);
    push_u64(out, n as u64);
    out.extend_from_slice(b"\r\n");
}

fn write_line(out: &mut Vec<u8>, ty: u8, text: &[u8]) {
    out.push(ty);
    out.extend(
        text.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

fn write_blob(out: &mut Vec<u8>, ty: u8, data: &[u8]) {
    write_header(out, ty, data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

fn write_items(out: &mut Vec<u8>, ty: u8, items: &[Frame], proto: Protocol) {
    write_header(out, ty, items.len());
    for item in items {
        item.write(proto, out);
    }
}

// ---- Requests ----

/// The most arguments a request may have for [`peek_keys`] to look past it.
const PEEK_MAX_ARGS: usize = 64;

/// Where the first argument (after the command's name) is, in each of the first `max` whole
/// multibulk requests in `buf`, in order: the keys a pipeline is about to read or write, found
/// without parsing the requests for real (anything unusual, such as an inline command or a
/// length that is not a plain number, ends the look ahead; the real parse will deal with it).
/// Returns how many whole requests it walked.
pub fn peek_keys(buf: &[u8], max: usize, mut key: impl FnMut(Range<usize>)) -> usize {
    // A number and its `\r\n` starting at `at`.
    fn number(buf: &[u8], at: usize) -> Option<(usize, usize)> {
        let digits = buf
            .get(at..)?
            .iter()
            .take(10)
            .take_while(|b| b.is_ascii_digit())
            .count();
        let end = at + digits;
        if digits == 0 || buf.get(end..end + 2)? != b"\r\n" {
            return None;
        }
        let n = buf[at..end].iter().try_fold(0usize, |n, &b| {
            n.checked_mul(10)?.checked_add(usize::from(b - b'0'))
        })?;
        Some((n, end + 2))
    }
    let mut at = 0;
    let mut found = 0;
    while found < max && buf.get(at) == Some(&b'*') {
        // A request of many arguments ends the look ahead: walking it on every read of a
        // request still arriving would cost its length each time.
        let Some((n @ ..=PEEK_MAX_ARGS, mut p)) = number(buf, at + 1) else {
            break;
        };
        let mut first = None;
        for i in 0..n {
            if buf.get(p) != Some(&b'$') {
                return found;
            }
            let Some((len, start)) = number(buf, p + 1) else {
                return found;
            };
            let Some(end) = start.checked_add(len) else {
                return found;
            };
            if buf.get(end..).is_none_or(|rest| !rest.starts_with(b"\r\n")) {
                return found;
            }
            if i == 1 {
                first = Some(start..end);
            }
            p = end + 2;
        }
        if let Some(r) = first {
            key(r);
        }
        found += 1;
        at = p;
    }
    found
}

/// The number on a length or count line (`$3`, `*2`) starting at `start`, and where the line's
/// `\r\n` is; `too_long` and `bad` are Redis's words for a line too long and a bad number.
fn length_line(
    buf: &[u8],
    start: usize,
    limits: &Limits,
    too_long: &str,
    bad: &str,
) -> Result<(i64, usize), FrameError> {
    // The form nearly every length takes (a few digits, no leading zero, then `\r\n`) in one
    // pass; anything else goes the general way, which gives the same answer and the errors.
    let digits = buf
        .get(start..)
        .unwrap_or_default()
        .iter()
        .take(18)
        .take_while(|b| b.is_ascii_digit())
        .count();
    let cr = start + digits;
    if digits > 0
        && digits <= limits.max_inline
        && (buf[start] != b'0' || digits == 1)
        && buf.get(cr..cr + 2) == Some(b"\r\n")
    {
        let n = buf[start..cr]
            .iter()
            .fold(0i64, |n, &b| n * 10 + i64::from(b - b'0'));
        return Ok((n, cr));
    }
    length_line_general(buf, start, limits, too_long, bad)
}

/// [`length_line`] without its fast path.
fn length_line_general(
    buf: &[u8],
    start: usize,
    limits: &Limits,
    too_long: &str,
    bad: &str,
) -> Result<(i64, usize), FrameError> {
    let cr = line_end(buf, start, limits.max_inline).map_err(|f| f.into_error(too_long, bad))?;
    let n = parse_i64(&buf[start..cr]).ok_or_else(|| protocol(bad))?;
    Ok((n, cr))
}

#[cfg(test)]
mod length_line_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// The fast path answers exactly as the general reader: lines of digits, signs, stray
        /// bytes and cut-off ends, under small and default limits.
        #[test]
        fn the_fast_path_agrees_with_the_general_reader(
            line in proptest::collection::vec(
                prop_oneof![
                    8 => b'0'..=b'9',
                    1 => Just(b'-'),
                    1 => Just(b'\r'),
                    1 => Just(b'\n'),
                    1 => any::<u8>(),
                ],
                0..24,
            ),
            start in 0usize..3,
            max_inline in prop_oneof![Just(2usize), Just(5), Just(Limits::default().max_inline)],
        ) {
            let limits = Limits { max_inline, ..Limits::default() };
            let mut buf = vec![b'$'; start];
            buf.extend_from_slice(&line);
            prop_assert_eq!(
                length_line(&buf, start, &limits, "long", "bad"),
                length_line_general(&buf, start, &limits, "long", "bad")
            );
        }
    }
}

#[cfg(test)]
mod peek_keys_tests {
    use super::*;
    use proptest::prelude::*;

    fn encode(args: &[Vec<u8>]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    proptest! {
        /// On a pipeline cut anywhere, the look ahead finds the whole requests the parser
        /// finds, and in each the argument the parser gives as the first after the name.
        #[test]
        fn it_finds_what_the_parser_finds(
            requests in proptest::collection::vec(
                proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 1..4),
                0..8,
            ),
            cut in any::<proptest::sample::Index>(),
        ) {
            let whole: Vec<u8> = requests.iter().flat_map(|r| encode(r)).collect();
            let buf = &whole[..cut.index(whole.len() + 1)];
            let mut expected = Vec::new();
            let mut at = 0;
            while let Ok((Frame::Array(items), used)) = Frame::parse_request(&buf[at..], &Limits::default()) {
                if let Some(Frame::Bulk(k)) = items.get(1) {
                    expected.push(k.to_vec());
                }
                at += used;
            }
            let mut found = Vec::new();
            let n = peek_keys(buf, 64, |r| found.push(buf[r].to_vec()));
            prop_assert_eq!(found, expected);
            prop_assert!(n <= requests.len());
        }
    }

    #[test]
    fn it_stops_at_what_it_does_not_read_and_at_max() {
        let mut buf = encode(&[b"GET".to_vec(), b"a".to_vec()]);
        buf.extend(encode(&[b"PING".to_vec()]));
        buf.extend(encode(&[b"SET".to_vec(), b"b".to_vec(), b"1".to_vec()]));
        let mut keys = Vec::new();
        assert_eq!(peek_keys(&buf, 64, |r| keys.push(buf[r].to_vec())), 3);
        assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(peek_keys(&buf, 1, |_| {}), 1);
        // An inline command, or a length that is not plain digits, ends the look ahead.
        let mut inline = b"GET x\r\n".to_vec();
        inline.extend(encode(&[b"GET".to_vec(), b"a".to_vec()]));
        assert_eq!(peek_keys(&inline, 64, |_| {}), 0);
        assert_eq!(peek_keys(b"*2\r\n$-1\r\n", 64, |_| {}), 0);
        // A request of more than 64 arguments is not looked past, nor into.
        let many: Vec<Vec<u8>> = (0..65).map(|i| format!("k{i}").into_bytes()).collect();
        let mut buf = encode(&many);
        buf.extend(encode(&[b"GET".to_vec(), b"a".to_vec()]));
        assert_eq!(peek_keys(&buf, 64, |_| {}), 0);
        // Lengths that overflow are not whole requests.
        assert_eq!(peek_keys(b"*9999999999\r\n", 64, |_| {}), 0);
        // A bulk length claiming 4 GB is not a whole request.
        assert_eq!(
            peek_keys(b"*2\r\n$3\r\nGET\r\n$4294967295\r\nab", 64, |_| {}),
            0
        );
    }
}

// Elements the parsers have examined on this thread: the tests measure the parsers' work by it
// rather than by the clock, which on a shared machine says little.
#[cfg(test)]
thread_local! {
    static EXAMINED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts one element examined (a request's argument, a frame's token); nothing outside tests.
#[inline]
fn examined() {
    #[cfg(test)]
    EXAMINED.with(|n| n.set(n.get() + 1));
}

#[cfg(test)]
mod work_tests {
    use super::*;

    /// Elements examined while `f` runs.
    fn work<T>(f: impl FnOnce() -> T) -> (T, u64) {
        let before = EXAMINED.with(|n| n.get());
        let out = f();
        (out, EXAMINED.with(|n| n.get()) - before)
    }

    /// A claim of 512 MiB or a million elements is looked at, not acted on: each call examines
    /// the header and the first element claimed whatever the claim (and whatever part of the
    /// claimed data has come), and what the cursor keeps for the next call is not sized by it.
    #[test]
    fn claimed_lengths_cost_nothing_until_their_bytes_arrive() {
        let limits = Limits::default();
        let header = format!("*1\r\n${}\r\n", limits.max_bulk);
        let mut with_data = header.clone().into_bytes();
        with_data.extend(std::iter::repeat_n(b'x', 1 << 20));
        let count = format!("*{}\r\n", limits.max_elements);
        for buf in [header.as_bytes(), &with_data, count.as_bytes()] {
            let mut cursor = Cursor::default();
            let (got, n) = work(|| cursor.request(buf, &limits).map(|_| ()));
            assert_eq!(got, Err(FrameError::Incomplete));
            assert!(n <= 2, "{n} elements examined");
            let Resume::Request { args, .. } = &cursor.resume else {
                panic!("the cursor keeps its place: {:?}", cursor.resume);
            };
            assert!(args.capacity() <= 16, "{} reserved", args.capacity());
        }
        let bulk = format!("${}\r\n", limits.max_bulk);
        for buf in [bulk.as_bytes(), count.as_bytes()] {
            let mut cursor = Cursor::default();
            let (got, n) = work(|| cursor.parse(buf, &limits).map(|_| ()));
            assert_eq!(got, Err(FrameError::Incomplete));
            assert!(n <= 2, "{n} elements examined");
            let Resume::Frame { open, .. } = &cursor.resume else {
                panic!("the cursor keeps its place: {:?}", cursor.resume);
            };
            assert!(open.iter().all(|o| o.items.capacity() == 0), "{open:?}");
        }
    }

    /// 200 000 arguments in 1 400-byte pieces: rescanning from the start at each piece would
    /// examine some 10^8 arguments; the cursor examines each once, plus the one each piece cuts.
    #[test]
    fn a_cursor_reads_a_request_in_pieces_in_linear_time() {
        let n = 200_000;
        let mut buf = format!("*{n}\r\n").into_bytes();
        for i in 0..n {
            let arg = (i % 1000).to_string();
            buf.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
        }
        let whole = buf.len();
        buf.extend_from_slice(b"PING\r\n");
        let limits = Limits::default();
        let mut cursor = Cursor::default();
        let mut cut = 0;
        let mut pieces = 0;
        let ((frame, used), examined) = work(|| {
            loop {
                cut = (cut + 1400).min(whole);
                pieces += 1;
                match cursor.parse_request(&buf[..cut], &limits) {
                    Err(FrameError::Incomplete) => assert!(cut < whole, "complete yet incomplete"),
                    done => break done.expect("request"),
                }
            }
        });
        assert!(pieces > 1000, "{pieces} pieces");
        assert!(
            examined <= n as u64 + pieces + 1,
            "{examined} elements examined for {n} arguments in {pieces} pieces"
        );
        assert_eq!((cut, used), (whole, whole));
        assert!(
            matches!(&frame, Frame::Array(args) if args.len() == n && args[n - 1] == Frame::bulk("999"))
        );
        // The same cursor, fresh again, reads the next request once the caller drops the used
        // bytes.
        assert_eq!(
            cursor.parse_request(&buf[used..], &limits),
            Ok((Frame::Array(vec![Frame::bulk("PING")]), 6))
        );
    }
}

/// A length or count that must be within `0..=limit`.
fn within(n: i64, limit: usize, bad: &str) -> Result<usize, FrameError> {
    usize::try_from(n)
        .ok()
        .filter(|&n| n <= limit)
        .ok_or_else(|| protocol(bad))
}

/// Reads a request array's header: where its first bulk string starts, and how many there are.
fn request_header(buf: &[u8], limits: &Limits) -> Result<(usize, usize), FrameError> {
    const BAD_COUNT: &str = "invalid multibulk length";
    examined();
    let (count, cr) = length_line(buf, 1, limits, "too big mbulk count string", BAD_COUNT)?;
    if count <= 0 {
        // As in Redis, every non-positive count is an empty request.
        return Ok((cr + 2, 0));
    }
    let count = within(count, limits.max_elements, BAD_COUNT)?;
    if limits.unauthenticated && count > UNAUTHENTICATED_MAX_ARGS {
        return Err(protocol("unauthenticated multibulk length"));
    }
    Ok((cr + 2, count))
}

/// Reads the bulk string of a request at `pos`: its data, and where the next one starts.
fn request_arg(
    buf: &[u8],
    pos: usize,
    limits: &Limits,
) -> Result<(Range<usize>, usize), FrameError> {
    const BAD_LEN: &str = "invalid bulk length";
    examined();
    match buf.get(pos) {
        None => return Err(FrameError::Incomplete),
        Some(b'$') => {}
        Some(b) => {
            return Err(protocol(format!(
                "expected '$', got '{}'",
                b.escape_ascii()
            )));
        }
    }
    let (len, cr) = length_line(buf, pos + 1, limits, "too big bulk count string", BAD_LEN)?;
    let len = within(len, limits.max_bulk, BAD_LEN)?;
    if limits.unauthenticated && len > UNAUTHENTICATED_MAX_BULK {
        return Err(protocol("unauthenticated bulk length"));
    }
    let data = cr + 2;
    let end = blob_end(buf, data, len)?;
    Ok((data..end, end + 2))
}

/// The end of a blob of `len` bytes at `data`, once it and its `\r\n` are in `buf`.
fn blob_end(buf: &[u8], data: usize, len: usize) -> Result<usize, FrameError> {
    let available = buf.len() - data;
    if available < len || available - len < 2 {
        return Err(FrameError::Incomplete);
    }
    let end = data + len;
    if &buf[end..end + 2] != b"\r\n" {
        return Err(protocol("invalid bulk terminator"));
    }
    Ok(end)
}

/// Reads an inline request; the first `scanned` bytes are known to hold no `\n`.
fn inline(buf: &[u8], limits: &Limits, scanned: usize) -> Result<(Frame, usize), FrameError> {
    const TOO_BIG: &str = "too big inline request";
    // A line of max_inline bytes ends at index max_inline + 1 at the latest (after its `\r`).
    let window = &buf[..buf.len().min(limits.max_inline.saturating_add(2))];
    let from = scanned.min(window.len());
    let Some(nl) = window[from..]
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| from + i)
    else {
        return Err(if buf.len() >= limits.max_inline.saturating_add(2) {
            protocol(TOO_BIG)
        } else {
            FrameError::Incomplete
        });
    };
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() > limits.max_inline {
        return Err(protocol(TOO_BIG));
    }
    let args = split_args(line).ok_or_else(|| protocol("unbalanced quotes in request"))?;
    Ok((Frame::Array(args), nl + 1))
}

/// C's `isspace` in the C locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn hex_value(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

/// Splits an inline command line into arguments as Redis's `sdssplitargs` does, quirks
/// included; `None` for unbalanced quotes.
fn split_args(line: &[u8]) -> Option<Vec<Frame>> {
    // Redis splits a C string, so a NUL ends the line; `at` reads past the end as that NUL.
    let line = &line[..line.iter().position(|&b| b == 0).unwrap_or(line.len())];
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let mut args = Vec::new();
    let mut p = 0;
    loop {
        while at(p) != 0 && is_c_space(at(p)) {
            p += 1;
        }
        if at(p) == 0 {
            return Some(args);
        }
        let mut current = Vec::new();
        let (mut in_double, mut in_single, mut done) = (false, false, false);
        while !done {
            let c = at(p);
            if in_double {
                if let (b'\\', b'x', Some(hi), Some(lo)) =
                    (c, at(p + 1), hex_value(at(p + 2)), hex_value(at(p + 3)))
                {
                    current.push(hi * 16 + lo);
                    p += 3;
                } else if c == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    current.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    if at(p + 1) != 0 && !is_c_space(at(p + 1)) {
                        return None;
                    }
                    done = true;
                } else if c == 0 {
                    return None;
                } else {
                    current.push(c);
                }
            } else if in_single {
                if c == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    current.push(b'\'');
                } else if c == b'\'' {
                    if at(p + 1) != 0 && !is_c_space(at(p + 1)) {
                        return None;
                    }
                    done = true;
                } else if c == 0 {
                    return None;
                } else {
                    current.push(c);
                }
            } else {
                // Only these end an unquoted argument: `\v` and `\f` are part of it, and a quote
                // opens a quoted part in the middle of it.
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => done = true,
                    b'"' => in_double = true,
                    b'\'' => in_single = true,
                    _ => current.push(c),
                }
            }
            if at(p) != 0 {
                p += 1;
            }
        }
        args.push(Frame::Bulk(Bytes::from(current)));
    }
}

// ---- Frames ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Array,
    Map,
    Set,
    Push,
    Attribute,
}

/// One element of the grammar. Strings are ranges of the buffer, so checking a frame allocates
/// nothing.
enum Token {
    Simple(Range<usize>),
    Error(Range<usize>),
    Integer(i64),
    Bulk(Range<usize>),
    Null,
    NullArray,
    Double(f64),
    Boolean(bool),
    Verbatim(Range<usize>),
    BigNumber(Range<usize>),
    /// An aggregate header, with the number of frames that follow (twice the pairs of a map).
    Open(Kind, usize),
}

impl Token {
    fn into_frame(self, buf: &[u8]) -> Frame {
        let text = |r: Range<usize>| String::from_utf8_lossy(&buf[r]).into_owned();
        let bytes = |r: Range<usize>| Bytes::copy_from_slice(&buf[r]);
        match self {
            Token::Simple(r) => Frame::Simple(text(r)),
            Token::Error(r) => Frame::Error(text(r)),
            Token::Integer(n) => Frame::Integer(n),
            Token::Bulk(r) => Frame::Bulk(bytes(r)),
            Token::Null => Frame::Null,
            Token::NullArray => Frame::NullArray,
            Token::Double(d) => Frame::Double(d),
            Token::Boolean(b) => Frame::Boolean(b),
            Token::Verbatim(r) => Frame::Verbatim(bytes(r)),
            Token::BigNumber(r) => Frame::BigNumber(text(r)),
            Token::Open(kind, _) => finish(kind, Vec::new()),
        }
    }
}

/// Builds the frame of a completed aggregate from its children in order.
fn finish(kind: Kind, items: Vec<Frame>) -> Frame {
    match kind {
        Kind::Array => Frame::Array(items),
        Kind::Set => Frame::Set(items),
        Kind::Push => Frame::Push(items),
        // Attributes are dropped before they get here; an empty map is what one would be.
        Kind::Map | Kind::Attribute => {
            let mut pairs = Vec::with_capacity(items.len() / 2);
            let mut items = items.into_iter();
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                pairs.push((k, v));
            }
            Frame::Map(pairs)
        }
    }
}

/// Reads the token at `pos`, returning it and the position after it.
fn token(buf: &[u8], pos: usize, limits: &Limits) -> Result<(Token, usize), FrameError> {
    examined();
    let Some(&ty) = buf.get(pos) else {
        return Err(FrameError::Incomplete);
    };
    let start = pos + 1;
    let what = match ty {
        b'+' => "simple string",
        b'-' => "error",
        b':' => "integer",
        b'_' => "null",
        b',' => "double",
        b'#' => "boolean",
        b'(' => "big number",
        b'$' | b'!' | b'=' => return blob(buf, ty, start, limits),
        b'*' | b'%' | b'~' | b'>' | b'|' => return aggregate(buf, ty, start, limits),
        _ => {
            return Err(protocol(format!(
                "unexpected type byte '{}'",
                ty.escape_ascii()
            )));
        }
    };
    let bad = || protocol(format!("invalid {what}"));
    let cr = line_end(buf, start, limits.max_inline)
        .map_err(|f| f.into_error(&format!("too big {what}"), &format!("invalid {what}")))?;
    let line = &buf[start..cr];
    let token = match ty {
        b'+' => Token::Simple(start..cr),
        b'-' => Token::Error(start..cr),
        b':' => Token::Integer(parse_i64(line).ok_or_else(bad)?),
        b'_' if line.is_empty() => Token::Null,
        b',' => Token::Double(
            std::str::from_utf8(line)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(bad)?,
        ),
        b'#' if line == b"t" => Token::Boolean(true),
        b'#' if line == b"f" => Token::Boolean(false),
        b'(' if is_big_number(line) => Token::BigNumber(start..cr),
        _ => return Err(bad()),
    };
    Ok((token, cr + 2))
}

/// An optional `-` and at least one digit, as hiredis accepts.
fn is_big_number(s: &[u8]) -> bool {
    let digits = s.strip_prefix(b"-").unwrap_or(s);
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

fn blob(buf: &[u8], ty: u8, start: usize, limits: &Limits) -> Result<(Token, usize), FrameError> {
    const BAD_LEN: &str = "invalid bulk length";
    let (len, cr) = length_line(buf, start, limits, "too big bulk count string", BAD_LEN)?;
    if ty == b'$' && len == -1 {
        return Ok((Token::Null, cr + 2));
    }
    let len = within(len, limits.max_bulk, BAD_LEN)?;
    let data = cr + 2;
    let end = blob_end(buf, data, len)?;
    let token = match ty {
        b'$' => Token::Bulk(data..end),
        b'!' => Token::Error(data..end),
        // `=` carries a three-byte format and a colon before the text.
        _ if len >= 4 && buf[data + 3] == b':' => Token::Verbatim(data + 4..end),
        _ => return Err(protocol("invalid verbatim string")),
    };
    Ok((token, end + 2))
}

fn aggregate(
    buf: &[u8],
    ty: u8,
    start: usize,
    limits: &Limits,
) -> Result<(Token, usize), FrameError> {
    const BAD_COUNT: &str = "invalid multibulk length";
    let (count, cr) = length_line(buf, start, limits, "too big mbulk count string", BAD_COUNT)?;
    if ty == b'*' && count == -1 {
        return Ok((Token::NullArray, cr + 2));
    }
    let count = within(count, limits.max_elements, BAD_COUNT)?;
    let (kind, children) = match ty {
        b'*' => (Kind::Array, Some(count)),
        b'~' => (Kind::Set, Some(count)),
        b'>' => (Kind::Push, Some(count)),
        b'%' => (Kind::Map, count.checked_mul(2)),
        _ => (Kind::Attribute, count.checked_mul(2)),
    };
    let children = children.ok_or_else(|| protocol(BAD_COUNT))?;
    Ok((Token::Open(kind, children), cr + 2))
}

/// An aggregate whose children are still being read.
#[derive(Debug, Clone)]
struct Open {
    kind: Kind,
    left: usize,
    items: Vec<Frame>,
}

/// Reads one frame from `pos` inside the open aggregates of `stack`, with that explicit stack
/// rather than recursion, leaving `pos` at the frame's end. On [`FrameError::Incomplete`], `pos`
/// and `stack` say how far it got, and calling again with them resumes there.
///
/// Without `build` it only checks the frame (the frame returned is a placeholder). With `build`,
/// which callers use only after a check succeeded, capacities taken from claimed counts are
/// backed by bytes already in `buf`.
fn walk(
    buf: &[u8],
    limits: &Limits,
    build: bool,
    pos: &mut usize,
    stack: &mut Vec<Open>,
) -> Result<Frame, FrameError> {
    loop {
        let (token, next) = token(buf, *pos, limits)?;
        *pos = next;
        let mut value = match token {
            Token::Open(kind, children) => {
                if stack.len() >= limits.max_depth {
                    return Err(protocol("too deep nesting"));
                }
                if children > 0 {
                    let keep = build && kind != Kind::Attribute;
                    let items = if keep {
                        Vec::with_capacity(children)
                    } else {
                        Vec::new()
                    };
                    stack.push(Open {
                        kind,
                        left: children,
                        items,
                    });
                    continue;
                }
                if kind == Kind::Attribute {
                    continue;
                }
                if build {
                    finish(kind, Vec::new())
                } else {
                    Frame::Null
                }
            }
            token if build => token.into_frame(buf),
            _ => Frame::Null,
        };
        // Hand the finished value to its parent, closing every aggregate it completes.
        loop {
            let Some(mut top) = stack.pop() else {
                return Ok(value);
            };
            if build && top.kind != Kind::Attribute {
                top.items.push(value);
            }
            top.left -= 1;
            if top.left > 0 {
                stack.push(top);
                break;
            }
            if top.kind == Kind::Attribute {
                // An attribute is not a value: the frame it annotates comes next.
                break;
            }
            value = if build {
                finish(top.kind, top.items)
            } else {
                Frame::Null
            };
        }
    }
}
