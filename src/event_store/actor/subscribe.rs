//! A connection subscribing to a stream: one message that follows the stream, replays what
//! the connection missed and registers it for what comes next, so nothing falls between
//! the replay and the live feed. The newest connection to a stream becomes its active one,
//! here and (through an announcement) on other replicas; older ones are parked or closed
//! (see [`super::subscribers`]).

use ractor::{ActorRef, RpcReplyPort};

use super::StoreMsg;
use super::catch_up::CatchUp;
use super::subscribers::Subscriber;
use super::tables::StoreTables;
use crate::event_store::{EventStore, Replay, ReplayOutcome, StoreError, StreamKey};
use crate::event_store::{REPLAY_PAGE, feed};

/// What a connection asks for.
#[derive(Debug)]
pub(super) struct Request {
    pub(super) key: StreamKey,
    /// Replay after this position; `None`: live only.
    pub(super) after: Option<u64>,
    /// Create the stream if unknown (a new POST or standalone stream).
    pub(super) create: bool,
    pub(super) subscriber: feed::Subscriber,
}

pub(super) async fn subscribe<B: EventStore>(
    tables: &mut StoreTables<B>,
    catch_up: &mut CatchUp,
    myself: &ActorRef<StoreMsg>,
    request: Request,
    reply: RpcReplyPort<Result<Replay, StoreError>>,
) {
    // The stream actor gave up waiting (its HTTP request went away): registering it
    // would only close the stream's healthy subscriber.
    if reply.is_closed() {
        return;
    }
    let Request {
        key,
        after,
        create,
        subscriber,
    } = request;
    // Follow before reading, so an event stored meanwhile by another replica is either in
    // the replay or heard of live (and then skipped as a duplicate). Already following it
    // here (a resume on this replica): nothing to subscribe. A POST stream being created
    // is written by this process only, and nobody else can follow it yet: nothing to
    // subscribe to or announce. (The standalone stream is "created" by every GET, resumes
    // included.)
    let new_post_stream = create && !key.stream.is_standalone();
    let on_feed = !new_post_stream
        && (tables.subscribers.get(&key).is_some_and(|s| s.on_feed)
            || tables.backend.follow(key).await.is_ok());
    let following = new_post_stream || on_feed;
    let mut result = if create {
        tables
            .backend
            .open_and_replay(key, after, REPLAY_PAGE)
            .await
    } else {
        tables.backend.replay_page(key, after, REPLAY_PAGE).await
    };
    // Past the end: with Redis, a failover may have lost events the client had; it goes
    // on from where it was, and those positions are not issued again.
    if let (Err(StoreError::FuturePosition(at)), Some(_)) = (&result, after)
        && tables.backend.adopt_position(key, *at).await.is_ok()
    {
        result = tables.backend.replay_page(key, after, REPLAY_PAGE).await;
    }
    let mut position_known = true;
    if create && matches!(result, Err(StoreError::Backend(_))) {
        // A new stream while the backend is down: live delivery still works. A new POST
        // stream starts at 0; the standalone stream may have history, so its position is
        // learnt from the first event heard.
        position_known = new_post_stream;
        result = Ok(Replay {
            events: Vec::new(),
            outcome: ReplayOutcome::Complete,
            position: 0,
            completed: false,
        });
    }
    match &result {
        Ok(replay) if !replay.completed => {
            let mut sub = Subscriber::new(subscriber, replay.position);
            sub.position_known = position_known;
            sub.followed = following;
            sub.on_feed = on_feed;
            // Newest connection wins across replicas too: tell the others.
            sub.awaiting_announce = !new_post_stream && tables.backend.announce(key).await;
            tables.insert(key, sub);
            if !following {
                catch_up.schedule(myself);
            }
        }
        _ => {
            if on_feed && !tables.subscribers.contains_key(&key) {
                tables.backend.unfollow(key).await;
            }
        }
    }
    let _ = reply.send(result);
}
