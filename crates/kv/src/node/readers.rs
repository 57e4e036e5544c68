//! The threads that read the store for misses, at the lowest CPU priority.
//!
//! A miss read off the keyspace lock ([`super::read_ahead`]) still takes CPU: the store's index
//! and block lookups, a block's decompression, the system calls of a read that leaves the page
//! cache (measured: about 40 us of the node's CPU a read from a slow file system). On a busy
//! node those threads compete with the one that serves every client, and the scheduler shares a
//! core fairly among them: five clients reading the store took up to five sixths of the core
//! the in-memory GETs were served on, whose p99 rose to 2.96x its value alone
//! (`tools/bench/store_miss_p99.sh`). So reads run on threads of their own at nice 19, the
//! lowest priority: they get the CPU the event loop leaves, and a small share (a weight of 15
//! against the loop's 1,024) when it leaves none, so they are slowed, never stopped. Measured
//! on the same run: nice 19 keeps the in-memory GETs' p99 at 1.44x its value alone while the
//! store readers get 3,700 reads/s; nice 10, 2.03x and 8,400 reads/s; nice 0 (the shared
//! blocking pool), 2.96x and 8,700 (docs/benchmarks.md, serve-store-miss-p99-30b). Their own
//! pool, not tokio's shared one: a thread's priority cannot be raised again without privilege,
//! and the shared pool also runs group commit's fsyncs, which must not wait for the CPU.

/// The nice value of the reader threads (see the module doc): the lowest there is.
pub(crate) const READER_NICE: i32 = 19;

/// A pool of reader threads (see the module doc).
#[derive(Debug)]
pub(crate) struct Readers {
    /// A runtime used only for its blocking pool: its threads start at [`READER_NICE`]. Taken
    /// on drop, to be shut down without waiting (a runtime dropped on an async thread panics).
    runtime: Option<tokio::runtime::Runtime>,
    /// The runtime's handle, what reads are spawned through.
    handle: tokio::runtime::Handle,
}

impl Readers {
    /// The pool; `None` if its runtime could not be built (the caller reads on the shared
    /// blocking pool then, as before).
    pub(crate) fn new() -> Option<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .thread_name("pliant-store-read")
            .on_thread_start(lower_priority)
            .build()
            .map_err(|e| tracing::warn!("store readers: no pool of their own: {e}"))
            .ok()?;
        Some(Self {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
        })
    }

    /// Runs `read` on a reader thread.
    pub(crate) fn spawn<T: Send + 'static>(
        &self,
        read: impl FnOnce() -> T + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        self.handle.spawn_blocking(read)
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Lowers the calling thread's CPU priority to [`READER_NICE`]; a failure leaves it as it was
/// (reads are then only as fast to yield as before), said once in the log.
fn lower_priority() {
    // On Linux the nice value is a thread's own, and `who == 0` names the calling thread.
    // SAFETY: setpriority takes integers only and touches no memory of this process.
    #[allow(unsafe_code)]
    let done = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, READER_NICE) };
    if done != 0 {
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            tracing::warn!(
                "store readers keep their priority: setpriority: {}",
                std::io::Error::last_os_error()
            );
        });
    }
}

/// The calling thread's nice value (for the tests).
#[cfg(test)]
pub(crate) fn nice() -> i32 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc/thread-self/stat");
    // The fields after the command name (which may hold spaces), from its closing parenthesis:
    // state is the 3rd field of the line, nice the 19th.
    let rest = &stat[stat.rfind(')').expect("a command name") + 2..];
    rest.split(' ')
        .nth(16)
        .and_then(|n| n.parse().ok())
        .expect("a nice value")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bug: store reads for misses ran on tokio's shared blocking pool at the priority of
    /// the thread that serves every client, so five clients reading a slow store took most of
    /// its core and the in-memory GETs' p99 rose to 2.96x. They run at nice 19 now, on threads
    /// of their own; the shared pool keeps its priority (group commit's fsyncs run there).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn store_reads_run_at_the_lowest_priority_and_the_shared_pool_keeps_its_own() {
        // Whatever the test runs at (`nice cargo test`), the shared pool's threads inherit it.
        let own = nice();
        let readers = Readers::new().expect("a reader pool");
        let reader = readers.spawn(nice).await.expect("read");
        assert_eq!(reader, READER_NICE);
        let shared = tokio::task::spawn_blocking(nice).await.expect("ran");
        assert_eq!(shared, own, "the shared blocking pool is not lowered");
    }
}
