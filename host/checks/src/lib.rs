//! Checks of the repository itself, run by `cargo test` like any other test: the docs name
//! only paths and modules that exist ([`docs`]). They read the tree from disk and link
//! nothing of slotd, so they cost no rebuild of the service. And no file of a crate uses a
//! file that uses it back ([`circles`]).

pub mod circles;
pub mod docs;
pub mod tree;
