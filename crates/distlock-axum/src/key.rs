//! What the application's key function sees of a request.

use std::fmt;
use std::sync::OnceLock;

use axum::extract::path::ErrorKind;
use axum::extract::rejection::{PathRejection, RawPathParamsRejection};
use axum::extract::{FromRequestParts, Path, RawPathParams};
use axum::http::request::Parts;
use futures_util::FutureExt;

/// The request as the key function sees it: its head (method, URI, headers, extensions) and the
/// path parameters of the route it matched. The body is not read: a lock taken before the
/// handler runs cannot wait for it (see the crate docs for a body field as the key).
///
/// A part that is present but cannot be read as text — a path parameter that is not UTF-8 once
/// percent-decoded, a header that is not visible ASCII — reads as `None` through
/// [`path_param`](Self::path_param) and [`header`](Self::header), and the layer then answers
/// the request 400 without running the handler, whatever the key function returned: such a
/// request has no key, and must run neither unlocked nor under another key's lock.
/// [`try_path_param`](Self::try_path_param) and [`try_header`](Self::try_header) tell the key
/// function which it is and leave the answer to it.
pub struct KeyRequest<'a> {
    parts: &'a Parts,
    params: Params,
    /// The first part read through `path_param` or `header` that could not be decoded. A lock
    /// rather than a `Cell`, so that `KeyRequest` stays `Sync`.
    undecodable: OnceLock<Undecodable>,
}

// An application may keep a `&KeyRequest` across threads: recording undecodable parts keeps it
// `Send` and `Sync`, as it was.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<KeyRequest<'static>>();
};

/// The path parameters of the matched route, as the router left them.
enum Params {
    Decoded(RawPathParams),
    /// The parameter axum found not UTF-8 once percent-decoded; it then keeps none of them.
    Undecodable(String),
    /// Outside a router.
    None,
}

impl<'a> KeyRequest<'a> {
    /// Reads the route's path parameters from `parts`, where the router left them.
    pub(crate) fn new(parts: &'a mut Parts) -> Self {
        // The extractors are async for their trait's sake; they read an extension and never
        // wait, so `now_or_never` always has their answer.
        let params = match RawPathParams::from_request_parts(parts, &()).now_or_never() {
            Some(Ok(params)) => Params::Decoded(params),
            Some(Err(RawPathParamsRejection::InvalidUtf8InPathParam(_))) => {
                Params::Undecodable(undecodable_param(parts))
            }
            _ => Params::None,
        };
        KeyRequest {
            parts,
            params,
            undecodable: OnceLock::new(),
        }
    }

    /// The path parameter `name` of the matched route (`{sku}` in `/order/{sku}`),
    /// percent-decoded; `None` if the route has none of that name, or if the layer runs outside
    /// a router (added with `Router::layer` or `route_layer`, the layer runs after routing and
    /// sees them).
    ///
    /// Also `None` if the route's parameters are not UTF-8 once percent-decoded (`%FF`); the
    /// request is then answered 400 and its handler does not run, whatever the key function
    /// returns. [`try_path_param`](Self::try_path_param) tells the two apart.
    pub fn path_param(&self, name: &str) -> Option<&str> {
        self.mark(self.try_path_param(name))
    }

    /// The path parameter `name` as [`path_param`](Self::path_param) reads it, but an
    /// undecodable parameter is an error rather than `None`, and the request is left to the
    /// key function: whatever it returns goes. If any of the route's parameters is not UTF-8
    /// once percent-decoded, axum keeps none of them, so every name gives the error, which
    /// names the parameter axum found.
    pub fn try_path_param(&self, name: &str) -> Result<Option<&str>, Undecodable> {
        match &self.params {
            Params::Decoded(params) => Ok(params
                .iter()
                .find_map(|(key, value)| (key == name).then_some(value))),
            Params::Undecodable(param) => Err(Undecodable::PathParam(param.clone())),
            Params::None => Ok(None),
        }
    }

    /// The header `name` as text; `None` if absent or not visible ASCII. A header that is
    /// present but not visible ASCII makes the request answer 400 without running its handler,
    /// whatever the key function returns; [`try_header`](Self::try_header) tells the two apart.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.mark(self.try_header(name))
    }

    /// The header `name` as [`header`](Self::header) reads it, but one that is present and not
    /// visible ASCII is an error rather than `None`, and the request is left to the key
    /// function: whatever it returns goes.
    pub fn try_header(&self, name: &str) -> Result<Option<&str>, Undecodable> {
        match self.parts.headers.get(name) {
            Some(value) => value
                .to_str()
                .map(Some)
                .map_err(|_| Undecodable::Header(name.to_string())),
            None => Ok(None),
        }
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

    /// What was read, with an undecodable part recorded (the first one) and read as `None`.
    fn mark<'s>(&self, read: Result<Option<&'s str>, Undecodable>) -> Option<&'s str> {
        read.unwrap_or_else(|e| {
            let _ = self.undecodable.set(e);
            None
        })
    }

    /// The first undecodable part the key function read through [`path_param`](Self::path_param)
    /// or [`header`](Self::header): if any, the request has no key.
    pub(crate) fn into_undecodable(self) -> Option<Undecodable> {
        self.undecodable.into_inner()
    }
}

/// The name of the path parameter that is not UTF-8 once percent-decoded, which `RawPathParams`'
/// rejection keeps to itself and `Path`'s gives.
fn undecodable_param(parts: &mut Parts) -> String {
    match Path::<Vec<(String, String)>>::from_request_parts(parts, &()).now_or_never() {
        Some(Err(PathRejection::FailedToDeserializePathParams(e))) => match e.into_kind() {
            ErrorKind::InvalidUtf8InPathParam { key } => key,
            _ => String::new(),
        },
        // Not reached: both extractors read the same extension.
        _ => String::new(),
    }
}

/// A part of the request that is present but cannot be read as text, so that no lock name can
/// be made of it: see [`KeyRequest::try_path_param`] and [`KeyRequest::try_header`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Undecodable {
    /// A path parameter, named, is not UTF-8 once percent-decoded (`%FF`). axum then keeps
    /// none of the route's parameters: this is the one it found.
    PathParam(String),
    /// A header, named, is present but its value is not visible ASCII.
    Header(String),
}

impl fmt::Display for Undecodable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Undecodable::PathParam(name) => {
                write!(
                    f,
                    "path parameter `{name}` is not UTF-8 once percent-decoded"
                )
            }
            Undecodable::Header(name) => write!(f, "header `{name}` is not visible ASCII"),
        }
    }
}

impl std::error::Error for Undecodable {}
