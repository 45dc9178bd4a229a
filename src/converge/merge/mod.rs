//! Per-element merges: the rules by which concurrent changes of one key on
//! several sites all survive (docs/convergence.md, "Merges"). Pure state
//! types, each with the operations a site makes, `merge` of another
//! site's state, and `collect`, which drops the metadata no site can
//! conflict with any more.
//!
//! - [`Seen`]: what a site had applied of each origin (a version vector).
//! - [`Element`] and [`Elements`]: hash fields, set members, sorted-set
//!   scores; last writer wins per element, removals observed-remove.
//! - [`Counter`]: the newest set plus every increment it had not seen.
//! - [`lists`]: a list's runs of pushes around its rest, as elements.
//! - [`Register`]: a value ordered by stamp among its own writes (a TTL).
//!
//! Every state is a join: any delivery order, with duplicates and whole
//! states in between, gives the same value (`properties`, a property test
//! against a model of the history). Collection relies on one rule about
//! the bound it is given: every site applied every change at or below it,
//! and every change still to arrive was made by a site that had.

pub mod bound;
pub mod codec;
pub mod collection;
pub mod counter;
pub mod counters;
#[cfg(test)]
mod counters_sim;
pub mod db_key;
pub mod element;
pub mod hash_codec;
pub mod hash_journal;
pub mod hashes;
#[cfg(test)]
mod hashes_sim;
pub mod journaled;
pub mod list_apply;
pub mod list_codec;
pub mod list_collect;
pub mod list_edit;
pub mod list_flush;
pub mod list_positions;
#[cfg(test)]
mod list_positions_sim;
pub mod list_spans;
pub mod list_table;
pub mod lists;
#[cfg(test)]
mod lists_sim;
pub mod register;
pub mod relisted;
pub mod removals;
pub mod seen;

#[cfg(test)]
mod network;
#[cfg(test)]
mod properties;

pub use collection::Elements;
pub use counter::Counter;
pub use element::Element;
pub use register::Register;
pub use seen::Seen;
