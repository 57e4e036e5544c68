//! The one client of a node: a [`Dialer`] owns where the node is, its password and how long to
//! wait, and opens connections already authenticated (and speaking RESP3 when asked); a blocking
//! [`Client`] (`pliant admin`, the tools, tests) or an [`AsyncClient`] (the nodes' round trips
//! to each other) then sends commands and reads replies.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::encode;
use crate::frame::{Cursor, Frame, FrameError, Limits};

/// What a connection waited for when its time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// The node to take the connection.
    Connect,
    /// A reply.
    Reply,
}

impl std::fmt::Display for Wait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Wait::Connect => "no connection",
            Wait::Reply => "no reply",
        })
    }
}

/// Why a request failed before a reply arrived. Every variant names the node.
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
    /// The node refused the password (AUTH, or HELLO with AUTH).
    #[error("{addr}: {message}")]
    Auth {
        /// The node.
        addr: String,
        /// Its reply.
        message: String,
    },
    /// The node refused a handshake command other than the password (HELLO 3 from a server
    /// that speaks only RESP2).
    #[error("{addr}: {command} refused: {message}")]
    Refused {
        /// The node.
        addr: String,
        /// The command.
        command: String,
        /// Its reply.
        message: String,
    },
    /// The node took longer than the dialer allows.
    #[error("{addr}: {waited} within {after:?}")]
    Timeout {
        /// The node.
        addr: String,
        /// What did not come.
        waited: Wait,
        /// How long it was given.
        after: Duration,
    },
}

impl ClientError {
    /// The node the error is about.
    pub fn addr(&self) -> &str {
        match self {
            ClientError::Io { addr, .. }
            | ClientError::Closed(addr)
            | ClientError::Protocol { addr, .. }
            | ClientError::Auth { addr, .. }
            | ClientError::Refused { addr, .. }
            | ClientError::Timeout { addr, .. } => addr,
        }
    }

    /// What went wrong, without the node's address: for callers whose own error names the node
    /// already.
    pub fn reason(&self) -> String {
        match self {
            ClientError::Io { source, .. } => source.to_string(),
            ClientError::Closed(_) => "the connection closed before a reply".into(),
            ClientError::Protocol { source, .. } => source.to_string(),
            ClientError::Auth { message, .. } => message.clone(),
            ClientError::Refused {
                command, message, ..
            } => format!("{command} refused: {message}"),
            ClientError::Timeout { waited, after, .. } => format!("{waited} within {after:?}"),
        }
    }
}

/// How to reach one node: its address, its password, and how long to wait for it. Cloned
/// freely; each [`connect`](Self::connect) opens a new connection.
#[derive(Clone)]
pub struct Dialer {
    addr: String,
    password: Option<String>,
    connect_timeout: Duration,
    io_timeout: Option<Duration>,
    resp3: bool,
}

impl std::fmt::Debug for Dialer {
    // The password stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dialer")
            .field("addr", &self.addr)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("connect_timeout", &self.connect_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("resp3", &self.resp3)
            .finish()
    }
}

/// A dialer aimed at no node yet (an empty address, which no connection reaches): the template
/// a caller that talks to many nodes fills in once and aims with [`Dialer::to`].
impl Default for Dialer {
    fn default() -> Self {
        Self::new("")
    }
}

impl Dialer {
    /// How long a node has to take a connection unless told otherwise.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
    /// How long a reply may take unless told otherwise.
    pub const IO_TIMEOUT: Duration = Duration::from_secs(60);

    /// The node at `addr` (`host:port`), no password, RESP2, the default timeouts.
    pub fn new(addr: impl ToString) -> Self {
        Self {
            addr: addr.to_string(),
            password: None,
            connect_timeout: Self::CONNECT_TIMEOUT,
            io_timeout: Some(Self::IO_TIMEOUT),
            resp3: false,
        }
    }

    /// The same dialer (password, timeouts, protocol) aimed at the node at `addr`: a caller that
    /// talks to many nodes builds one dialer, holding the password, and aims it at each.
    pub fn to(&self, addr: impl ToString) -> Self {
        Self {
            addr: addr.to_string(),
            ..self.clone()
        }
    }

    /// Authenticates every connection with `password`, if there is one.
    pub fn password(mut self, password: Option<&str>) -> Self {
        self.password = password.map(str::to_owned);
        self
    }

    /// How long the node has to take a connection.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long each reply (the handshake's included) may take; `None` waits for ever.
    pub fn io_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.io_timeout = timeout;
        self
    }

    /// Switches connections to RESP3 (`HELLO 3`, carrying the password when there is one).
    pub fn resp3(mut self) -> Self {
        self.resp3 = true;
        self
    }

    /// The node's address as given.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The commands that open a connection, and whether each is the password's.
    fn handshake(&self) -> Vec<(Vec<&[u8]>, bool)> {
        let mut steps = Vec::new();
        if self.resp3 {
            let mut hello: Vec<&[u8]> = vec![b"HELLO", b"3"];
            if let Some(p) = &self.password {
                hello.extend([b"AUTH".as_slice(), b"default", p.as_bytes()]);
            }
            steps.push((hello, self.password.is_some()));
        } else if let Some(p) = &self.password {
            steps.push((vec![b"AUTH".as_slice(), p.as_bytes()], true));
        }
        steps
    }

    /// What an error reply to a handshake command means.
    fn refused(&self, command: &[u8], auth: bool, message: String) -> ClientError {
        if auth {
            ClientError::Auth {
                addr: self.addr.clone(),
                message,
            }
        } else {
            ClientError::Refused {
                addr: self.addr.clone(),
                command: String::from_utf8_lossy(command).into_owned(),
                message,
            }
        }
    }

    fn io(&self, source: std::io::Error) -> ClientError {
        ClientError::Io {
            addr: self.addr.clone(),
            source,
        }
    }

    /// Opens a blocking connection, authenticated.
    pub fn connect(&self) -> Result<Client, ClientError> {
        let sock = self
            .addr
            .to_socket_addrs()
            .map_err(|e| self.io(e))?
            .next()
            .ok_or_else(|| self.io(std::io::Error::other("no address")))?;
        let stream = TcpStream::connect_timeout(&sock, self.connect_timeout).map_err(|e| {
            if e.kind() == std::io::ErrorKind::TimedOut {
                ClientError::Timeout {
                    addr: self.addr.clone(),
                    waited: Wait::Connect,
                    after: self.connect_timeout,
                }
            } else {
                self.io(e)
            }
        })?;
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(self.io_timeout)
            .map_err(|e| self.io(e))?;
        stream
            .set_write_timeout(self.io_timeout)
            .map_err(|e| self.io(e))?;
        let mut c = Client {
            addr: self.addr.clone(),
            stream,
            buf: Vec::new(),
            io_timeout: self.io_timeout,
        };
        for (command, auth) in self.handshake() {
            if let Frame::Error(message) = c.call(&command)? {
                return Err(self.refused(command[0], auth, message));
            }
        }
        Ok(c)
    }

    /// Opens an async connection, authenticated.
    pub async fn connect_async(&self) -> Result<AsyncClient, ClientError> {
        let stream = tokio::time::timeout(
            self.connect_timeout,
            tokio::net::TcpStream::connect(self.addr.as_str()),
        )
        .await
        .map_err(|_| ClientError::Timeout {
            addr: self.addr.clone(),
            waited: Wait::Connect,
            after: self.connect_timeout,
        })?
        .map_err(|e| self.io(e))?;
        let _ = stream.set_nodelay(true);
        let mut c = AsyncClient {
            addr: self.addr.clone(),
            stream,
            buf: BytesMut::new(),
            cursor: Cursor::default(),
            io_timeout: self.io_timeout,
            out: Vec::new(),
            reply_limits: Limits::default(),
        };
        for (command, auth) in self.handshake() {
            if let Frame::Error(message) = c.call(&command).await? {
                return Err(self.refused(command[0], auth, message));
            }
        }
        Ok(c)
    }
}

/// One blocking connection to a node.
#[derive(Debug)]
pub struct Client {
    addr: String,
    stream: TcpStream,
    buf: Vec<u8>,
    io_timeout: Option<Duration>,
}

impl Client {
    /// Connects to `addr` with the [`Dialer`]'s defaults and, with a `password`, authenticates:
    /// the short form of `Dialer::new(addr).password(password).connect()`.
    pub fn connect(addr: &str, password: Option<&str>) -> Result<Self, ClientError> {
        Dialer::new(addr).password(password).connect()
    }

    /// Sends one command and returns the next frame the node sends (an error reply is a
    /// `Frame::Error`).
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

    fn io(&self, source: std::io::Error) -> ClientError {
        // A socket timeout surfaces as WouldBlock on Unix and TimedOut elsewhere.
        match (source.kind(), self.io_timeout) {
            (std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut, Some(after)) => {
                ClientError::Timeout {
                    addr: self.addr.clone(),
                    waited: Wait::Reply,
                    after,
                }
            }
            _ => ClientError::Io {
                addr: self.addr.clone(),
                source,
            },
        }
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.stream.write_all(bytes).map_err(|e| self.io(e))
    }

    /// Reads the next frame.
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
            let n = self.stream.read(&mut chunk).map_err(|e| self.io(e))?;
            if n == 0 {
                return Err(ClientError::Closed(self.addr.clone()));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// One async connection to a node.
#[derive(Debug)]
pub struct AsyncClient {
    addr: String,
    stream: tokio::net::TcpStream,
    buf: BytesMut,
    cursor: Cursor,
    io_timeout: Option<Duration>,
    /// The bytes of the command being sent, kept between sends (see [`AsyncClient::send`]).
    out: Vec<u8>,
    /// What a reply may make this client hold ([`AsyncClient::limit_replies`]).
    reply_limits: Limits,
}

/// The send buffer an [`AsyncClient`] keeps between sends, at most: a slot move's batches of a
/// MiB reuse theirs (a fresh one each time was a page fault every 4 KiB of it); one larger
/// command does not pin its size for the connection's life.
const KEPT_SEND_BUFFER: usize = 4 << 20;

impl AsyncClient {
    /// The node's address as dialled.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends one command and returns its reply (an error reply is a `Frame::Error`), waiting as
    /// long as the dialer's I/O timeout. Pushes that come before the reply are skipped.
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Frame, ClientError> {
        match self.io_timeout {
            Some(t) => self.call_within(args, t).await,
            None => self.exchange(args).await,
        }
    }

    /// [`call`](Self::call), with the reply awaited for up to `timeout`. After a timeout the
    /// reply may still come: drop the connection rather than send on it again.
    pub async fn call_within(
        &mut self,
        args: &[&[u8]],
        timeout: Duration,
    ) -> Result<Frame, ClientError> {
        match tokio::time::timeout(timeout, self.exchange(args)).await {
            Ok(r) => r,
            Err(_) => Err(ClientError::Timeout {
                addr: self.addr.clone(),
                waited: Wait::Reply,
                after: timeout,
            }),
        }
    }

    async fn exchange(&mut self, args: &[&[u8]]) -> Result<Frame, ClientError> {
        self.send(args).await?;
        loop {
            match self.read().await? {
                Frame::Push(_) => {}
                f => return Ok(f),
            }
        }
    }

    /// Sends one command without waiting for anything back (a subscription, whose frames
    /// [`read`](Self::read) then takes).
    pub async fn send(&mut self, args: &[&[u8]]) -> Result<(), ClientError> {
        self.out.clear();
        encode(args, &mut self.out);
        let sent = self.stream.write_all(&self.out).await;
        if self.out.capacity() > KEPT_SEND_BUFFER {
            self.out = Vec::new();
        }
        sent.map_err(|source| ClientError::Io {
            addr: self.addr.clone(),
            source,
        })
    }

    /// Bounds what the node's replies may make this client hold (by default
    /// [`Limits::default`]'s, 512 MiB a bulk string): a caller that knows how large an answer
    /// can be says so, and a reply claiming more is a protocol error as soon as its length is
    /// in, before any of its bytes are buffered.
    pub fn limit_replies(&mut self, limits: Limits) {
        self.reply_limits = limits;
    }

    /// The next frame the node sends, pushes included, however long it takes. Cancel-safe: a
    /// `select!` that drops it loses no bytes.
    pub async fn read(&mut self) -> Result<Frame, ClientError> {
        let limits = self.reply_limits;
        loop {
            match self.cursor.parse(&self.buf, &limits) {
                Ok((frame, used)) => {
                    let _ = self.buf.split_to(used);
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
                .read_buf(&mut self.buf)
                .await
                .map_err(|source| ClientError::Io {
                    addr: self.addr.clone(),
                    source,
                })?;
            if n == 0 {
                return Err(ClientError::Closed(self.addr.clone()));
            }
        }
    }

    /// The socket and what has been read from it but not yet parsed (starting at a frame's
    /// first byte), for a caller that runs its own reader loop (a tier's pipelined connection
    /// to its parent).
    pub fn into_parts(self) -> (tokio::net::TcpStream, BytesMut) {
        (self.stream, self.buf)
    }
}
