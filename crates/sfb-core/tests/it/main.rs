//! All of this crate's integration tests in one binary, one module per file: the test
//! build links the dependency stack once instead of once per file (`cargo test --test it`;
//! filter by module, e.g. `cargo test --test it peer_loss::`).

mod engine;
mod fms;
mod kernel;
mod optim;
mod parts;
mod resilience;
