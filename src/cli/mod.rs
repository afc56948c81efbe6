//! The `sfb` command line.

pub mod bench;
pub mod bench_link;
pub mod bench_netns;
pub mod bench_train;
pub mod demo;
pub mod experiment;
pub mod fms;
pub mod model;
pub mod netns;
pub mod p2p;
pub mod plan;
pub mod run;
pub mod sim;
pub mod topology;
pub mod train;
