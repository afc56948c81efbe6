//! All of this crate's integration tests in one binary, one module per file: the test
//! build links the dependency stack once instead of once per file (`cargo test --test it`;
//! filter by module, e.g. `cargo test --test it peer_loss::`).

mod app;
mod bench_cli;
mod checkpoints;
mod common;
mod compress;
mod data_scale;
mod exits;
mod flood;
mod hand_run;
mod hostile_cli;
mod hostile_data;
mod memory;
mod models_cli;
mod netns;
mod p2p_processes;
mod partial;
mod pauses;
mod peer_loss;
mod plan;
mod prioritize;
mod relay;
mod run_spec;
mod saved_models;
mod scale_cli;
mod send_parts;
mod sim;
mod stop_rules;
mod topology_cli;
mod topology_files;
mod warnings;
