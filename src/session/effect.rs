//! The changes to session state a request makes, and the state they change, the same for
//! every transport: the session manager's records (HTTP) and the one session a stdio
//! connection keeps itself ([`LocalSession`]) apply them alike.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use crate::protocol::Notification;
use crate::protocol::methods::{ListKind, LogThreshold, LoggingLevel, notifications};
use crate::server_news::ServerNews;

/// Most resource subscriptions one session may hold.
pub const MAX_SUBSCRIPTIONS: usize = 1024;

/// A change to session state a request makes, applied before its handler runs.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionEffect {
    /// `logging/setLevel`: the session's log level.
    LogLevel(LoggingLevel),
    /// `resources/subscribe` to a resource this server serves.
    Subscribe(String),
    /// `resources/unsubscribe`.
    Unsubscribe(String),
}

/// A session holds [`MAX_SUBSCRIPTIONS`] already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("at most {MAX_SUBSCRIPTIONS} subscriptions per session")]
pub struct TooManySubscriptions;

/// A session's resource subscriptions: at most [`MAX_SUBSCRIPTIONS`], since each is
/// memory a client chooses.
#[derive(Debug, Clone, Default)]
pub struct Subscriptions(HashSet<String>);

impl Subscriptions {
    /// Subscribes to `uri` (again is fine); refused past the cap.
    pub fn add(&mut self, uri: String) -> Result<(), TooManySubscriptions> {
        if !self.0.contains(&uri) && self.0.len() >= MAX_SUBSCRIPTIONS {
            return Err(TooManySubscriptions);
        }
        self.0.insert(uri);
        Ok(())
    }

    /// Unsubscribes from `uri` (idempotent).
    pub fn remove(&mut self, uri: &str) {
        self.0.remove(uri);
    }

    /// True when subscribed to `uri`.
    pub fn contains(&self, uri: &str) -> bool {
        self.0.contains(uri)
    }

    /// Each subscribed URI.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
}

impl FromIterator<String> for Subscriptions {
    /// Loaded from where another replica kept them, capped as they were there.
    fn from_iter<I: IntoIterator<Item = String>>(uris: I) -> Self {
        Self(uris.into_iter().take(MAX_SUBSCRIPTIONS).collect())
    }
}

/// The one session of a connection that keeps it itself (stdio): nothing shared, nothing
/// stored.
#[derive(Debug)]
pub struct LocalSession {
    /// The client's `capabilities`.
    pub capabilities: Arc<Value>,
    /// The least severe log level the client wants.
    pub log: Arc<LogThreshold>,
    lists: Vec<ListKind>,
    subscriptions: Subscriptions,
}

impl LocalSession {
    /// The session `initialize` described: the client's `capabilities`, and the lists
    /// the server announced.
    pub fn open(capabilities: Arc<Value>, lists: Vec<ListKind>) -> Self {
        Self {
            capabilities,
            log: Arc::default(),
            lists,
            subscriptions: Subscriptions::default(),
        }
    }

    /// Applies `effect`.
    pub fn apply(&mut self, effect: SessionEffect) -> Result<(), TooManySubscriptions> {
        match effect {
            SessionEffect::LogLevel(level) => self.log.set(level),
            SessionEffect::Subscribe(uri) => self.subscriptions.add(uri)?,
            SessionEffect::Unsubscribe(uri) => self.subscriptions.remove(&uri),
        }
        Ok(())
    }

    /// The notification `news` means for this session, if it asked for it: a list it was
    /// told of at `initialize`, or a resource it subscribed to.
    pub fn told(&self, news: &ServerNews) -> Option<Notification> {
        match news {
            ServerNews::ListChanged { list } if self.lists.contains(list) => Some(Notification {
                method: list.notification().into(),
                params: None,
            }),
            ServerNews::ResourceUpdated { uri } if self.subscriptions.contains(uri) => {
                Some(Notification {
                    method: notifications::RESOURCE_UPDATED.into(),
                    params: Some(serde_json::json!({ "uri": uri })),
                })
            }
            _ => None,
        }
    }
}
