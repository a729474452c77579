//! The module's version as `MODULE LIST` shows it (`ver`), derived from the crate's
//! semantic version so that there is one version to bump: Cargo.toml's.
//!
//! The server only takes an integer, so `major.minor.patch` is packed as
//! `major * 10000 + minor * 100 + patch` (0.1.0 is 100, 1.2.3 is 10203), the convention
//! RedisJSON and RediSearch use, which keeps the integers ordered like the versions as long
//! as minor and patch stay under 100. The build fails if one does not.

/// `MODULE LIST`'s `ver` for the version Cargo compiles.
pub const MODULE_VERSION: i32 = packed(
    parse(env!("CARGO_PKG_VERSION_MAJOR")),
    parse(env!("CARGO_PKG_VERSION_MINOR")),
    parse(env!("CARGO_PKG_VERSION_PATCH")),
);

/// Packs a semantic version into one integer; panics (at compile time, where it is used)
/// when a part would spill into the next one's digits.
const fn packed(major: i32, minor: i32, patch: i32) -> i32 {
    assert!(
        minor < 100 && patch < 100,
        "minor and patch must stay under 100"
    );
    assert!(
        major < 200_000,
        "the major version must fit in the server's int"
    );
    major * 10_000 + minor * 100 + patch
}

/// Reads the decimal digits Cargo gives for one part of the version.
const fn parse(digits: &str) -> i32 {
    let bytes = digits.as_bytes();
    assert!(!bytes.is_empty(), "an empty version part");
    let mut value: i32 = 0;
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        assert!(byte.is_ascii_digit(), "a version part is not a number");
        assert!(value < 1_000_000, "a version part is too large");
        value = value * 10 + (byte - b'0') as i32;
        i += 1;
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_pack_in_order() {
        assert_eq!(packed(0, 1, 0), 100);
        assert_eq!(packed(1, 2, 3), 10203);
        assert_eq!(packed(12, 99, 99), 129999);
        assert!(packed(1, 0, 0) > packed(0, 99, 99));
        assert!(packed(0, 2, 0) > packed(0, 1, 99));
    }

    #[test]
    fn parts_read_as_decimal() {
        assert_eq!(parse("0"), 0);
        assert_eq!(parse("7"), 7);
        assert_eq!(parse("42"), 42);
    }

    #[test]
    fn the_compiled_version_is_cargos() {
        let text = format!(
            "{}.{}.{}",
            MODULE_VERSION / 10_000,
            MODULE_VERSION / 100 % 100,
            MODULE_VERSION % 100
        );
        assert_eq!(text, env!("CARGO_PKG_VERSION"));
    }
}
