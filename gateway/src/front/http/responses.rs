//! The answers the gateway writes itself: refusals of the request (400, 414, 501), 503 and
//! the upstream's failures. The denial, which shows the judgement, is `Judgement::too_many`.

use super::Body;
use crate::rules::canonical::PathRefusal;
use crate::rules::methods::MethodRefusal;
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::header::{HeaderName, HeaderValue, CONNECTION, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use std::borrow::Cow;

/// A request the gateway answers itself instead of deciding on it (400, 414, 501): the
/// status and a plain-text body that names the problem.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Refusal {
    status: StatusCode,
    body: Cow<'static, str>,
}

impl Refusal {
    /// A refusal with the status a check names (400, 414, 501); 400 for any other.
    pub(super) fn new(status: u16, body: &'static str) -> Self {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
        Refusal {
            status,
            body: Cow::Borrowed(body),
        }
    }

    /// 400 with a body that names something of the request (a header's name).
    pub(super) fn naming(body: String) -> Self {
        Refusal {
            status: StatusCode::BAD_REQUEST,
            body: Cow::Owned(body),
        }
    }

    /// 400 for a header name with `_` under `headers_with_underscores_action =
    /// "reject_request"`, naming the header and the setting.
    pub(super) fn underscore(name: &HeaderName) -> Self {
        Refusal::naming(format!(
            "Bad Request: the header name {name} has an underscore, which CGI-style servers \
             read as a hyphen; see [requests] headers_with_underscores_action\n"
        ))
    }
}

impl From<MethodRefusal> for Refusal {
    fn from(refusal: MethodRefusal) -> Self {
        Refusal::new(refusal.status(), refusal.message())
    }
}

impl From<PathRefusal> for Refusal {
    fn from(refusal: PathRefusal) -> Self {
        Refusal::new(refusal.status(), refusal.message())
    }
}

impl From<Refusal> for Response<Body> {
    fn from(refusal: Refusal) -> Self {
        let body = match refusal.body {
            Cow::Borrowed(text) => Bytes::from_static(text.as_bytes()),
            Cow::Owned(text) => Bytes::from(text),
        };
        let mut response = Response::new(Either::Right(Full::new(body)));
        *response.status_mut() = refusal.status;
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn text(response: Response<Body>) -> String {
        let bytes = response.into_body().collect().await.map(|b| b.to_bytes());
        String::from_utf8(bytes.unwrap_or_default().to_vec()).unwrap_or_default()
    }

    #[tokio::test]
    async fn a_refusal_is_plain_text_with_its_status() {
        let response: Response<Body> = Refusal::new(414, "URI Too Long\n").into();
        assert_eq!(response.status(), StatusCode::URI_TOO_LONG);
        let kind = response.headers().get(CONTENT_TYPE).cloned();
        assert_eq!(
            kind,
            Some(HeaderValue::from_static("text/plain; charset=utf-8"))
        );
        assert_eq!(text(response).await, "URI Too Long\n");
    }

    #[tokio::test]
    async fn a_status_that_is_not_one_becomes_400() {
        let response: Response<Body> = Refusal::new(42, "x\n").into();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn the_underscore_refusal_names_the_header_and_the_setting() {
        let name = HeaderName::from_static("x_api_key");
        let body = text(Refusal::underscore(&name).into()).await;
        assert!(body.contains("x_api_key"), "{body}");
        assert!(body.contains("headers_with_underscores_action"), "{body}");
    }

    #[tokio::test]
    async fn an_answer_without_a_body_has_no_content_type() {
        let response = local(StatusCode::OK, "");
        assert!(response.headers().get(CONTENT_TYPE).is_none());
        assert!(closing(response).headers().get(CONNECTION).is_some());
    }
}
