//! The RESP codec: exact bytes against Redis's, round trips, the incomplete-prefix contract, and
//! hostile input (huge claimed lengths, deep nesting, random bytes).

use bytes::Bytes;
use pliant_proto::frame::{Cursor, Frame, FrameError, Limits, Protocol};
use proptest::collection::vec;
use proptest::prelude::*;

fn request(buf: &[u8]) -> Result<(Frame, usize), FrameError> {
    Frame::parse_request(buf, &Limits::default())
}

fn parse(buf: &[u8]) -> Result<(Frame, usize), FrameError> {
    Frame::parse(buf, &Limits::default())
}

fn encode(frame: &Frame, proto: Protocol) -> Vec<u8> {
    let mut out = Vec::new();
    frame.write(proto, &mut out);
    out
}

fn args(args: &[&[u8]]) -> Frame {
    Frame::Array(
        args.iter()
            .map(|a| Frame::bulk(Bytes::copy_from_slice(a)))
            .collect(),
    )
}

type Parsed = Result<(Frame, usize), FrameError>;

/// Which of the two parsers a test means.
#[derive(Debug, Clone, Copy)]
enum Reader {
    Request,
    Reply,
}

impl Reader {
    fn parse(self, buf: &[u8], limits: &Limits) -> Parsed {
        match self {
            Reader::Request => Frame::parse_request(buf, limits),
            Reader::Reply => Frame::parse(buf, limits),
        }
    }

    fn resume(self, cursor: &mut Cursor, buf: &[u8], limits: &Limits) -> Parsed {
        match self {
            Reader::Request => cursor.parse_request(buf, limits),
            Reader::Reply => cursor.parse(buf, limits),
        }
    }
}

fn err(msg: &str) -> FrameError {
    FrameError::Protocol(msg.to_owned())
}

fn same_parsed(a: &Parsed, b: &Parsed) -> bool {
    match (a, b) {
        (Ok((x, n)), Ok((y, m))) => n == m && same(x, y),
        _ => a == b,
    }
}

/// Equality that tells -0.0 from 0.0 and counts every NaN as equal to every other.
fn same(a: &Frame, b: &Frame) -> bool {
    let all =
        |x: &[Frame], y: &[Frame]| x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q));
    match (a, b) {
        (Frame::Double(x), Frame::Double(y)) => {
            (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits()
        }
        (Frame::Array(x), Frame::Array(y))
        | (Frame::Set(x), Frame::Set(y))
        | (Frame::Push(x), Frame::Push(y)) => all(x, y),
        (Frame::Map(x), Frame::Map(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((k1, v1), (k2, v2))| same(k1, k2) && same(v1, v2))
        }
        _ => a == b,
    }
}

/// Parses `bytes` whole, and checks that every strict prefix is `Incomplete`, both from scratch
/// and through a cursor fed the bytes one at a time.
fn parse_with_prefixes(reader: Reader, bytes: &[u8]) -> Result<Frame, String> {
    let limits = Limits::default();
    let mut cursor = Cursor::default();
    for cut in 0..bytes.len() {
        let got = reader.parse(&bytes[..cut], &limits);
        let resumed = reader.resume(&mut cursor, &bytes[..cut], &limits);
        if got != Err(FrameError::Incomplete) || !same_parsed(&resumed, &got) {
            return Err(format!(
                "prefix of {cut} bytes of {bytes:?} gave {got:?}, through a cursor {resumed:?}"
            ));
        }
    }
    let whole = reader.parse(bytes, &limits);
    let resumed = reader.resume(&mut cursor, bytes, &limits);
    match whole {
        Ok((frame, used))
            if used == bytes.len() && same_parsed(&resumed, &Ok((frame.clone(), used))) =>
        {
            Ok(frame)
        }
        other => Err(format!(
            "{bytes:?} gave {other:?}, through a cursor {resumed:?}"
        )),
    }
}

fn every_variant() -> Vec<Frame> {
    let mut frames = vec![
        Frame::ok(),
        Frame::Simple(String::new()),
        Frame::Simple("héllo wörld".to_owned()),
        Frame::error("ERR unknown command"),
        Frame::Integer(0),
        Frame::Integer(i64::MIN),
        Frame::Integer(i64::MAX),
        Frame::bulk(&b""[..]),
        Frame::bulk(&b"\r\n\0\xff binary"[..]),
        Frame::Null,
        Frame::Array(vec![]),
        Frame::Array(vec![
            Frame::Integer(1),
            Frame::Null,
            Frame::Array(vec![Frame::ok()]),
        ]),
        Frame::Map(vec![]),
        Frame::Map(vec![
            (Frame::bulk("k"), Frame::Integer(1)),
            (
                Frame::Array(vec![Frame::Boolean(true)]),
                Frame::Map(vec![(Frame::Null, Frame::Set(vec![]))]),
            ),
        ]),
        Frame::Set(vec![Frame::bulk("a"), Frame::Double(2.5)]),
        Frame::Boolean(true),
        Frame::Boolean(false),
        Frame::Verbatim(Bytes::from_static(b"Some\r\ntext")),
        Frame::Verbatim(Bytes::new()),
        Frame::BigNumber("3492890328409238509324850943850943825024385".to_owned()),
        Frame::BigNumber("-1".to_owned()),
        Frame::Push(vec![
            Frame::bulk("message"),
            Frame::bulk("ch"),
            Frame::bulk("hi"),
        ]),
    ];
    for d in [
        0.0,
        -0.0,
        0.1,
        -2.5,
        1e17,
        1e300,
        -1e-300,
        5e-324,
        f64::MAX,
        f64::MIN_POSITIVE,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ] {
        frames.push(Frame::Double(d));
    }
    frames
}

#[test]
fn every_variant_round_trips_through_resp3() {
    for frame in every_variant() {
        let bytes = encode(&frame, Protocol::Resp3);
        let back = parse_with_prefixes(Reader::Reply, &bytes).unwrap_or_else(|e| panic!("{e}"));
        assert!(same(&back, &frame), "{frame:?} came back as {back:?}");
    }
}

#[test]
fn both_nulls_are_underscore_in_resp3() {
    // RESP3 has one null, so the null array comes back as the null bulk string.
    assert_eq!(encode(&Frame::NullArray, Protocol::Resp3), b"_\r\n");
    assert_eq!(encode(&Frame::Null, Protocol::Resp3), b"_\r\n");
    assert_eq!(parse(b"_\r\n"), Ok((Frame::Null, 3)));
}

#[test]
fn resp3_bytes_are_redis_bytes() {
    let cases: Vec<(Frame, &[u8])> = vec![
        (
            Frame::Map(vec![(Frame::Simple("a".into()), Frame::Integer(1))]),
            b"%1\r\n+a\r\n:1\r\n",
        ),
        (Frame::Set(vec![Frame::Integer(1)]), b"~1\r\n:1\r\n"),
        (Frame::Push(vec![Frame::bulk("x")]), b">1\r\n$1\r\nx\r\n"),
        (Frame::Boolean(true), b"#t\r\n"),
        (Frame::Boolean(false), b"#f\r\n"),
        (Frame::Double(1.5), b",1.5\r\n"),
        (
            Frame::Verbatim(Bytes::from_static(b"abc")),
            b"=7\r\ntxt:abc\r\n",
        ),
        (Frame::BigNumber("123".into()), b"(123\r\n"),
        (Frame::error("ERR bad"), b"-ERR bad\r\n"),
        (Frame::Integer(-42), b":-42\r\n"),
    ];
    for (frame, bytes) in cases {
        assert_eq!(encode(&frame, Protocol::Resp3), bytes, "{frame:?}");
    }
}

#[test]
fn resp2_downgrades_are_redis_bytes() {
    let cases: Vec<(Frame, &[u8])> = vec![
        (
            Frame::Map(vec![
                (Frame::bulk("a"), Frame::Integer(1)),
                (Frame::Simple("b".into()), Frame::Boolean(true)),
            ]),
            b"*4\r\n$1\r\na\r\n:1\r\n+b\r\n:1\r\n",
        ),
        (Frame::Boolean(true), b":1\r\n"),
        (Frame::Boolean(false), b":0\r\n"),
        (Frame::Null, b"$-1\r\n"),
        (Frame::NullArray, b"*-1\r\n"),
        (Frame::Set(vec![Frame::bulk("m")]), b"*1\r\n$1\r\nm\r\n"),
        (
            Frame::Push(vec![Frame::bulk("m"), Frame::Integer(2)]),
            b"*2\r\n$1\r\nm\r\n:2\r\n",
        ),
        (Frame::Double(1.5), b"$3\r\n1.5\r\n"),
        (Frame::Double(f64::INFINITY), b"$3\r\ninf\r\n"),
        (Frame::Double(f64::NEG_INFINITY), b"$4\r\n-inf\r\n"),
        (Frame::Double(f64::NAN), b"$3\r\nnan\r\n"),
        (Frame::Verbatim(Bytes::from_static(b"hi")), b"$2\r\nhi\r\n"),
        (
            Frame::BigNumber("12345678901234567890".into()),
            b"$20\r\n12345678901234567890\r\n",
        ),
        (Frame::ok(), b"+OK\r\n"),
        (Frame::error("ERR no"), b"-ERR no\r\n"),
        (Frame::bulk("foo"), b"$3\r\nfoo\r\n"),
        (Frame::Array(vec![]), b"*0\r\n"),
    ];
    for (frame, bytes) in cases {
        assert_eq!(encode(&frame, Protocol::Resp2), bytes, "{frame:?}");
    }
}

#[test]
fn doubles_are_formatted_as_redis_does() {
    let cases = [
        (0.1, "0.1"),
        (1.5, "1.5"),
        (3.0, "3"),
        (-2.5, "-2.5"),
        (0.0, "0"),
        (-0.0, "-0"),
        (1e17, "100000000000000000"),
        (1e18, "1000000000000000000"),
        (1e20, "1e+20"),
        (2f64.powi(63), "9223372036854776000"),
        (1e300, "1e+300"),
        (1.5e-7, "1.5e-7"),
        (0.000123, "0.000123"),
        (12345678.9, "12345678.9"),
        (f64::MAX, "1.7976931348623157e+308"),
        (5e-324, "5e-324"),
        (f64::INFINITY, "inf"),
        (f64::NEG_INFINITY, "-inf"),
        (f64::NAN, "nan"),
    ];
    for (d, text) in cases {
        assert_eq!(
            encode(&Frame::Double(d), Protocol::Resp3),
            format!(",{text}\r\n").into_bytes(),
            "{d:e}"
        );
    }
}

#[test]
fn line_breaks_in_simple_text_become_spaces() {
    assert_eq!(
        encode(&Frame::error("ERR a\r\nb"), Protocol::Resp2),
        b"-ERR a  b\r\n"
    );
    assert_eq!(
        encode(&Frame::Simple("x\ny".into()), Protocol::Resp3),
        b"+x y\r\n"
    );
}

#[test]
fn request_array_of_bulk_strings() {
    let bytes = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    assert_eq!(request(bytes), Ok((args(&[b"GET", b"k"]), bytes.len())));
    let binary = b"*1\r\n$4\r\n\r\n\0\xff\r\n";
    assert_eq!(request(binary), Ok((args(&[b"\r\n\0\xff"]), binary.len())));
    assert_eq!(request(b"*0\r\n"), Ok((Frame::Array(vec![]), 4)));
    assert_eq!(request(b"*-1\r\n"), Ok((Frame::Array(vec![]), 5)));
}

#[test]
fn inline_requests_follow_redis_quoting() {
    assert_eq!(request(b"PING\r\n"), Ok((args(&[b"PING"]), 6)));
    assert_eq!(request(b"PING\n"), Ok((args(&[b"PING"]), 5)));
    let quoted = b"set \"a b\" 'c\\'d'\n";
    assert_eq!(
        request(quoted),
        Ok((args(&[b"set", b"a b", b"c'd"]), quoted.len()))
    );
    assert_eq!(request(b"\"\\x41\"\n"), Ok((args(&[b"A"]), 7)));
    let escapes = b"\"\\n\\r\\t\\b\\a\\\\\\\"\\q\\x4a\\x4\" x\r\n";
    assert_eq!(
        request(escapes),
        Ok((args(&[b"\n\r\t\x08\x07\\\"qJx4", b"x"]), escapes.len()))
    );
    assert_eq!(request(b"  a\t\tb  \r\n"), Ok((args(&[b"a", b"b"]), 10)));
    assert_eq!(request(b"'' \"\"\n"), Ok((args(&[b"", b""]), 6)));
    // A quote inside an unquoted argument opens a quoted part of it.
    assert_eq!(request(b"a\"b c\" d\n"), Ok((args(&[b"ab c", b"d"]), 9)));
    // Redis splits a C string: a NUL ends the line.
    assert_eq!(request(b"a\0b c\n"), Ok((args(&[b"a"]), 6)));
}

#[test]
fn empty_inline_lines_are_empty_requests() {
    assert_eq!(request(b"\r\n"), Ok((Frame::Array(vec![]), 2)));
    assert_eq!(request(b"\n"), Ok((Frame::Array(vec![]), 1)));
    assert_eq!(request(b"   \t\r\n"), Ok((Frame::Array(vec![]), 6)));
}

#[test]
fn unbalanced_quotes_are_refused() {
    for line in [
        &b"get \"abc\n"[..],
        b"get 'abc\n",
        b"get \"a\"b\n",
        b"get 'a'b\n",
        b"get \"abc\\\"\n",
        b"get 'abc\\'\n",
    ] {
        assert_eq!(
            request(line),
            Err(err("unbalanced quotes in request")),
            "{line:?}"
        );
    }
}

#[test]
fn pipelined_requests_are_read_one_at_a_time() {
    let buf = b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\nECHO hi\r\n*1\r\n$4\r\nPI";
    let (first, used) = request(buf).expect("first");
    assert_eq!((first, used), (args(&[b"PING"]), 14));
    let (second, used2) = request(&buf[used..]).expect("second");
    assert_eq!((second, used2), (args(&[b"GET", b"k"]), 20));
    let rest = &buf[used + used2..];
    let (third, used3) = request(rest).expect("third");
    assert_eq!((third, used3), (args(&[b"ECHO", b"hi"]), 9));
    assert_eq!(request(&rest[used3..]), Err(FrameError::Incomplete));
}

#[test]
fn malformed_requests_get_redis_errors() {
    let cases: [(&[u8], &str); 12] = [
        (b"*1\r\n+OK\r\n", "expected '$', got '+'"),
        (b"*2\r\n$1\r\na\r\n:1\r\n", "expected '$', got ':'"),
        (b"*x\r\n", "invalid multibulk length"),
        (b"*+1\r\n", "invalid multibulk length"),
        (b"* 1\r\n", "invalid multibulk length"),
        (b"*01\r\n", "invalid multibulk length"),
        (b"*1\r\n$-1\r\n", "invalid bulk length"),
        (b"*1\r\n$x\r\n", "invalid bulk length"),
        (b"*1\r\n$-0\r\n", "invalid bulk length"),
        (b"*1\r\n$99999999999999999999\r\n", "invalid bulk length"),
        (b"*1\r\n$3\r\nabcd\r\n", "invalid bulk terminator"),
        (b"*1\rx", "invalid multibulk length"),
    ];
    for (bytes, msg) in cases {
        assert_eq!(request(bytes), Err(err(msg)), "{bytes:?}");
    }
}

#[test]
fn hostile_counts_and_lengths_fail_at_once() {
    assert_eq!(
        request(b"*1000000000\r\n"),
        Err(err("invalid multibulk length"))
    );
    assert_eq!(
        parse(b"*1000000000\r\n"),
        Err(err("invalid multibulk length"))
    );
    assert_eq!(
        parse(b"%1000000000\r\n"),
        Err(err("invalid multibulk length"))
    );
    assert_eq!(parse(b"$4294967296\r\n"), Err(err("invalid bulk length")));
    assert_eq!(
        request(b"*1\r\n$4000000000\r\n"),
        Err(err("invalid bulk length"))
    );
    let over = Limits::default().max_elements + 1;
    assert_eq!(
        request(format!("*{over}\r\n").as_bytes()),
        Err(err("invalid multibulk length"))
    );
    let over = Limits::default().max_bulk + 1;
    assert_eq!(
        request(format!("*1\r\n${over}\r\n").as_bytes()),
        Err(err("invalid bulk length"))
    );
}

/// Before AUTH (Redis's fix of CVE-2021-32675): more than 10 arguments, or one over 16 KiB, is
/// refused as soon as its header line is in, before any of its data; within those bounds a
/// request reads as any other.
#[test]
fn unauthenticated_requests_are_refused_at_the_header_of_a_large_claim() {
    use pliant_proto::frame::{UNAUTHENTICATED_MAX_ARGS, UNAUTHENTICATED_MAX_BULK};
    let limits = Limits {
        unauthenticated: true,
        ..Limits::default()
    };
    let request = |b: &[u8]| Frame::parse_request(b, &limits);
    assert_eq!(
        request(format!("*{}\r\n", UNAUTHENTICATED_MAX_ARGS + 1).as_bytes()),
        Err(err("unauthenticated multibulk length"))
    );
    assert_eq!(
        request(format!("*1\r\n${}\r\n", UNAUTHENTICATED_MAX_BULK + 1).as_bytes()),
        Err(err("unauthenticated bulk length"))
    );
    assert_eq!(
        request(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000000\r\n"),
        Err(err("unauthenticated bulk length"))
    );
    // At the bounds: a request like any other.
    let most: Vec<Vec<u8>> = (0..UNAUTHENTICATED_MAX_ARGS)
        .map(|i| vec![b'a' + i as u8; UNAUTHENTICATED_MAX_BULK])
        .collect();
    let mut bytes = format!("*{}\r\n", most.len()).into_bytes();
    for a in &most {
        bytes.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        bytes.extend_from_slice(a);
        bytes.extend_from_slice(b"\r\n");
    }
    let refs: Vec<&[u8]> = most.iter().map(Vec::as_slice).collect();
    assert_eq!(request(&bytes), Ok((args(&refs), bytes.len())));
    // What no client may send gets the same words as before, as in Redis.
    assert_eq!(
        request(b"*1000000000\r\n"),
        Err(err("invalid multibulk length"))
    );
    assert_eq!(
        request(b"*1\r\n$4294967296\r\n"),
        Err(err("invalid bulk length"))
    );
    // Replies are not requests; inline requests are bounded by their line.
    assert_eq!(
        Frame::parse(b"*11\r\n", &limits),
        Err(FrameError::Incomplete)
    );
    assert!(request(b"MSET a 1 b 2 c 3 d 4 e 5 f 6\r\n").is_ok());
}

#[test]
fn long_lines_are_refused() {
    let max = Limits::default().max_inline;
    let mut inline = vec![b'a'; max + 2];
    assert_eq!(request(&inline), Err(err("too big inline request")));
    inline.truncate(max + 1);
    assert_eq!(request(&inline), Err(FrameError::Incomplete));
    // Exactly max bytes is a line; one more is not, even when it arrives whole.
    let mut line = vec![b'a'; max];
    line.extend_from_slice(b"\r\n");
    assert!(request(&line).is_ok());
    line.insert(0, b'a');
    assert_eq!(request(&line), Err(err("too big inline request")));

    let mut count = b"*".to_vec();
    count.extend(std::iter::repeat_n(b'1', max + 1));
    assert_eq!(request(&count), Err(err("too big mbulk count string")));
    let mut len = b"*1\r\n$".to_vec();
    len.extend(std::iter::repeat_n(b'1', max + 1));
    assert_eq!(request(&len), Err(err("too big bulk count string")));
    let mut simple = b"+".to_vec();
    simple.extend(std::iter::repeat_n(b'x', max + 1));
    assert_eq!(parse(&simple), Err(err("too big simple string")));
}

#[test]
fn deep_nesting_is_refused_without_recursion() {
    let mut deep = b"*1\r\n".repeat(10_000);
    deep.extend_from_slice(b":1\r\n");
    assert_eq!(parse(&deep), Err(err("too deep nesting")));
    // With no depth limit, checking 10 000 levels must still not recurse.
    let unbounded = Limits {
        max_depth: usize::MAX,
        ..Limits::default()
    };
    deep.truncate(deep.len() - 4);
    assert_eq!(Frame::parse(&deep, &unbounded), Err(FrameError::Incomplete));
}

#[test]
fn depth_limit_is_exact() {
    let max = Limits::default().max_depth;
    let nested = |depth: usize| {
        let mut bytes = b"*1\r\n".repeat(depth);
        bytes.extend_from_slice(b":1\r\n");
        bytes
    };
    let ok = nested(max);
    assert_eq!(parse(&ok).map(|(_, used)| used), Ok(ok.len()));
    assert_eq!(parse(&nested(max + 1)), Err(err("too deep nesting")));
}

#[test]
fn every_resp3_type_parses_from_bytes() {
    let cases: Vec<(&[u8], Frame)> = vec![
        (b"+OK\r\n", Frame::ok()),
        (b"-ERR x\r\n", Frame::error("ERR x")),
        (b"!9\r\nERR oops!\r\n", Frame::error("ERR oops!")),
        (b":-9223372036854775808\r\n", Frame::Integer(i64::MIN)),
        (b"$-1\r\n", Frame::Null),
        (b"*-1\r\n", Frame::NullArray),
        (b"_\r\n", Frame::Null),
        (b",inf\r\n", Frame::Double(f64::INFINITY)),
        (b",-inf\r\n", Frame::Double(f64::NEG_INFINITY)),
        (b",1.5e3\r\n", Frame::Double(1500.0)),
        (b"#f\r\n", Frame::Boolean(false)),
        (
            b"=8\r\nmkd:text\r\n",
            Frame::Verbatim(Bytes::from_static(b"text")),
        ),
        (b"(-12\r\n", Frame::BigNumber("-12".into())),
        (
            b"%2\r\n+a\r\n:1\r\n$1\r\nb\r\n#t\r\n",
            Frame::Map(vec![
                (Frame::Simple("a".into()), Frame::Integer(1)),
                (Frame::bulk("b"), Frame::Boolean(true)),
            ]),
        ),
        (
            b"~1\r\n(7\r\n",
            Frame::Set(vec![Frame::BigNumber("7".into())]),
        ),
        (
            b">2\r\n+message\r\n$2\r\nhi\r\n",
            Frame::Push(vec![Frame::Simple("message".into()), Frame::bulk("hi")]),
        ),
        // Attributes are dropped, at the top and inside aggregates.
        (b"|1\r\n+ttl\r\n:3\r\n:5\r\n", Frame::Integer(5)),
        (
            b"*2\r\n|1\r\n+k\r\n*1\r\n+v\r\n:1\r\n|0\r\n:2\r\n",
            Frame::Array(vec![Frame::Integer(1), Frame::Integer(2)]),
        ),
    ];
    for (bytes, frame) in cases {
        let back = parse_with_prefixes(Reader::Reply, bytes).unwrap_or_else(|e| panic!("{e}"));
        assert!(same(&back, &frame), "{bytes:?} gave {back:?}");
    }
    let (nan, _) = parse(b",nan\r\n").expect("nan");
    assert!(matches!(nan, Frame::Double(d) if d.is_nan()));
}

#[test]
fn malformed_frames_are_protocol_errors() {
    let cases: [(&[u8], &str); 14] = [
        (b"?\r\n", "unexpected type byte '?'"),
        (b":01\r\n", "invalid integer"),
        (b":+1\r\n", "invalid integer"),
        (b": 1\r\n", "invalid integer"),
        (b":9223372036854775808\r\n", "invalid integer"),
        (b"#x\r\n", "invalid boolean"),
        (b"_x\r\n", "invalid null"),
        (b",1.5x\r\n", "invalid double"),
        (b"(1.5\r\n", "invalid big number"),
        (b"=3\r\nabc\r\n", "invalid verbatim string"),
        (b"$3\r\nabcd\r\n", "invalid bulk terminator"),
        (b"+a\rb\r\n", "invalid simple string"),
        (b"*-2\r\n", "invalid multibulk length"),
        (b"%-1\r\n", "invalid multibulk length"),
    ];
    for (bytes, msg) in cases {
        assert_eq!(parse(bytes), Err(err(msg)), "{bytes:?}");
    }
}

#[test]
fn a_cursor_reads_a_deep_reply_in_pieces() {
    let mut reply = Vec::new();
    Frame::Array(vec![
        Frame::Map(vec![(
            Frame::bulk("k"),
            Frame::Array(vec![Frame::Integer(7); 50]),
        )]),
        Frame::Set(vec![Frame::Double(0.5), Frame::Push(vec![Frame::Null])]),
        Frame::Verbatim(Bytes::from_static(b"text")),
    ])
    .write(Protocol::Resp3, &mut reply);
    let expected = parse(&reply).expect("reply");
    for piece in [1, 2, 3, 7, 64] {
        let mut cursor = Cursor::default();
        let mut cut = 0;
        let got = loop {
            cut = (cut + piece).min(reply.len());
            match cursor.parse(&reply[..cut], &Limits::default()) {
                Err(FrameError::Incomplete) => assert!(cut < reply.len()),
                done => break done,
            }
        };
        assert_eq!(got, Ok(expected.clone()), "pieces of {piece}");
    }
}

#[test]
fn a_cursor_given_a_changed_buffer_does_not_panic() {
    // Breaking the cursor's contract gives unspecified results, but must not panic.
    let limits = Limits::default();
    let before: [&[u8]; 4] = [
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nva",
        b"GET key",
        b"*2\r\n*1\r\n:1\r\n%1\r\n+a",
        b"|1\r\n+a\r\n",
    ];
    let after: [&[u8]; 5] = [b"", b"*", b"G\n", b":1\r\n", b"*1\r\n$1\r\nx\r\n"];
    let readers = [Reader::Request, Reader::Reply];
    for (first, then) in before
        .iter()
        .flat_map(|b| after.iter().map(move |a| (b, a)))
    {
        for (r1, r2) in readers
            .iter()
            .flat_map(|x| readers.iter().map(move |y| (x, y)))
        {
            let mut cursor = Cursor::default();
            let _ = r1.resume(&mut cursor, first, &limits);
            let _ = r2.resume(&mut cursor, then, &limits);
            let _ = r2.resume(&mut cursor, first, &limits);
        }
    }
}

fn arb_frame() -> impl Strategy<Value = Frame> {
    arb_frame_of(4, 24)
}

/// Frames nested up to `depth` deep with about `size` elements in all.
fn arb_frame_of(depth: u32, size: u32) -> impl Strategy<Value = Frame> {
    let leaf = prop_oneof![
        "[^\r\n]{0,6}".prop_map(Frame::Simple),
        "[^\r\n]{0,6}".prop_map(Frame::Error),
        any::<i64>().prop_map(Frame::Integer),
        vec(any::<u8>(), 0..8).prop_map(|b| Frame::Bulk(b.into())),
        Just(Frame::Null),
        any::<f64>().prop_map(Frame::Double),
        any::<bool>().prop_map(Frame::Boolean),
        vec(any::<u8>(), 0..8).prop_map(|b| Frame::Verbatim(b.into())),
        "-?[0-9]{1,30}".prop_map(Frame::BigNumber),
    ];
    leaf.prop_recursive(depth, size, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Frame::Array),
            vec((inner.clone(), inner.clone()), 0..3).prop_map(Frame::Map),
            vec(inner.clone(), 0..4).prop_map(Frame::Set),
            vec(inner, 0..4).prop_map(Frame::Push),
        ]
    })
}

/// What RESP2 turns a frame into, as a RESP2 reader sees it.
fn downgraded(frame: &Frame) -> Frame {
    let all = |items: &[Frame]| Frame::Array(items.iter().map(downgraded).collect());
    match frame {
        Frame::Array(items) | Frame::Set(items) | Frame::Push(items) => all(items),
        Frame::Map(pairs) => Frame::Array(
            pairs
                .iter()
                .flat_map(|(k, v)| [downgraded(k), downgraded(v)])
                .collect(),
        ),
        Frame::Boolean(b) => Frame::Integer(i64::from(*b)),
        Frame::Double(_) | Frame::Verbatim(_) | Frame::BigNumber(_) => {
            let mut out = Vec::new();
            frame.write(Protocol::Resp2, &mut out);
            match Frame::parse(&out, &Limits::default()) {
                Ok((bulk @ Frame::Bulk(_), _)) => bulk,
                other => panic!("{frame:?} downgraded to {other:?}"),
            }
        }
        other => other.clone(),
    }
}

/// An inline request line for `args`, quoting each argument one of Redis's ways.
fn inline_line(args: &[(Vec<u8>, u8)], crlf: bool) -> Vec<u8> {
    let mut line = Vec::new();
    for (arg, style) in args {
        if !line.is_empty() {
            line.push(b' ');
        }
        let plain = !arg.is_empty() && arg.iter().all(u8::is_ascii_alphanumeric);
        match style % 3 {
            0 if plain => line.extend_from_slice(arg),
            1 if arg
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b' ' || *b == b'\'') =>
            {
                line.push(b'\'');
                for &b in arg {
                    if b == b'\'' {
                        line.push(b'\\');
                    }
                    line.push(b);
                }
                line.push(b'\'');
            }
            _ => {
                line.push(b'"');
                for &b in arg {
                    if b.is_ascii_alphanumeric() {
                        line.push(b);
                    } else {
                        line.extend_from_slice(format!("\\x{b:02x}").as_bytes());
                    }
                }
                line.push(b'"');
            }
        }
    }
    line.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
    line
}

/// Bytes that look like RESP more often than uniform bytes do.
fn resp_ish_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        any::<u8>(),
        proptest::sample::select(b"*$+-:_,#=(!%~>|\r\n0123456789tf?\"'\\x ".to_vec()),
    ];
    prop_oneof![
        vec(byte.clone(), 0..48),
        // A valid frame's bytes with some corrupted, to get past the first header.
        (
            arb_frame_of(3, 10),
            vec((any::<prop::sample::Index>(), byte), 1..4)
        )
            .prop_map(|(frame, edits)| {
                let mut bytes = Vec::new();
                frame.write(Protocol::Resp3, &mut bytes);
                for (at, b) in edits {
                    let i = at.index(bytes.len());
                    bytes[i] = b;
                }
                bytes
            }),
    ]
}

/// A parse's result is sane: a frame uses some of the bytes and its own prefixes are incomplete.
///
/// A cursor fed the bytes one at a time agrees with parsing each prefix from scratch: it starts
/// afresh after every frame or error, so this holds past the first outcome too.
fn check_outcome(reader: Reader, bytes: &[u8], limits: &Limits) -> Result<(), TestCaseError> {
    match reader.parse(bytes, limits) {
        Ok((_, used)) => {
            prop_assert!(used > 0 && used <= bytes.len());
            for cut in 0..used {
                prop_assert_eq!(
                    reader.parse(&bytes[..cut], limits),
                    Err(FrameError::Incomplete)
                );
            }
        }
        Err(FrameError::Incomplete | FrameError::Protocol(_)) => {}
    }
    let mut cursor = Cursor::default();
    for cut in 0..=bytes.len() {
        let prefix = &bytes[..cut];
        let resumed = reader.resume(&mut cursor, prefix, limits);
        let fresh = reader.parse(prefix, limits);
        prop_assert!(
            same_parsed(&resumed, &fresh),
            "after {} bytes: {:?} against {:?}",
            cut,
            resumed,
            fresh
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_frames_round_trip_and_prefixes_are_incomplete(frame in arb_frame()) {
        let resp3 = encode(&frame, Protocol::Resp3);
        let back = parse_with_prefixes(Reader::Reply, &resp3).map_err(TestCaseError::fail)?;
        prop_assert!(same(&back, &frame), "{:?} came back as {:?}", frame, back);
        let resp2 = encode(&frame, Protocol::Resp2);
        let back = parse_with_prefixes(Reader::Reply, &resp2).map_err(TestCaseError::fail)?;
        let expected = downgraded(&frame);
        prop_assert!(same(&back, &expected), "{:?} came back as {:?}", expected, back);
    }

    #[test]
    fn random_multibulk_requests_parse_and_prefixes_are_incomplete(
        parts in vec(vec(any::<u8>(), 0..10), 0..5),
    ) {
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let frame = args(&refs);
        let bytes = encode(&frame, Protocol::Resp2);
        let back = parse_with_prefixes(Reader::Request, &bytes).map_err(TestCaseError::fail)?;
        prop_assert_eq!(back, frame);
    }

    #[test]
    fn random_inline_requests_parse_and_prefixes_are_incomplete(
        parts in vec((vec(prop_oneof![any::<u8>(), Just(b'a'), Just(b'\'')], 0..8), any::<u8>()), 1..5),
        crlf in any::<bool>(),
    ) {
        let line = inline_line(&parts, crlf);
        let back = parse_with_prefixes(Reader::Request, &line).map_err(TestCaseError::fail)?;
        let refs: Vec<&[u8]> = parts.iter().map(|(a, _)| a.as_slice()).collect();
        prop_assert_eq!(back, args(&refs));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in resp_ish_bytes()) {
        let tight = Limits { max_bulk: 8, max_elements: 4, max_depth: 3, max_inline: 12, ..Limits::default() };
        for limits in [Limits::default(), tight] {
            check_outcome(Reader::Reply, &bytes, &limits)?;
            check_outcome(Reader::Request, &bytes, &limits)?;
        }
    }
}
