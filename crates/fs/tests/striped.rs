//! The striped cache without mounting: three cache servers on loopback and three clients (the
//! core each mount runs, with its servers set), over one backing directory.
//!
//! - Random operations from the three clients on a few shared files (writes at unaligned
//!   offsets across stripe boundaries, reads, truncations, renames, unlinks, fsyncs) against one
//!   model: every read and size from every client matches it, and after the servers stop the
//!   backing directory holds exactly the model.
//! - A server killed (its cache dropped as `kill -9` leaves it) with fsync'ed stripes: the next
//!   server over its cache directory writes them back.
//! - A server that stops answering: the client gets EIO within its timeout.
//! - A connection without the secret reaches nothing; with it, a request for another user is
//!   checked against the backing file's permissions; paths out of the backing directory are
//!   refused.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use pliant_fs::striped::{ClientOptions, Remote, ServerOptions, StripeServer};
use pliant_fs::{FsCache, FsConfig, FsyncMode, Handle, SystemClock};

const MIB: u64 = 1 << 20;
const SECRET: &str = "test-secret-1f0c";

struct Server {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<StripeServer>,
    addr: String,
    recovered_bytes: u64,
}

fn server_config(backing: &Path, cache: &Path) -> FsConfig {
    let mut c = FsConfig::new(backing.into(), cache.into(), 64 * MIB);
    c.writeback_threads = 2;
    c.fsync = FsyncMode::Cache;
    c
}

fn start_server(backing: &Path, cache: &Path) -> Server {
    start_server_at(backing, cache, "127.0.0.1:0")
}

/// `n` servers over `backing`, each with its cache in `dirs/s<i>`, and their addresses.
fn start_servers(backing: &Path, dirs: &Path, n: usize) -> (Vec<Server>, Vec<String>) {
    let servers: Vec<Server> = (0..n)
        .map(|i| start_server(backing, &dirs.join(format!("s{i}"))))
        .collect();
    let addrs = servers.iter().map(|s| s.addr.clone()).collect();
    (servers, addrs)
}

fn start_server_at(backing: &Path, cache: &Path, listen: &str) -> Server {
    let (server, recovery) = StripeServer::bind(ServerOptions {
        cache: server_config(backing, cache),
        listen: listen.parse().expect("striped test step"),
        secret: SECRET.into(),
        dirty_list: Some(cache.with_extension("dirty")),
    })
    .expect("server");
    let addr = server.local_addr().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let thread = std::thread::spawn(move || {
        server.serve(&s);
        server
    });
    Server {
        stop,
        thread,
        addr,
        recovered_bytes: recovery.bytes,
    }
}

impl Server {
    fn stop(self) -> StripeServer {
        self.stop.store(true, Relaxed);
        self.thread.join().expect("server thread")
    }
}

fn client(backing: &Path, dir: &Path, servers: &[String], timeout: Duration) -> FsCache {
    let (fs, _) = FsCache::new(
        FsConfig::new(backing.into(), dir.into(), 64 * MIB),
        Arc::new(SystemClock),
    )
    .expect("client cache");
    let remote = Remote::connect(&ClientOptions {
        servers: servers.to_vec(),
        secret: SECRET.into(),
        stripe: MIB,
        timeout,
    })
    .expect("connect");
    fs.set_remote(Arc::new(remote)).expect("remote");
    fs
}

/// The test's only randomness, seeded.
struct Rng(rand::rngs::StdRng);
impl Rng {
    fn new(seed: u64) -> Self {
        Self(rand::SeedableRng::seed_from_u64(seed))
    }
    fn next(&mut self) -> u64 {
        rand::RngExt::random(&mut self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        rand::RngExt::random_range(&mut self.0, 0..n)
    }
}

const NAMES: [&str; 4] = ["a", "b", "d/c", "d/e"];

struct World {
    backing: tempfile::TempDir,
    _dirs: tempfile::TempDir,
    servers: Vec<Server>,
    clients: Vec<FsCache>,
    /// Open handles: (client, name) → handle.
    open: BTreeMap<(usize, usize), Handle>,
    model: BTreeMap<usize, Vec<u8>>,
}

impl World {
    fn new() -> Self {
        let backing = tempfile::tempdir().expect("striped test step");
        std::fs::create_dir(backing.path().join("d")).expect("striped test step");
        let dirs = tempfile::tempdir().expect("striped test step");
        let (servers, addrs) = start_servers(backing.path(), dirs.path(), 3);
        let clients = (0..3)
            .map(|i| {
                client(
                    backing.path(),
                    &dirs.path().join(format!("c{i}")),
                    &addrs,
                    Duration::from_secs(20),
                )
            })
            .collect();
        Self {
            backing,
            _dirs: dirs,
            servers,
            clients,
            open: BTreeMap::new(),
            model: BTreeMap::new(),
        }
    }

    fn handle(&mut self, c: usize, f: usize) -> Handle {
        if let Some(h) = self.open.get(&(c, f)) {
            return h.clone();
        }
        let h = self.clients[c].open(Path::new(NAMES[f])).expect("open");
        self.open.insert((c, f), h.clone());
        h
    }

    fn close(&mut self, f: usize) {
        let keys: Vec<_> = self.open.keys().filter(|k| k.1 == f).cloned().collect();
        for k in keys {
            let h = self.open.remove(&k).expect("striped test step");
            self.clients[k.0].release(h);
        }
    }

    fn step(&mut self, rng: &mut Rng, log: &mut Vec<String>) {
        let c = rng.below(3) as usize;
        let f = rng.below(NAMES.len() as u64) as usize;
        let name = Path::new(NAMES[f]);
        let exists = self.model.contains_key(&f);
        match rng.below(10) {
            0 if !exists => {
                log.push(format!("client {c} creates {}", NAMES[f]));
                let h = self.clients[c].create(name, 0o644, None).expect("create");
                self.open.insert((c, f), h);
                self.model.insert(f, Vec::new());
            }
            0..=3 if exists => {
                let offset = rng.below(5 * MIB);
                let len = 1 + rng.below(MIB + MIB / 2);
                let seed = rng.next() as u8;
                let data: Vec<u8> = (0..len)
                    .map(|i| seed.wrapping_add((i % 251) as u8))
                    .collect();
                log.push(format!(
                    "client {c} writes {len} at {offset} of {}",
                    NAMES[f]
                ));
                let h = self.handle(c, f);
                let n = self.clients[c].write(&h, offset, &data).expect("write");
                assert_eq!(n as u64, len);
                let m = self.model.get_mut(&f).expect("striped test step");
                let end = (offset + len) as usize;
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[offset as usize..end].copy_from_slice(&data);
            }
            4..=6 if exists => {
                let m = &self.model[&f];
                let offset = rng.below(m.len() as u64 + MIB);
                let len = 1 + rng.below(2 * MIB) as u32;
                log.push(format!(
                    "client {c} reads {len} at {offset} of {}",
                    NAMES[f]
                ));
                let h = self.handle(c, f);
                let got = self.clients[c].read(&h, offset, len).expect("read");
                let m = &self.model[&f];
                let from = (offset as usize).min(m.len());
                let to = ((offset + len as u64) as usize).min(m.len());
                assert!(
                    got == m[from..to],
                    "client {c} read {} at {offset} of {}: {} bytes, expected {}; steps:\n{}",
                    len,
                    NAMES[f],
                    got.len(),
                    to - from,
                    log.join("\n")
                );
                let size = self.clients[c].getattr(name).expect("stat").size;
                assert_eq!(
                    size,
                    m.len() as u64,
                    "size of {}:\n{}",
                    NAMES[f],
                    log.join("\n")
                );
            }
            7 if exists => {
                let size = rng.below(4 * MIB);
                log.push(format!("client {c} truncates {} to {size}", NAMES[f]));
                self.clients[c].truncate(name, size).expect("truncate");
                self.model
                    .get_mut(&f)
                    .expect("striped test step")
                    .resize(size as usize, 0);
            }
            8 if exists => {
                log.push(format!("client {c} fsyncs {}", NAMES[f]));
                let h = self.handle(c, f);
                self.clients[c].fsync(&h).expect("fsync");
            }
            9 if exists => {
                let to = rng.below(NAMES.len() as u64) as usize;
                self.close(f);
                if rng.below(2) == 0 || to == f {
                    log.push(format!("client {c} unlinks {}", NAMES[f]));
                    self.clients[c].unlink(name).expect("unlink");
                    self.model.remove(&f);
                } else {
                    log.push(format!("client {c} renames {} to {}", NAMES[f], NAMES[to]));
                    self.close(to);
                    self.clients[c]
                        .rename(name, Path::new(NAMES[to]), 0)
                        .expect("rename");
                    let m = self.model.remove(&f).expect("striped test step");
                    self.model.insert(to, m);
                }
            }
            _ => {}
        }
    }

    /// Stops the clients and the servers (which write everything back) and checks the backing
    /// directory against the model.
    fn finish(mut self, log: &[String]) {
        for k in self.open.keys().cloned().collect::<Vec<_>>() {
            let h = self.open.remove(&k).expect("striped test step");
            self.clients[k.0].release(h);
        }
        for c in std::mem::take(&mut self.clients) {
            c.shutdown(false, &mut |_| {}).expect("client shutdown");
        }
        for s in std::mem::take(&mut self.servers) {
            s.stop().shutdown(&mut |_| {}).expect("server shutdown");
        }
        for (f, name) in NAMES.iter().enumerate() {
            let p = self.backing.path().join(name);
            match self.model.get(&f) {
                Some(m) => {
                    let got = std::fs::read(&p).expect("backing file");
                    assert!(
                        got == *m,
                        "backing {name}: {} bytes, expected {}; steps:\n{}",
                        got.len(),
                        m.len(),
                        log.join("\n")
                    );
                }
                None => assert!(!p.exists(), "{name} should be gone"),
            }
        }
    }
}

#[test]
fn three_clients_on_three_servers_agree_with_one_model_and_the_backing_directory_ends_as_it() {
    for seed in [0x5eed_0001u64, 0x5eed_0002, 0x5eed_0003] {
        let mut w = World::new();
        let mut rng = Rng::new(seed);
        let mut log = Vec::new();
        for _ in 0..150 {
            w.step(&mut rng, &mut log);
        }
        assert!(
            log.iter().filter(|l| l.contains("writes")).count() > 20,
            "too few writes to mean anything"
        );
        w.finish(&log);
    }
}

#[test]
fn a_server_killed_with_fsynced_stripes_writes_them_back_when_started_again() {
    let backing = tempfile::tempdir().expect("striped test step");
    let dirs = tempfile::tempdir().expect("striped test step");
    let cache = |i: usize| dirs.path().join(format!("s{i}"));
    let servers: Vec<Server> = (0..3)
        .map(|i| start_server(backing.path(), &cache(i)))
        .collect();
    let addrs: Vec<String> = servers.iter().map(|s| s.addr.clone()).collect();
    let c = client(
        backing.path(),
        &dirs.path().join("c"),
        &addrs,
        Duration::from_secs(20),
    );
    let data: Vec<u8> = (0..6 * MIB).map(|i| (i * 7 % 253) as u8).collect();
    let h = c
        .create(Path::new("f"), 0o644, None)
        .expect("striped test step");
    c.write(&h, 0, &data).expect("striped test step");
    c.fsync(&h).expect("striped test step");
    // Nothing written back yet: the data is only in the servers' caches.
    assert!(
        std::fs::metadata(backing.path().join("f"))
            .expect("striped test step")
            .len()
            < data.len() as u64
    );
    // Each server keeps the names of the files it holds unwritten data of, beside its storage.
    let listed = |i: usize| -> Vec<String> {
        std::fs::read(cache(i).with_extension("dirty"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while (0..3).any(|i| listed(i) != vec!["f".to_string()]) {
        assert!(Instant::now() < deadline, "the servers never listed f");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut servers = servers;
    let victim = servers.remove(1);
    victim.stop().crash();
    let again = start_server(backing.path(), &cache(1));
    // The restarted server wrote its journaled stripes back at start: two of the six.
    assert_eq!(again.recovered_bytes, 2 * MIB);
    for s in servers {
        s.stop().shutdown(&mut |_| {}).expect("striped test step");
    }
    again
        .stop()
        .shutdown(&mut |_| {})
        .expect("striped test step");
    c.release(h);
    let got = std::fs::read(backing.path().join("f")).expect("striped test step");
    assert!(got == data, "backing file differs after the kill");
    for i in 0..3 {
        assert!(
            listed(i).is_empty(),
            "server {i} still lists files after writing all back"
        );
    }
}

#[test]
fn a_server_that_stops_answering_gives_eio_within_the_timeout() {
    let backing = tempfile::tempdir().expect("striped test step");
    let dirs = tempfile::tempdir().expect("striped test step");
    let (servers, addrs) = start_servers(backing.path(), dirs.path(), 2);
    let timeout = Duration::from_secs(1);
    let c = client(backing.path(), &dirs.path().join("c"), &addrs, timeout);
    let h = c
        .create(Path::new("f"), 0o644, None)
        .expect("striped test step");
    c.write(&h, 0, &vec![1u8; 2 * MIB as usize])
        .expect("striped test step");
    let mut servers = servers;
    // Stopped serving but still bound: a connection is accepted by the kernel and never
    // answered, the worst case for a client.
    let silent = servers.remove(0).stop();
    let started = Instant::now();
    let mut errors = Vec::new();
    for offset in [0, MIB] {
        if let Err(e) = c.read(&h, offset, 4096) {
            errors.push(e.raw_os_error());
        }
    }
    let waited = started.elapsed();
    assert_eq!(
        errors,
        vec![Some(nix::libc::EIO)],
        "one of the two stripes is on the silent server"
    );
    assert!(waited < timeout * 3, "waited {waited:?}");
    c.release(h);
    drop(silent);
    for s in servers {
        s.stop().shutdown(&mut |_| {}).expect("striped test step");
    }
}

#[test]
fn without_the_secret_nothing_and_with_it_only_what_the_backing_permissions_allow() {
    use pliant_proto::{Client, Frame};
    let backing = tempfile::tempdir().expect("striped test step");
    let dirs = tempfile::tempdir().expect("striped test step");
    let secret_data = b"only the owner reads this";
    std::fs::write(backing.path().join("private"), secret_data).expect("striped test step");
    std::fs::set_permissions(
        backing.path().join("private"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("striped test step");
    let owner = nix::unistd::geteuid().as_raw();
    let ino = std::os::unix::fs::MetadataExt::ino(
        &std::fs::metadata(backing.path().join("private")).expect("striped test step"),
    )
    .to_string();
    let stranger = owner.wrapping_add(4242).to_string();
    let s = start_server(backing.path(), &dirs.path().join("s"));
    let read_as = |uid: &str| -> Vec<Vec<u8>> {
        vec![
            b"FS.READ".to_vec(),
            uid.as_bytes().to_vec(),
            uid.as_bytes().to_vec(),
            Vec::new(),
            b"private".to_vec(),
            ino.as_bytes().to_vec(),
            b"0".to_vec(),
            b"100".to_vec(),
        ]
    };
    let call = |c: &mut Client, args: Vec<Vec<u8>>| {
        let a: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        c.call(&a).expect("striped test step")
    };
    let is_err = |f: &Frame, prefix: &str| matches!(f, Frame::Error(t) if t.starts_with(prefix));

    // No AUTH: refused, and the server never read the file for it.
    let mut anon = Client::connect(&s.addr, None).expect("striped test step");
    let r = call(&mut anon, read_as(&owner.to_string()));
    assert!(is_err(&r, "NOAUTH"), "{r:?}");
    // A wrong secret.
    assert!(Client::connect(&s.addr, Some("not-the-secret")).is_err());
    // A request array bigger than an unauthenticated client may claim is cut off at its header.
    let mut anon = Client::connect(&s.addr, None).expect("striped test step");
    anon.send_raw(b"*2\r\n$20000\r\n")
        .expect("striped test step");
    let r = anon.read().expect("striped test step");
    assert!(
        matches!(&r, Frame::Error(t) if t.contains("unauthenticated")),
        "{r:?}"
    );

    let mut c = Client::connect(&s.addr, Some(SECRET)).expect("striped test step");
    // A flood of connections that never authenticate fills the room for those, not the room
    // of the authenticated: one more waiting closes the one that waited longest, a new
    // connection with the secret is still served, and so is the one already served.
    let max = pliant_fs::striped::server::MAX_UNAUTHENTICATED;
    let mut flood: Vec<std::net::TcpStream> = (0..max)
        .map(|_| std::net::TcpStream::connect(&s.addr).expect("connect"))
        .collect();
    for f in &flood {
        f.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
    }
    // Each connection is in the room once the server answers it (accept is polled).
    for f in &mut flood {
        std::io::Write::write_all(f, b"PING\r\n").expect("ping");
        let mut answer = [0u8; 64];
        let n = std::io::Read::read(f, &mut answer).expect("an answer before the room is full");
        assert!(String::from_utf8_lossy(&answer[..n]).starts_with("-NOAUTH"));
    }
    let extra = std::net::TcpStream::connect(&s.addr).expect("connect");
    let mut answer = [0u8; 64];
    let closed = std::io::Read::read(&mut flood[0], &mut answer);
    assert!(
        matches!(&closed, Ok(0))
            || matches!(&closed, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "the connection that waited longest was not closed: {closed:?}"
    );
    let mut fresh = Client::connect(&s.addr, Some(SECRET)).expect("a mount's new connection");
    assert_eq!(
        call(&mut fresh, vec![b"PING".to_vec()]),
        Frame::Simple("PONG".into())
    );
    let r = call(&mut c, vec![b"PING".to_vec()]);
    assert_eq!(r, Frame::Simple("PONG".into()));
    drop((flood, extra));
    // The owner reads it; another user gets EACCES.
    let r = call(&mut c, read_as(&owner.to_string()));
    assert_eq!(r, Frame::bulk(&secret_data[..]));
    let r = call(&mut c, read_as(&stranger));
    assert!(
        is_err(&r, &format!("ERRNO {} ", nix::libc::EACCES)),
        "another user read a 0600 file: {r:?}"
    );
    // Writes too.
    let mut w = read_as(&stranger);
    w[0] = b"FS.WRITE".to_vec();
    w[7] = b"overwritten".to_vec();
    let r = call(&mut c, w);
    assert!(
        is_err(&r, &format!("ERRNO {} ", nix::libc::EACCES)),
        "{r:?}"
    );
    // A name that leads to another file than the mount opened: ESTALE, not that file's data.
    let mut stale = read_as(&owner.to_string());
    stale[5] = b"1".to_vec();
    let r = call(&mut c, stale);
    assert!(
        is_err(&r, &format!("ERRNO {} ", nix::libc::ESTALE)),
        "{r:?}"
    );
    // Out of the backing directory, however it is spelt.
    for p in ["../outside", "/etc/passwd", "d/../../x"] {
        let mut a = read_as(&owner.to_string());
        a[4] = p.as_bytes().to_vec();
        let r = call(&mut c, a);
        assert!(is_err(&r, "ERR "), "{p}: {r:?}");
    }
    // An unlink notice for a file that is still there is refused (it would drop its data).
    let r = call(
        &mut c,
        vec![
            b"FS.UNLINKED".to_vec(),
            owner.to_string().into_bytes(),
            owner.to_string().into_bytes(),
            Vec::new(),
            b"private".to_vec(),
        ],
    );
    assert!(
        is_err(&r, &format!("ERRNO {} ", nix::libc::EEXIST)),
        "{r:?}"
    );
    assert_eq!(
        std::fs::read(backing.path().join("private")).expect("striped test step"),
        secret_data
    );
    s.stop().shutdown(&mut |_| {}).expect("striped test step");
}

/// `fcntl` locks through two clients: the second is refused a range the first holds, sees who
/// holds it, waits for it with F_SETLKW, and gets it once the first unlocks; a client that goes
/// (its mount unmounted) leaves no lock behind.
#[test]
fn byte_range_locks_exclude_across_clients_and_go_with_their_mount() {
    use nix::libc::{F_RDLCK, F_UNLCK, F_WRLCK};
    let backing = tempfile::tempdir().expect("striped test step");
    let dirs = tempfile::tempdir().expect("striped test step");
    let (servers, addrs) = start_servers(backing.path(), dirs.path(), 3);
    let timeout = Duration::from_secs(20);
    let a = client(backing.path(), &dirs.path().join("a"), &addrs, timeout);
    let b = Arc::new(client(
        backing.path(),
        &dirs.path().join("b"),
        &addrs,
        timeout,
    ));
    let ha = a
        .create(Path::new("shared"), 0o644, None)
        .expect("striped test step");
    let hb = b.open(Path::new("shared")).expect("striped test step");
    a.set_lock(&ha, 1, F_WRLCK, 0, 99, 111, false)
        .expect("striped test step");
    let e = b
        .set_lock(&hb, 1, F_RDLCK, 50, 60, 222, false)
        .expect_err("held by the other client");
    assert_eq!(e.raw_os_error(), Some(nix::libc::EAGAIN));
    assert_eq!(
        b.get_lock(&hb, 1, F_WRLCK, 0, 10)
            .expect("striped test step"),
        Some((F_WRLCK, 0, 99, 111))
    );
    // Past the held range, and a shared lock beside another shared one: free.
    b.set_lock(&hb, 1, F_RDLCK, 100, u64::MAX, 222, false)
        .expect("striped test step");
    // F_SETLKW waits for the holder.
    let waiter = {
        let (b, hb) = (b.clone(), hb.clone());
        std::thread::spawn(move || {
            let t = Instant::now();
            b.set_lock(&hb, 1, F_WRLCK, 10, 20, 222, true)
                .expect("granted once free");
            t.elapsed()
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !waiter.is_finished(),
        "F_SETLKW returned while the lock was held"
    );
    a.set_lock(&ha, 1, F_UNLCK, 0, u64::MAX, 111, false)
        .expect("striped test step");
    let waited = waiter.join().expect("waiter");
    assert!(waited >= Duration::from_millis(500), "{waited:?}");
    // b's locks go with its mount: a takes the whole file at once.
    b.release(hb);
    let b = Arc::try_unwrap(b).unwrap_or_else(|_| panic!("b still shared"));
    b.shutdown(false, &mut |_| {}).expect("striped test step");
    a.set_lock(&ha, 1, F_WRLCK, 0, u64::MAX, 111, false)
        .expect("b's locks went with its mount");
    a.release(ha);
    a.shutdown(false, &mut |_| {}).expect("striped test step");
    for s in servers {
        s.stop().shutdown(&mut |_| {}).expect("striped test step");
    }
}

/// A name unlinked and made again behind the servers' back (a mount that died between its
/// unlink and its notice, or a change in the pfs outside the mounts): what is written under the
/// name after it reaches the new file, not the old one's entry (an audit found fsync'ed writes
/// lost in the unlinked inode).
#[test]
fn a_name_made_again_behind_the_servers_back_takes_the_new_files_writes() {
    let backing = tempfile::tempdir().expect("striped test step");
    let dirs = tempfile::tempdir().expect("striped test step");
    let (servers, addrs) = start_servers(backing.path(), dirs.path(), 2);
    let c = client(
        backing.path(),
        &dirs.path().join("c"),
        &addrs,
        Duration::from_secs(20),
    );
    let old = c
        .create(Path::new("f"), 0o644, None)
        .expect("striped test step");
    c.write(&old, 0, &vec![1u8; 3 * MIB as usize])
        .expect("striped test step");
    c.fsync(&old).expect("striped test step");
    c.release(old);
    // Behind the servers' back: the name now leads to a new, empty file.
    std::fs::remove_file(backing.path().join("f")).expect("striped test step");
    std::fs::write(backing.path().join("f"), b"").expect("striped test step");
    let new = c.open(Path::new("f")).expect("striped test step");
    let data: Vec<u8> = (0..3 * MIB).map(|i| (i % 241) as u8).collect();
    c.write(&new, 0, &data).expect("striped test step");
    c.fsync(&new).expect("striped test step");
    assert!(c.read(&new, 0, data.len() as u32).expect("read") == data);
    c.release(new);
    c.shutdown(false, &mut |_| {}).expect("striped test step");
    for s in servers {
        s.stop().shutdown(&mut |_| {}).expect("striped test step");
    }
    let got = std::fs::read(backing.path().join("f")).expect("striped test step");
    assert!(
        got == data,
        "the new file holds {} bytes, not what was written to it",
        got.len()
    );
}

/// A server killed and started again on its address: the mount's kept connections to the old
/// one are dead, and its next requests dial again rather than give the application EIO (a
/// bench found one EIO per dead kept connection).
#[test]
fn a_server_started_again_on_its_address_is_used_without_eio() {
    let backing = tempfile::tempdir().expect("striped test step");
    let dirs = tempfile::tempdir().expect("striped test step");
    let cache = dirs.path().join("s0");
    let first = start_server(backing.path(), &cache);
    let addr = first.addr.clone();
    let c = client(
        backing.path(),
        &dirs.path().join("c"),
        std::slice::from_ref(&addr),
        Duration::from_secs(20),
    );
    let h = c
        .create(Path::new("f"), 0o644, None)
        .expect("striped test step");
    // Several requests at once, so the mount keeps several connections.
    std::thread::scope(|s| {
        for k in 0..4u64 {
            let (c, h) = (&c, &h);
            s.spawn(move || {
                c.write(h, k * MIB, &vec![k as u8; MIB as usize])
                    .expect("striped test step")
            });
        }
    });
    c.fsync(&h).expect("striped test step");
    first.stop().crash();
    let again = start_server_at(backing.path(), &cache, &addr);
    for k in 0..8u64 {
        c.write(&h, k * 4096, b"after the restart")
            .unwrap_or_else(|e| panic!("write {k} after the restart: {e}"));
    }
    c.release(h);
    c.shutdown(false, &mut |_| {}).expect("striped test step");
    again
        .stop()
        .shutdown(&mut |_| {})
        .expect("striped test step");
}

/// A client that never authenticates and never reads what it is sent holds no server thread:
/// its connection closes after a few refusals, and the server stops at once (an audit found a
/// stop that waited for such a client for ever).
#[test]
fn a_client_that_floods_without_the_secret_and_reads_nothing_cannot_hold_the_server() {
    let backing = tempfile::tempdir().expect("striped test step");
    let dirs = tempfile::tempdir().expect("striped test step");
    let s = start_server(backing.path(), &dirs.path().join("s"));
    let mut sock = std::net::TcpStream::connect(&s.addr).expect("connect");
    sock.set_write_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let flood = b"X\r\n".repeat(1_600_000);
    // The server stops reading once it has closed the connection: the rest may not go.
    let _ = std::io::Write::write_all(&mut sock, &flood);
    let started = Instant::now();
    s.stop().shutdown(&mut |_| {}).expect("striped test step");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the stop waited {:?} for a client that reads nothing",
        started.elapsed()
    );
    drop(sock);
}
