//! What makes several otpmcp replicas on one Redis act as one server: the router that hands
//! what other replicas publish to this replica's actors ([`bus`]), the leases that get a
//! dead replica's requests answered and its tasks ended or run again ([`leases`]), and the
//! relay of changes and task signals between replicas ([`relay`]).
//!
//! This module sits above the store and the session manager and reaches them only through
//! their handles. The connections, the key layout and what stream channels carry are the
//! store's Redis backend's ([`crate::event_store::redis`]); the news replicas exchange
//! about sessions is the session layer's ([`crate::session::replica_news`]).
//!
//! Only used with `[store] backend = "redis"`; the in-memory server never touches it.

pub mod bus;
pub mod keeper;
pub mod leases;
pub mod relay;

pub use bus::Router;
pub use keeper::{Heirs, LeaseKeeper, Stops};
pub use leases::Leases;
pub use relay::{NewsRelay, TaskBus};
