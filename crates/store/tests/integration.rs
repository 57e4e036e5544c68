//! The integration tests of `store`, as one binary (the workspace's convention: each test binary
//! links the whole dependency tree). Each module is one subject.

mod behind;
mod contract;
mod dir;
mod faults;
