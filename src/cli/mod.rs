//! The `sfb` command line.

pub mod bench;
pub mod bench_link;
pub mod demo;
pub mod fms;
pub mod p2p;
pub mod run;
pub mod topology;
pub mod train;
