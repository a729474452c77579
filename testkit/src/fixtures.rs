//! Rule sets that several test files start their gateways with.

/// A login endpoint (POST, per endpoint, 3 per 15 min counting 401 and 403), an API keyed
/// by `X-Api-Key` (2 per minute), a search endpoint (GET, per endpoint, 2 per minute) and
/// a default of 100 per minute: the rules the tests of methods, paths, headers and request
/// framing try to get around.
pub const LOGIN_API_SEARCH: &str = r#"
[[rule]]
name = "login"
methods = ["POST"]
path = "/auth/*"
per_endpoint = true
limits = ["3/15m"]
count = [401, 403]

[[rule]]
name = "api"
path = "/api/**"
key = "header:X-Api-Key"
limits = ["2/1m"]

[[rule]]
name = "search"
methods = ["GET"]
path = "/search"
per_endpoint = true
limits = ["2/1m"]

[default]
limits = ["100/1m"]
"#;

/// A default limit no test reaches, for the tests of connections and logs, where the
/// budget must never be what answers.
pub const NEVER_LIMITED: &str = "[default]\nlimits = [\"1000000/1h\"]\n";
