//! A small blocking client for the node's own protocol: what `pliant admin` and scripts use to
//! send a command and read its reply, with the password if the node wants one.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::frame::{Cursor, Frame, FrameError, Limits};

/// Why a request failed before a reply arrived.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Connecting, sending or receiving failed.
    #[error("{addr}: {source}")]
    Io {
        /// The node.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The node closed the connection before replying.
    #[error("{0}: the connection closed before a reply")]
    Closed(String),
    /// The reply was not a valid frame.
    #[error("{addr}: {source}")]
    Protocol {
        /// The node.
        addr: String,
        /// What was wrong.
        source: FrameError,
    },
    /// The node refused the password.
    #[error("{addr}: {message}")]
    Auth {
        /// The node.
        addr: String,
        /// Its reply.
        message: String,
    },
}

/// One connection to a node.
#[derive(Debug)]
pub struct Client {
    addr: String,
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    /// Connects to `addr` (10 s to connect and for each reply) and, with a `password`,
    /// authenticates.
    pub fn connect(addr: &str, password: Option<&str>) -> Result<Self, ClientError> {
        let io = |source| ClientError::Io {
            addr: addr.to_string(),
            source,
        };
        let timeout = Duration::from_secs(10);
        let sock = addr
            .to_socket_addrs()
            .map_err(io)?
            .next()
            .ok_or_else(|| io(std::io::Error::other("no address")))?;
        let stream = TcpStream::connect_timeout(&sock, timeout).map_err(io)?;
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .map_err(io)?;
        let mut c = Self {
            addr: addr.to_string(),
            stream,
            buf: Vec::new(),
        };
        if let Some(p) = password
            && let Frame::Error(message) = c.call(&[b"AUTH", p.as_bytes()])?
        {
            return Err(ClientError::Auth {
                addr: addr.to_string(),
                message,
            });
        }
        Ok(c)
    }

    /// Sends one command and returns its reply (an error reply is a `Frame::Error`).
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Frame, ClientError> {
        let mut out = Vec::new();
        encode(args, &mut out);
        self.send(&out)?;
        self.reply()
    }

    /// Sends several commands in one write and returns their replies in order.
    pub fn pipeline(&mut self, commands: &[Vec<&[u8]>]) -> Result<Vec<Frame>, ClientError> {
        let mut out = Vec::new();
        for c in commands {
            encode(c, &mut out);
        }
        self.send(&out)?;
        commands.iter().map(|_| self.reply()).collect()
    }

    /// Reads the next frame the node sends unasked: a pushed invalidation, or a message of a
    /// channel the connection subscribed to.
    pub fn read(&mut self) -> Result<Frame, ClientError> {
        self.reply()
    }

    /// Sends bytes as they are (a pipeline written by hand, a half request).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.send(bytes)
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.stream
            .write_all(bytes)
            .map_err(|source| ClientError::Io {
                addr: self.addr.clone(),
                source,
            })
    }

    /// Reads the next reply.
    fn reply(&mut self) -> Result<Frame, ClientError> {
        let limits = Limits::default();
        let mut cursor = Cursor::default();
        let mut chunk = [0u8; 64 * 1024];
        loop {
            match cursor.parse(&self.buf, &limits) {
                Ok((frame, used)) => {
                    self.buf.drain(..used);
                    return Ok(frame);
                }
                Err(FrameError::Incomplete) => {}
                Err(source) => {
                    return Err(ClientError::Protocol {
                        addr: self.addr.clone(),
                        source,
                    });
                }
            }
            let n = self
                .stream
                .read(&mut chunk)
                .map_err(|source| ClientError::Io {
                    addr: self.addr.clone(),
                    source,
                })?;
            if n == 0 {
                return Err(ClientError::Closed(self.addr.clone()));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// A command as RESP: an array of bulk strings.
fn encode(args: &[&[u8]], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}
