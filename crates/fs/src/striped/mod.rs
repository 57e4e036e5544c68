//! One cache for the whole job (DataWarp's `access_mode=striped`): cache servers hold the
//! job's files in stripes, and every compute node's mount sends each stripe's reads and writes
//! to the one server that owns it.
//!
//! - [`layout`]: which server owns which stripe (a hash of the file's inode picks the first,
//!   the rest go round the servers).
//! - [`wire`]: the requests, as RESP commands over the protocol crate's frames and client.
//! - [`server`]: a cache server: an [`FsCache`](crate::FsCache) over the backing directory
//!   that holds its stripes, journals them and writes them back; every request authenticated
//!   and checked against the backing file's permissions for the uid it carries.
//! - [`client`]: a mount's side: [`Remote`] cuts requests at stripe boundaries and sends
//!   each piece to its owner; size changes and renames reach every server.
//!
//! Coherence: a stripe has one owner, so a write acknowledged to one mount is what every later
//! read from any mount gets; a striped mount keeps nothing in the kernel's page cache
//! (`direct_io`), so no mount holds a copy another can make stale. Metadata is the backing
//! directory's, as on one node: every mount makes names there directly, and sizes and times
//! are corrected for data still only in a server.

pub mod client;
pub mod layout;
pub mod locks;
pub mod server;
pub mod wire;

pub use client::{ClientOptions, Remote, RemoteError};
pub use layout::{Layout, LayoutError};
pub use server::{ServerError, ServerOptions, StripeServer};
