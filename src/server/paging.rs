//! Cursor paging of the list methods: an opaque cursor that is an offset we issued, and
//! [`PAGE_SIZE`] items a page.

use serde_json::Value;

use super::to_value;
use crate::protocol::{ErrorObject, Request};

/// Items per page of every list method.
pub(crate) const PAGE_SIZE: usize = 100;

/// One page of `items` from `cursor` (an offset we issued), with the next cursor.
fn page<T: Clone>(
    items: &[T],
    cursor: Option<&str>,
) -> Result<(Vec<T>, Option<String>), ErrorObject> {
    let start = match cursor {
        None => 0,
        Some(c) => c
            .parse::<usize>()
            .ok()
            .filter(|n| *n <= items.len())
            .ok_or_else(|| ErrorObject::invalid_params(format!("Invalid cursor: {c:?}")))?,
    };
    let end = (start + PAGE_SIZE).min(items.len());
    let next = (end < items.len()).then(|| end.to_string());
    Ok((items[start..end].to_vec(), next))
}

/// A page as a JSON object: `{ <key>: [...], nextCursor? }`.
pub(super) fn page_value<T: serde::Serialize + Clone>(
    key: &str,
    items: &[T],
    request: &Request,
) -> Result<Value, ErrorObject> {
    let (items, next) = page(items, request.cursor()?.as_deref())?;
    let mut out = serde_json::Map::new();
    out.insert(key.into(), to_value(&items)?);
    if let Some(next) = next {
        out.insert("nextCursor".into(), Value::String(next));
    }
    Ok(Value::Object(out))
}
