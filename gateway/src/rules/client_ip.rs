//! Who the client is. `X-Forwarded-For` is believed only when the TCP peer is a trusted
//! proxy, and then only as far back as the chain of trusted proxies goes: the client is
//! the right-most address that is not a trusted proxy. Anything to its left was written by
//! the client itself and may be forged.
//!
//! Whose budget it is: not the address itself but its network, [`Prefixes`] long. One
//! host commonly holds a whole IPv6 /64 (2^64 addresses), so counting per /128 would give
//! it 2^64 budgets; by default an IPv6 client is its /64 and an IPv4 client its /32.

use hyper::header::{HeaderMap, HeaderValue};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::Deserialize;
use std::net::IpAddr;

/// How many leading bits of a client's address name its budget (`[client_ip]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prefixes {
    pub(crate) ipv4: u8,
    pub(crate) ipv6: u8,
}

impl Default for Prefixes {
    fn default() -> Self {
        Prefixes { ipv4: 32, ipv6: 64 }
    }
}

impl Prefixes {
    /// The network of `ip` (its host bits zeroed) that stands for the client: what a
    /// `key = "ip"` rule counts. An IPv4-mapped IPv6 address counts as its IPv4 address.
    pub(crate) fn aggregate(self, ip: IpAddr) -> IpAddr {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Ipv4Net::new(v4, self.ipv4).map_or(ip, |net| net.network().into()),
            IpAddr::V6(v6) => Ipv6Net::new(v6, self.ipv6).map_or(ip, |net| net.network().into()),
        }
    }
}

/// The `[client_ip]` section of the file.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
#[schemars(extend("x-reload" = "restart"))]
pub(crate) struct PrefixSection {
    /// 1 to 32: the leading bits of an IPv4 address that name its client.
    ipv4_prefix: u8,
    /// 1 to 128: the same for IPv6, where one host commonly holds a /64.
    ipv6_prefix: u8,
}

impl Default for PrefixSection {
    fn default() -> Self {
        let prefixes = Prefixes::default();
        PrefixSection {
            ipv4_prefix: prefixes.ipv4,
            ipv6_prefix: prefixes.ipv6,
        }
    }
}

impl PrefixSection {
    /// The checked prefixes: 1-32 for IPv4, 1-128 for IPv6 (0 would put every client on
    /// one budget, which a rule without `key = "ip"` says more plainly).
    pub(crate) fn prefixes(self) -> Result<Prefixes, crate::rules::one_of::SettingError> {
        use crate::rules::one_of::SettingError;
        if !(1..=32).contains(&self.ipv4_prefix) {
            return Err(SettingError::new("[client_ip] ipv4_prefix", "be 1 to 32"));
        }
        if !(1..=128).contains(&self.ipv6_prefix) {
            return Err(SettingError::new("[client_ip] ipv6_prefix", "be 1 to 128"));
        }
        Ok(Prefixes {
            ipv4: self.ipv4_prefix,
            ipv6: self.ipv6_prefix,
        })
    }
}

/// The client a request came from: `peer`, or when `peer` is in `trusted` the rightmost
/// `X-Forwarded-For` hop that is not (the last trusted hop if every one is or one is junk).
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let peer = peer.to_canonical();
    if !is_trusted(peer, trusted) {
        return peer;
    }
    // Every X-Forwarded-For line, in order, each a comma-separated list; read right to
    // left. Each trusted hop passes the question one step further left; a hop that does
    // not parse ends the trustworthy part, leaving the last trusted hop as the client.
    // Hops are split from the raw bytes, so that junk in one cannot hide the others, and
    // walked from the right as they are split, never collected: a head of commas is one
    // hop per byte, and the walk usually stops after the first few.
    let hops = headers
        .get_all("x-forwarded-for")
        .iter()
        .rev()
        .flat_map(|value: &HeaderValue| value.as_bytes().rsplit(|b| *b == b','))
        .map(|hop| {
            std::str::from_utf8(hop)
                .ok()
                .and_then(|h| parse_hop(h.trim()))
        });
    let mut client = peer;
    for hop in hops {
        match hop {
            Some(ip) if is_trusted(ip, trusted) => client = ip,
            Some(ip) => return ip,
            None => break,
        }
    }
    client
}

/// Whether `ip` (an IPv4-mapped IPv6 address counts as its IPv4 address) is in `trusted`.
pub fn is_trusted(ip: IpAddr, trusted: &[IpNet]) -> bool {
    let ip = ip.to_canonical();
    trusted.iter().any(|net| net.contains(&ip))
}

/// One hop: `1.2.3.4`, `1.2.3.4:5678`, `2001:db8::1` or `[2001:db8::1]:5678`.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let ip = match hop.parse::<IpAddr>() {
        Ok(ip) => ip,
        Err(_) => hop.parse::<std::net::SocketAddr>().ok()?.ip(),
    };
    Some(ip.to_canonical())
}

/// Appends `ip` to `out` as `Display` writes it. An IPv4 address, the common case and one
/// written for each request (its key, its `X-Forwarded-For`), is written digit by digit:
/// the formatting machinery costs about ten times as much for the same text.
pub(crate) fn push_ip(out: &mut String, ip: IpAddr) {
    let IpAddr::V4(v4) = ip else {
        use std::fmt::Write;
        let _ = write!(out, "{ip}");
        return;
    };
    // At most "255.255.255.255", built in place and appended once.
    let mut text = [0u8; 15];
    let mut len = 0;
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            text[len] = b'.';
            len += 1;
        }
        if octet >= 100 {
            text[len] = b'0' + octet / 100;
            len += 1;
        }
        if octet >= 10 {
            text[len] = b'0' + octet / 10 % 10;
            len += 1;
        }
        text[len] = b'0' + octet % 10;
        len += 1;
    }
    // Digits and dots only, so always valid UTF-8; appended as one slice, not char by char.
    if let Ok(text) = std::str::from_utf8(&text[..len]) {
        out.push_str(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_ip_writes_what_display_writes() {
        let mut addresses: Vec<IpAddr> = ["::1", "2001:db8::8a2e:370:7334", "::ffff:1.2.3.4"]
            .iter()
            .map(|s| ip(s))
            .collect();
        for octet in 0..=255u8 {
            addresses.push(IpAddr::from([octet, 255 - octet, octet / 7, 10]));
        }
        for address in addresses {
            let mut out = String::from("ip:");
            push_ip(&mut out, address);
            assert_eq!(out, format!("ip:{address}"));
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn with_xff(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append("x-forwarded-for", v.parse().unwrap());
        }
        headers
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_the_header_says() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let headers = with_xff(&["1.1.1.1"]);
        assert_eq!(
            client_ip(ip("192.0.2.7"), &headers, &trusted),
            ip("192.0.2.7")
        );
        assert_eq!(client_ip(ip("192.0.2.7"), &headers, &[]), ip("192.0.2.7"));
    }

    #[test]
    fn trusted_chain_is_read_from_the_right() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let peer = ip("10.0.0.1");
        assert_eq!(
            client_ip(peer, &with_xff(&["6.6.6.6, 203.0.113.5"]), &trusted),
            ip("203.0.113.5")
        );
        assert_eq!(
            client_ip(
                peer,
                &with_xff(&["6.6.6.6, 203.0.113.5, 10.0.0.9"]),
                &trusted
            ),
            ip("203.0.113.5")
        );
        assert_eq!(
            client_ip(peer, &with_xff(&["6.6.6.6", "203.0.113.5:443"]), &trusted),
            ip("203.0.113.5")
        );
        assert_eq!(
            client_ip(peer, &with_xff(&["[2001:db8::1]:80"]), &trusted),
            ip("2001:db8::1")
        );
        assert_eq!(client_ip(peer, &HeaderMap::new(), &trusted), peer);
        // Only trusted hops: the left-most is the best we know.
        assert_eq!(
            client_ip(peer, &with_xff(&["10.0.0.5, 10.0.0.6"]), &trusted),
            ip("10.0.0.5")
        );
    }

    #[test]
    fn ipv4_mapped_addresses_are_their_ipv4_address() {
        let trusted: Vec<IpNet> = vec!["127.0.0.1/32".parse().unwrap()];
        let mapped = ip("::ffff:127.0.0.1");
        assert_eq!(
            client_ip(mapped, &with_xff(&["203.0.113.5"]), &trusted),
            ip("203.0.113.5")
        );
        assert_eq!(
            client_ip(ip("::ffff:192.0.2.1"), &HeaderMap::new(), &trusted),
            ip("192.0.2.1")
        );
    }

    #[test]
    fn a_hop_that_is_not_text_leaves_the_others_readable() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let mut headers = HeaderMap::new();
        headers.append(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"caf\xc3\xa9, 203.0.113.5").unwrap(),
        );
        assert_eq!(
            client_ip(ip("10.0.0.1"), &headers, &trusted),
            ip("203.0.113.5")
        );
    }

    #[test]
    fn addresses_count_as_their_network() {
        let default = Prefixes::default();
        assert_eq!(
            default.aggregate(ip("2001:db8:1:2:3:4:5:6")),
            ip("2001:db8:1:2::")
        );
        assert_eq!(
            default.aggregate(ip("2001:db8:1:2::1")),
            default.aggregate(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")),
            "one /64, one budget"
        );
        assert_ne!(
            default.aggregate(ip("2001:db8:1:2::1")),
            default.aggregate(ip("2001:db8:1:3::1"))
        );
        assert_eq!(default.aggregate(ip("192.0.2.77")), ip("192.0.2.77"));
        assert_eq!(default.aggregate(ip("::ffff:192.0.2.77")), ip("192.0.2.77"));
        let wide = Prefixes { ipv4: 24, ipv6: 48 };
        assert_eq!(wide.aggregate(ip("192.0.2.77")), ip("192.0.2.0"));
        assert_eq!(wide.aggregate(ip("::ffff:192.0.2.77")), ip("192.0.2.0"));
        assert_eq!(wide.aggregate(ip("2001:db8:1:2::1")), ip("2001:db8:1::"));
        let exact = Prefixes {
            ipv4: 32,
            ipv6: 128,
        };
        assert_eq!(exact.aggregate(ip("2001:db8::7")), ip("2001:db8::7"));
    }

    #[test]
    fn prefixes_are_checked() {
        let section = |ipv4_prefix, ipv6_prefix| PrefixSection {
            ipv4_prefix,
            ipv6_prefix,
        };
        assert_eq!(PrefixSection::default().prefixes(), Ok(Prefixes::default()));
        assert!(section(0, 64)
            .prefixes()
            .unwrap_err()
            .to_string()
            .contains("ipv4_prefix"));
        assert!(section(33, 64)
            .prefixes()
            .unwrap_err()
            .to_string()
            .contains("ipv4_prefix"));
        assert!(section(32, 0)
            .prefixes()
            .unwrap_err()
            .to_string()
            .contains("ipv6_prefix"));
        assert!(section(32, 129)
            .prefixes()
            .unwrap_err()
            .to_string()
            .contains("ipv6_prefix"));
        assert_eq!(
            section(24, 56).prefixes(),
            Ok(Prefixes { ipv4: 24, ipv6: 56 })
        );
    }

    #[test]
    fn garbage_ends_the_chain() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let peer = ip("10.0.0.1");
        assert_eq!(
            client_ip(peer, &with_xff(&["not-an-ip, 203.0.113.5"]), &trusted),
            ip("203.0.113.5")
        );
        assert_eq!(
            client_ip(peer, &with_xff(&["203.0.113.5, junk"]), &trusted),
            peer
        );
        assert_eq!(
            client_ip(peer, &with_xff(&["203.0.113.5, junk, 10.0.0.7"]), &trusted),
            ip("10.0.0.7")
        );
    }
}
