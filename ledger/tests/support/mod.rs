//! What the ledger's integration tests share.

pub mod model;
