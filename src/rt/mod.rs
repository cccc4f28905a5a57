//! Runtime pieces the actors are built from, below every actor module: data lent by a
//! supervisor to its child ([`heir`]), the slot through which handles reach the current
//! incarnation of an actor ([`slot`]) and the restart-intensity window ([`intensity`]). A
//! task that ends with its owner is `tokio_util`'s `AbortOnDropHandle`.
//!
//! Nothing here knows any actor's messages; it imports nothing else of the crate.

pub mod heir;
pub mod intensity;
pub mod slot;
