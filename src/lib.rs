//! sfb
