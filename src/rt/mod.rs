//! Runtime pieces the actors are built from, below every actor module: data lent by a
//! supervisor to its child ([`heir`]), the slot through which handles reach the current
//! incarnation of an actor ([`slot`]), the restart-intensity window ([`intensity`]), a
//! byte budget shared along a chain of queues ([`budget`]) and the count of running
//! requests a drain waits for ([`running`]). A task that ends with its owner is
//! `tokio_util`'s `AbortOnDropHandle`.
//!
//! Nothing here knows any actor's messages; it imports nothing else of the crate.

pub mod budget;
pub mod heir;
pub mod intensity;
pub mod running;
pub mod slot;
