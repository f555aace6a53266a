//! What the application's key function sees of a request.

use axum::extract::{FromRequestParts, RawPathParams};
use axum::http::request::Parts;
use futures_util::FutureExt;

/// The request as the key function sees it: its head (method, URI, headers, extensions) and the
/// path parameters of the route it matched. The body is not read: a lock taken before the
/// handler runs cannot wait for it (see the crate docs for a body field as the key).
pub struct KeyRequest<'a> {
    parts: &'a Parts,
    params: Option<RawPathParams>,
}

impl<'a> KeyRequest<'a> {
    /// Reads the route's path parameters from `parts`, where the router left them.
    pub(crate) fn new(parts: &'a mut Parts) -> Self {
        // The extractor is async for its trait's sake; it reads an extension and never waits, so
        // `now_or_never` always has its answer. `None` outside a router (no parameters).
        let params = RawPathParams::from_request_parts(parts, &())
            .now_or_never()
            .and_then(Result::ok);
        KeyRequest { parts, params }
    }

    /// The path parameter `name` of the matched route (`{sku}` in `/order/{sku}`),
    /// percent-decoded; `None` if the route has none of that name, or if the layer runs outside
    /// a router (added with `Router::layer` or `route_layer`, the layer runs after routing and
    /// sees them).
    pub fn path_param(&self, name: &str) -> Option<&str> {
        self.params
            .as_ref()?
            .iter()
            .find_map(|(key, value)| (key == name).then_some(value))
    }

    /// The header `name` as text; `None` if absent or not visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.parts.headers.get(name)?.to_str().ok()
    }

    /// The raw value of the query parameter `name` (not percent-decoded); `None` if absent.
    pub fn query_param(&self, name: &str) -> Option<&str> {
        self.parts.uri.query()?.split('&').find_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (key == name).then_some(value)
        })
    }

    /// The whole request head, for anything else (method, URI, extensions set by earlier layers
    /// such as an authenticated user).
    pub fn parts(&self) -> &Parts {
        self.parts
    }
}
