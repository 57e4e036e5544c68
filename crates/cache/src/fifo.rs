//! FIFO: evict the oldest inserted object; hits change nothing.
//!
//! libCacheSim semantics (`FIFO.c`): a miss inserts at the head; a hit leaves the queue as it is
//! and the object keeps its original size; eviction takes the tail. An object heavier than the
//! whole cache is never admitted. The implementation is LRU's queue without promotion.

/// First in, first out.
pub type Fifo = crate::lru::Queue<false>;
