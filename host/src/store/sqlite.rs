//! The SQLite store (embedded default). STUB: replaced by the real implementation.
