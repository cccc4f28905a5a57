//! [`IdMap`]: a map keyed by our ids, hashed in a few instructions instead of SipHash.
//!
//! SipHash resists keys chosen to collide. Every key these maps hold was made by the
//! server: session and task ids are 128 random bits, stream numbers are numbered by the
//! session manager. A client can only look up an id it chose, never insert one, so the
//! entries stay spread however it picks them. SipHash cost an event-store shard about
//! 550 of its 4,000 instructions per append (five lookups; `benches/ceilings.rs` under
//! callgrind).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// A `HashMap` keyed by server-made ids ([`SessionId`](super::SessionId),
/// [`StreamNo`](super::StreamNo), [`StreamKey`](super::StreamKey)).
pub type IdMap<K, V> = HashMap<K, V, BuildIdHasher>;

/// Builds [`IdHasher`]s.
#[derive(Debug, Clone, Copy, Default)]
pub struct BuildIdHasher;

impl BuildHasher for BuildIdHasher {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

/// Multiplies each word in (as rustc's FxHasher does): random ids are already spread, and
/// the multiplication spreads small stream numbers over the high bits the map also uses.
#[derive(Debug, Clone, Copy)]
pub struct IdHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_u128(&mut self, n: u128) {
        self.add(n as u64);
        self.add((n >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{SessionId, StreamKey, StreamNo};

    #[test]
    fn ids_spread_over_the_buckets() {
        // Consecutive stream numbers of one session, and random sessions, land in many
        // of 64 buckets (the low bits hashbrown indexes by) and of 128 control tags (the
        // top 7 bits).
        let session = SessionId::random();
        let keys: Vec<u64> = (1..=256)
            .map(|n| BuildIdHasher.hash_one(StreamKey::new(session, StreamNo(n))))
            .chain((0..256).map(|_| BuildIdHasher.hash_one(SessionId::random())))
            .collect();
        for part in keys.chunks(256) {
            let buckets: std::collections::HashSet<u64> = part.iter().map(|h| h % 64).collect();
            let tags: std::collections::HashSet<u64> = part.iter().map(|h| h >> 57).collect();
            assert!(buckets.len() > 48, "{} buckets of 64", buckets.len());
            assert!(tags.len() > 80, "{} tags of 128", tags.len());
        }
    }
}
