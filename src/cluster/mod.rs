//! What makes several otpmcp replicas on one Redis act as one server: the router that hands
//! what other replicas publish to this replica's actors ([`bus`]), and the leases that get a
//! dead replica's requests answered ([`leases`]).
//!
//! This module sits above the store and the session manager and reaches them only through
//! their handles. The connections, the key layout and what stream channels carry are the
//! store's Redis backend's ([`crate::event_store::redis`]); the news replicas exchange
//! about sessions is the session layer's ([`crate::session::news`]).
//!
//! Only used with `[store] backend = "redis"`; the in-memory server never touches it.

pub mod bus;
pub mod leases;

pub use bus::Router;
pub use leases::{LeaseKeeper, Leases};
