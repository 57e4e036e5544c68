//! A raw connection to a node, read until the node closes it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Sends `bytes` on a new connection, half-closes it first if `shut_write`, and returns all that
/// comes back until the node closes the connection (EOF or reset). Fails if the node neither
/// answers nor closes within 10 s: a test of a close that never comes must not wait for ever.
pub fn until_closed(addr: SocketAddr, bytes: &[u8], shut_write: bool) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(bytes).expect("send");
    if shut_write {
        s.shutdown(std::net::Shutdown::Write).expect("half-close");
    }
    read_until_closed(&mut s)
}

/// What `s` receives until the node closes it; fails on a read timeout (no answer, no close).
pub fn read_until_closed(s: &mut TcpStream) -> String {
    use std::io::ErrorKind;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    // At most 10 s per read, and a bounded number of reads.
    for _ in 0..10_000 {
        match s.read(&mut buf) {
            Ok(0) => return String::from_utf8_lossy(&out).into_owned(),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => {
                return String::from_utf8_lossy(&out).into_owned();
            }
            Err(e) => panic!(
                "no close within 10 s ({e}) after {:?}",
                String::from_utf8_lossy(&out)
            ),
        }
    }
    panic!("more than 10 000 reads before the close");
}

/// Sends raw bytes on a new connection and returns what comes back before the server closes it
/// (or 2 s pass).
pub fn raw(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    s.write_all(bytes).expect("send");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}
