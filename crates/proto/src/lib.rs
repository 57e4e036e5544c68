//! The Redis protocol as Pliant speaks it, at the bottom of the crates that talk to a node.
//!
//! - [`frame`]: RESP frames (RESP2 and RESP3), checked and parsed from bytes with limits that
//!   bound what a peer can make the reader allocate, and written in the protocol a connection
//!   speaks.
//! - [`encode`]: a command as RESP, an array of bulk strings.
//! - [`client`]: the one client. A [`Dialer`] owns a node's address, its password and the
//!   timeouts, and opens authenticated connections (RESP3 on request): a blocking [`Client`] for
//!   `pliant admin`, the tools and tests, an [`AsyncClient`] for the nodes' own round trips to
//!   each other (moves, the coordination store, a tier's parent).
//! - [`auth::same_password`]: a password a client sent, compared in constant time (a node, the
//!   coordination store).
//! - [`error::chain`]: an error and its causes as one line, each text once (RESP error
//!   replies, status fields, the CLI).
//! - [`fuzz`]: a seeded random-frame fuzzer for the parsers (`pliant bench frames`).
//!
//! Every place that talks to a node goes through this crate, so the control plane and the data
//! plane share the protocol without importing each other.
//!
//! Dependencies: `bytes` (frames hold values shared without copies with the buffers they were
//! read from), `thiserror` (typed errors), `tokio` (the async client's sockets and timeouts),
//! `serde` (the fuzzer's report is printed as JSON by `pliant bench frames`).

pub mod auth;
pub mod client;
pub mod error;
pub mod frame;
pub mod fuzz;

pub use client::{AsyncClient, Client, ClientError, Dialer};
pub use frame::{Frame, FrameError, Limits, Protocol};

/// Appends a command to `out` as RESP: an array of bulk strings, the form every server reads.
/// Allocates at most once (the room for the whole command, reserved first): a slot move's batch
/// is a command of thousands of arguments, and a string per length was a fifth of its
/// allocations.
pub fn encode(args: &[impl AsRef<[u8]>], out: &mut Vec<u8>) {
    // A header is a type byte, at most 20 digits and CRLF.
    let room = args.iter().map(|a| a.as_ref().len() + 25).sum::<usize>() + 23;
    out.reserve(room);
    frame::write_header(out, b'*', args.len());
    for a in args {
        let a = a.as_ref();
        frame::write_header(out, b'$', a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}
