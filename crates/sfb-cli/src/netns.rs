//! Network namespaces for `sfb run --netns`: moved to [`sfb_harness::netns`].

pub use sfb_harness::netns::{TBF_LATENCY_MS, available};
