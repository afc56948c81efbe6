//! The `sfb` command line.

pub mod bench;
pub mod demo;
pub mod run;
pub mod train;
