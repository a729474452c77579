//! The answers the gateway writes itself: refusals of the request (400, 414, 501), 503 and
//! the upstream's failures. The denial, which shows the judgement, is `Judgement::too_many`.

use super::Body;
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::header::{HeaderName, HeaderValue, CONNECTION, CONTENT_TYPE};
use hyper::{Response, StatusCode};

/// A refusal of the request itself, with the status a refusal names (400, 414, 501).
pub(super) fn refused(status: u16, body: &'static str) -> Response<Body> {
    local(
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        body,
    )
}

/// A refusal whose body names something of the request (a header's name).
pub(super) fn refused_text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(body))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// 400 for a header name with `_` under `headers_with_underscores_action =
/// "reject_request"`, naming the header and the setting.
pub(super) fn underscore_refusal(name: &HeaderName) -> Response<Body> {
    refused_text(
        StatusCode::BAD_REQUEST,
        format!(
            "Bad Request: the header name {name} has an underscore, which CGI-style servers \
             read as a hyphen; see [requests] headers_with_underscores_action\n"
        ),
    )
}

/// An answer of the gateway's own, plain text when it has a body.
pub(super) fn local(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from_static(
        body.as_bytes(),
    ))));
    *response.status_mut() = status;
    if !body.is_empty() {
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    response
}

/// `response` with `Connection: close`.
pub(super) fn closing(mut response: Response<Body>) -> Response<Body> {
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

pub(super) fn unavailable() -> Response<Body> {
    local(StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable\n")
}
