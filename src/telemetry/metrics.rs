//! What the server counts: process-wide counters, gauges and histograms that the request
//! path updates with one relaxed atomic add, and that [`super::prometheus`] and
//! [`super::otlp`] read when asked.
//!
//! Every label set is fixed and small (an enum per family), so a family is an array of
//! atomics indexed by its label, and exists with all its values from the start: `rate()`
//! has data from the first scrape, and no client input can add a series. The two MCP
//! histograms are the exception (their labels include tool and prompt names); they live in
//! [`super::durations`], capped.
//!
//! Figures that an actor owns (live sessions, store occupancy, mailbox depth) are not
//! kept here: they are asked of their owner at scrape time (see `crate::admin`).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// A monotonic count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Zero.
    pub const fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    /// Adds one.
    pub fn inc(&self) {
        self.add(1);
    }

    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Debug, Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    /// Zero.
    pub const fn new() -> Self {
        Self(AtomicI64::new(0))
    }

    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes one away.
    pub fn dec(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    /// Takes one away, but never below zero (for counts that can lose track, such as
    /// messages that died with a crashed actor's mailbox).
    pub fn dec_to_zero(&self) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                (v > 0).then(|| v - 1)
            });
    }

    /// Sets the value.
    pub fn set(&self, value: i64) {
        self.0.store(value, Ordering::Relaxed);
    }

    /// The value now.
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A label of a fixed set: each value has an index into its family's array.
pub trait Label: Copy + Send + Sync + 'static {
    /// The label's name, e.g. `reason`.
    const NAME: &'static str;
    /// Every value, in index order.
    const ALL: &'static [Self];
    /// The value as exposed.
    fn as_str(self) -> &'static str;
    /// Its index in [`Label::ALL`].
    fn index(self) -> usize;
}

/// A counter per value of label `L`.
#[derive(Debug)]
pub struct Counters<L: Label, const N: usize> {
    counts: [Counter; N],
    _label: std::marker::PhantomData<L>,
}

impl<L: Label, const N: usize> Default for Counters<L, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: Label, const N: usize> Counters<L, N> {
    /// All zero.
    pub const fn new() -> Self {
        // A label added without growing `N` would be counted nowhere.
        const { assert!(N == L::ALL.len(), "N must be the number of label values") };
        Self {
            counts: [const { Counter::new() }; N],
            _label: std::marker::PhantomData,
        }
    }

    /// Adds one to `label`'s count.
    pub fn inc(&self, label: L) {
        self.add(label, 1);
    }

    /// Adds `n` to `label`'s count.
    pub fn add(&self, label: L, n: u64) {
        if let Some(c) = self.counts.get(label.index()) {
            c.add(n);
        }
    }

    /// Each label value with its count.
    pub fn each(&self) -> impl Iterator<Item = (L, u64)> + '_ {
        L::ALL.iter().zip(&self.counts).map(|(l, c)| (*l, c.get()))
    }

    /// The sum over every label value.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(Counter::get).sum()
    }
}

/// A gauge per value of label `L`.
#[derive(Debug)]
pub struct Gauges<L: Label, const N: usize> {
    values: [Gauge; N],
    _label: std::marker::PhantomData<L>,
}

impl<L: Label, const N: usize> Default for Gauges<L, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: Label, const N: usize> Gauges<L, N> {
    /// All zero.
    pub const fn new() -> Self {
        // A label added without growing `N` would be counted nowhere.
        const { assert!(N == L::ALL.len(), "N must be the number of label values") };
        Self {
            values: [const { Gauge::new() }; N],
            _label: std::marker::PhantomData,
        }
    }

    /// `label`'s gauge.
    pub fn get(&self, label: L) -> &Gauge {
        &self.values[label.index().min(N - 1)]
    }

    /// Counts one more of `label` until the returned guard is dropped.
    pub fn track(&'static self, label: L) -> Tracked {
        let gauge = &self.values[label.index().min(N - 1)];
        gauge.inc();
        Tracked(gauge)
    }

    /// Each label value with its gauge.
    pub fn each(&self) -> impl Iterator<Item = (L, i64)> + '_ {
        L::ALL.iter().zip(&self.values).map(|(l, g)| (*l, g.get()))
    }
}

/// One unit of a gauge, given back when dropped (an open stream, a held lease).
#[derive(Debug)]
#[must_use = "the gauge goes down again when this is dropped"]
pub struct Tracked(&'static Gauge);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A histogram with fixed bucket bounds (seconds), kept as counts per bucket.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One per bound, plus the overflow bucket (`+Inf`); not cumulative.
    buckets: Box<[Counter]>,
    count: Counter,
    /// Sum in nanoseconds, so that it is an integer add.
    sum_nanos: Counter,
}

impl Histogram {
    /// Empty, with `bounds` (ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: (0..=bounds.len()).map(|_| Counter::new()).collect(),
            count: Counter::new(),
            sum_nanos: Counter::new(),
        }
    }

    /// Records one observation.
    pub fn observe(&self, value: Duration) {
        let seconds = value.as_secs_f64();
        let bucket = self.bounds.partition_point(|b| *b < seconds);
        if let Some(b) = self.buckets.get(bucket) {
            b.inc();
        }
        self.count.inc();
        self.sum_nanos
            .add(u64::try_from(value.as_nanos()).unwrap_or(u64::MAX));
    }

    /// The bucket bounds.
    pub fn bounds(&self) -> &'static [f64] {
        self.bounds
    }

    /// Cumulative counts per bound, then the total (the `+Inf` bucket).
    pub fn cumulative(&self) -> Vec<u64> {
        let mut total = 0;
        self.buckets
            .iter()
            .map(|b| {
                total += b.get();
                total
            })
            .collect()
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.get()
    }

    /// Their sum, in seconds.
    pub fn sum(&self) -> f64 {
        self.sum_nanos.get() as f64 / 1e9
    }
}

/// Bucket bounds of the MCP duration histograms, as the semantic conventions advise.
pub const MCP_BOUNDS: &[f64] = &[
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Bucket bounds of Redis round trips: a loopback call is a tenth of a millisecond.
pub const REDIS_BOUNDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

macro_rules! label {
    ($(#[$doc:meta])* $name:ident, $label:literal, { $($(#[$vdoc:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vdoc])* $variant),+
        }

        impl Label for $name {
            const NAME: &'static str = $label;
            const ALL: &'static [Self] = &[$(Self::$variant),+];
            fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }
            fn index(self) -> usize {
                self as usize
            }
        }
    };
}

label!(
    /// Why a session was refused.
    Refusal, "reason", {
        /// `max_sessions` reached.
        Full => "full",
        /// `max_sessions_per_client` reached.
        ClientFull => "client_full",
        /// `auth.max_sessions_per_principal` reached.
        PrincipalFull => "principal_full",
        /// `auth.max_requests_per_principal` reached.
        PrincipalBusy => "principal_busy",
        /// Unknown, expired or ended session id.
        Unknown => "unknown",
        /// `max_open_per_session` reached.
        Busy => "busy",
        /// A request id already running in the session.
        DuplicateRequest => "duplicate_request",
        /// The session manager or the shared directory did not answer.
        Unavailable => "unavailable",
    }
);

label!(
    /// Why `[auth]` refused a request.
    AuthRefusal, "reason", {
        /// No bearer token.
        Missing => "missing",
        /// Not a token this server can read.
        Malformed => "malformed",
        /// An algorithm not in `auth.algorithms`.
        Algorithm => "algorithm",
        /// No key of the issuer matches.
        UnknownKey => "unknown_key",
        /// The signature does not verify.
        BadSignature => "bad_signature",
        /// Past `exp`.
        Expired => "expired",
        /// Before `nbf`.
        NotYetValid => "not_yet_valid",
        /// Issued for another resource.
        WrongAudience => "wrong_audience",
        /// Issued by another authorization server.
        WrongIssuer => "wrong_issuer",
        /// A required claim is absent.
        MissingClaim => "missing_claim",
        /// Introspection says inactive.
        Inactive => "inactive",
        /// Introspection names another token type than an access token's.
        WrongTokenType => "wrong_token_type",
        /// The authorization server could not be reached.
        Unavailable => "unavailable",
        /// `auth.introspection_concurrency` introspections were in flight.
        Busy => "busy",
        /// `auth.max_failures_per_client` failures from this address this minute.
        TooManyFailures => "too_many_failures",
        /// A scope the request needs was not granted.
        InsufficientScope => "insufficient_scope",
        /// A token in the query string.
        TokenInQuery => "token_in_query",
    }
);

label!(
    /// What an SSE stream serves.
    StreamKind, "kind", {
        /// A POST request's own stream.
        Post => "post",
        /// The standalone GET stream.
        Get => "get",
        /// A GET resuming a stream with `Last-Event-ID`.
        Resume => "resume",
        /// A stateless (2026-07-28) request answered as a stream.
        Stateless => "stateless",
        /// A stateless `subscriptions/listen` stream.
        Listen => "listen",
    }
);

label!(
    /// Why stored events were dropped, or stopped being served.
    Eviction, "reason", {
        /// Older than `event_ttl`.
        Ttl => "ttl",
        /// Asked for past `replay_window`: still stored, no longer replayed.
        Window => "window",
        /// Over `max_session_events`.
        Cap => "cap",
        /// Over `max_session_bytes`.
        Bytes => "bytes",
        /// Over `max_total_events` or `max_total_bytes` (the whole store's budget).
        Total => "total",
        /// A principal's task logs over its share of that budget
        /// (`tasks.principal_event_percent`).
        Principal => "principal",
    }
);

label!(
    /// How a `Last-Event-ID` resume went.
    ReplayResult, "outcome", {
        /// Every missed event replayed.
        Complete => "complete",
        /// Some missed events were evicted; the rest replayed.
        Truncated => "truncated",
        /// The id is older than the replay window: live only.
        OutsideWindow => "outside_window",
        /// The id does not parse, or names a stream nobody has.
        UnknownId => "unknown_id",
        /// The id belongs to another session.
        ForeignId => "foreign_id",
        /// The id is past the end of its stream.
        FuturePosition => "future_position",
    }
);

label!(
    /// Why the server cut a connection.
    Cut, "reason", {
        /// The client read too slowly and its buffer filled.
        SlowConsumer => "slow_consumer",
        /// The socket accepted nothing for `write_stall_timeout`.
        WriteStall => "write_stall",
        /// Another connection resumed the same stream.
        Superseded => "superseded",
    }
);

label!(
    /// A supervised actor.
    ActorName, "actor", {
        /// The event store.
        EventStore => "event_store",
        /// The session manager.
        SessionManager => "session_manager",
        /// The HTTP listener.
        HttpListener => "http_listener",
    }
);

/// Sessions created.
pub static SESSIONS_CREATED: Counter = Counter::new();
/// Sessions that ended idle (`session_timeout`).
pub static SESSIONS_EXPIRED: Counter = Counter::new();
/// Sessions ended by the client's DELETE.
pub static SESSIONS_DELETED: Counter = Counter::new();
/// Idle sessions ended to make room for a new one at `server.max_sessions`.
pub static SESSIONS_EVICTED: Counter = Counter::new();
/// Requests refused for their session, by reason.
pub static SESSIONS_REFUSED: Counters<Refusal, 8> = Counters::new();
/// Requests refused by `[auth]`, by reason.
pub static AUTH_REFUSED: Counters<AuthRefusal, 17> = Counters::new();
/// SSE streams open now, by kind.
pub static STREAMS_OPEN: Gauges<StreamKind, 5> = Gauges::new();
/// Events stored.
pub static EVENTS_APPENDED: Counter = Counter::new();
/// Events sent again on a resume.
pub static EVENTS_REPLAYED: Counter = Counter::new();
/// Events dropped (or no longer served), by reason.
pub static EVENTS_EVICTED: Counters<Eviction, 6> = Counters::new();
/// Resumes, by outcome.
pub static REPLAYS: Counters<ReplayResult, 6> = Counters::new();
/// Connections the server cut, by reason.
pub static CONNECTIONS_CUT: Counters<Cut, 3> = Counters::new();
/// Connections answered 503 and closed at `server.max_connections`.
pub static CONNECTIONS_REFUSED: Counter = Counter::new();
/// Restarts of each supervised actor.
pub static ACTOR_RESTARTS: Counters<ActorName, 3> = Counters::new();
/// Messages queued for each actor through its handle and not yet handled (approximate:
/// ractor does not expose its mailbox length; reset when the actor restarts).
pub static MAILBOX_DEPTH: Gauges<ActorName, 3> = Gauges::new();
/// Times the root supervisor gave up (restart intensity exceeded).
pub static ESCALATIONS: Counter = Counter::new();
/// Times Redis became reachable again after a failure.
pub static REDIS_RECONNECTS: Counter = Counter::new();
/// Requests and tasks this replica holds a lease on (Redis only).
pub static LEASES_HELD: Gauge = Gauge::new();
/// Requests and tasks of lost replicas answered or taken over by this one.
pub static REQUESTS_REAPED: Counter = Counter::new();
/// Round trips to Redis.
pub static REDIS_ROUNDTRIP: std::sync::LazyLock<Histogram> =
    std::sync::LazyLock::new(|| Histogram::new(REDIS_BOUNDS));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_that_holds_them() {
        let h = Histogram::new(&[0.1, 1.0]);
        h.observe(Duration::from_millis(100));
        h.observe(Duration::from_millis(500));
        h.observe(Duration::from_secs(5));
        assert_eq!(h.cumulative(), vec![1, 2, 3]);
        assert_eq!(h.count(), 3);
        assert!((h.sum() - 5.6).abs() < 1e-9);
    }

    #[test]
    fn every_label_value_is_there_from_the_start() {
        let c: Counters<Cut, 3> = Counters::new();
        c.inc(Cut::Superseded);
        let all: Vec<_> = c.each().map(|(l, n)| (l.as_str(), n)).collect();
        assert_eq!(
            all,
            vec![("slow_consumer", 0), ("write_stall", 0), ("superseded", 1)]
        );
    }
}
