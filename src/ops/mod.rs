//! Operating the module: argument parsing (`config`), the counters of
//! RDMASYNC.STATUS and INFO (`status`), which handshake failures were
//! logged (`failure_log`), fault injection for tests (`faults`).

pub mod clock_file;
pub mod config;
pub mod failure_log;
pub mod fallbacks;
pub(crate) mod faults;
pub mod status;
