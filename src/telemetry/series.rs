//! Histograms keyed by label sets that are not known in advance (tool and prompt names,
//! error codes), bounded: past [`MAX_SERIES`] label sets, new ones share one series.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::metrics::{Histogram, MCP_BOUNDS};

/// Most label sets a [`Series`] keeps apart.
pub const MAX_SERIES: usize = 1024;

/// Histograms by label set, bounded.
#[derive(Debug)]
pub struct Series<K> {
    // A read lock per observation: uncontended reads cost two atomic operations, and a
    // write happens once per new label set. An actor would cost a message per request.
    map: RwLock<HashMap<K, Arc<Histogram>, BuildHasherDefault<FxHasher>>>,
}

/// A fast multiplicative hash (the one rustc uses) for the label sets: their values are
/// the server's own (methods, registered tools, error codes), never a client's free
/// text, so a hash that resists flooding buys nothing, and SipHash cost a `tools/call`
/// about 500 instructions.
#[derive(Debug, Default, Clone, Copy)]
pub struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl<K> Default for Series<K> {
    fn default() -> Self {
        Self {
            map: RwLock::new(HashMap::default()),
        }
    }
}

impl<K: Clone + Eq + std::hash::Hash> Series<K> {
    /// Records `value` in `key`'s histogram; past [`MAX_SERIES`] label sets, in
    /// `overflow`'s.
    pub fn observe(&self, key: K, overflow: impl FnOnce() -> K, value: Duration) {
        let found = self.map.read().ok().and_then(|map| map.get(&key).cloned());
        if let Some(h) = found {
            h.observe(value);
            return;
        }
        let Ok(mut map) = self.map.write() else {
            return;
        };
        let key = if map.len() >= MAX_SERIES && !map.contains_key(&key) {
            overflow()
        } else {
            key
        };
        map.entry(key)
            .or_insert_with(|| Arc::new(Histogram::new(MCP_BOUNDS)))
            .observe(value);
    }

    /// Every series with its histogram.
    pub fn each(&self) -> Vec<(K, Arc<Histogram>)> {
        self.map
            .read()
            .map(|map| map.iter().map(|(k, h)| (k.clone(), h.clone())).collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_beyond_the_cap_share_one() {
        let series: Series<u32> = Series::default();
        for key in 0..(MAX_SERIES as u32 + 10) {
            series.observe(key, || u32::MAX, Duration::from_millis(1));
        }
        let all = series.each();
        assert_eq!(all.len(), MAX_SERIES + 1);
        let overflow = all.iter().find(|(k, _)| *k == u32::MAX);
        assert_eq!(overflow.map(|(_, h)| h.count()), Some(10));
    }
}
