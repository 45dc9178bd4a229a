//! Operating the module: argument parsing (`config`), the counters of
//! RDMASYNC.STATUS and INFO (`status`), fault injection for tests
//! (`faults`).

pub mod config;
pub(crate) mod faults;
pub mod status;
