//! Who a per-party session cap counts (`server.max_sessions_per_client`,
//! `auth.max_sessions_per_principal`): the client's address and its principal.

use std::collections::HashMap;
use std::net::IpAddr;

use super::record::NewSession;
use crate::auth::Owner;

/// Who a per-party session cap counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Party {
    /// The address the client connected from.
    Address(IpAddr),
    /// The principal its token named.
    Principal(Owner),
}

impl Party {
    /// The parties `init` counts for.
    pub(super) fn of(init: &NewSession) -> impl Iterator<Item = Party> {
        let address = init.client.map(Party::Address);
        address.into_iter().chain(init.owner.map(Party::Principal))
    }

    /// True when `init` counts for this party.
    pub(super) fn holds(self, init: &NewSession) -> bool {
        Party::of(init).any(|p| p == self)
    }
}

/// Counts a session out of the parties it counted for.
pub(super) fn left(per_party: &mut HashMap<Party, u32>, init: &NewSession) {
    for party in Party::of(init) {
        if let Some(n) = per_party.get_mut(&party) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                per_party.remove(&party);
            }
        }
    }
}
