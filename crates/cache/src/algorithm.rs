//! The trait every eviction algorithm implements, and what a request carries.

/// One access, as an algorithm sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Object id.
    pub key: u64,
    /// Object size in bytes.
    pub size: u32,
    /// Virtual time (request index) of this key's next request; [`NO_NEXT_ACCESS`] if none.
    /// Only Belady's MIN reads it.
    pub next_access: i64,
}

/// `next_access` of a key that is never requested again (libCacheSim's `INT64_MAX`).
pub const NO_NEXT_ACCESS: i64 = i64::MAX;

impl Request {
    /// A request with no future knowledge.
    pub fn new(key: u64, size: u32) -> Self {
        Self {
            key,
            size,
            next_access: NO_NEXT_ACCESS,
        }
    }
}

/// What the capacity counts: bytes, or objects (every object weighs 1, libCacheSim's
/// `ignore_obj_size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Units {
    /// Objects weigh their size.
    Bytes,
    /// Objects weigh 1.
    Objects,
}

impl Units {
    /// An object's weight against the capacity.
    #[inline]
    pub fn weight(self, size: u32) -> u64 {
        match self {
            Self::Bytes => u64::from(size),
            Self::Objects => 1,
        }
    }
}

/// An object that left the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evicted {
    /// Its key.
    pub key: u64,
    /// Its size in bytes.
    pub size: u32,
    /// The slot it held ([`Algorithm::slot`]), free again for another key.
    pub slot: u32,
}

/// An eviction algorithm: it owns the resident objects (and any ghosts) and decides the order in
/// which they leave. [`crate::Cache`] drives it the way libCacheSim's `cache_get_base` drives an
/// algorithm: `find`; on a miss, `can_insert`, then `evict` until the object fits, then `insert`.
///
/// Weights: every algorithm is built with a capacity and [`Units`]; `occupied` and all internal
/// sizing (sub-queue shares, ghost sizes) are in those units.
pub trait Algorithm: Send + std::fmt::Debug {
    /// The algorithm's registered name.
    fn name(&self) -> &'static str;

    /// Looks `req.key` up among resident objects. When `update` is true this is a real access:
    /// the algorithm records it (recency, frequency, ghost hits that shape the next insert) and
    /// the object keeps the size it was inserted with, as in libCacheSim. When false, no state
    /// changes. Returns the resident object's size.
    fn find(&mut self, req: &Request, update: bool) -> Option<u32>;

    /// Whether `req` may be admitted at all (e.g. not larger than the cache, or than S3-FIFO's
    /// small queue). Called only for non-resident keys.
    fn can_insert(&self, req: &Request) -> bool;

    /// Inserts a non-resident object. The caller has made room: `occupied() + weight <= capacity`.
    /// Returns false if the algorithm declined after all (S3-FIFO: an object exactly the size of
    /// its small queue).
    fn insert(&mut self, req: &Request) -> bool;

    /// Performs one eviction step and returns the object that left, if one did. A step may only
    /// reorganise (S3-FIFO moving small-queue objects to main) and return `None`; repeated calls
    /// on a non-empty cache always make progress. `req` is the request being admitted.
    fn evict(&mut self, req: &Request) -> Option<Evicted>;

    /// The slot of a resident object: a number below the count of objects and ghosts the
    /// algorithm has held at once, the same from the object's insertion until it leaves (hits,
    /// moves between the algorithm's queues and resizes keep it), and reported in [`Evicted`] when
    /// it leaves. A cache that keeps values beside the algorithm (the service's memory tier)
    /// indexes them by it, so a key is hashed and looked up once, by the algorithm. `None` for
    /// a key that is not resident (a ghost included). No state changes.
    fn slot(&self, key: u64) -> Option<u32>;

    /// Removes a resident object; returns its size. Ghost entries of the key are dropped too.
    fn remove(&mut self, key: u64) -> Option<u32>;

    /// Resident weight, in the algorithm's units.
    fn occupied(&self) -> u64;

    /// Resident objects.
    fn len(&self) -> u64;

    /// True when nothing is resident.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resident bytes (whatever the units).
    fn bytes(&self) -> u64;

    /// The capacity the algorithm plans with. Changing it re-derives sub-queue sizes; it does not
    /// evict (the cache does that, through `evict`).
    fn set_capacity(&mut self, capacity: u64);

    /// Heap bytes the algorithm's structures have allocated (for per-object overhead reports).
    fn allocated_bytes(&self) -> usize;
}
