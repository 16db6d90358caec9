//! The REST API. STUB.
