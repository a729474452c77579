//! Who the client is. `X-Forwarded-For` is believed only when the TCP peer is a trusted
//! proxy, and then only as far back as the chain of trusted proxies goes: the client is
//! the right-most address that is not a trusted proxy. Anything to its left was written by
//! the client itself and may be forged.

use hyper::header::{HeaderMap, HeaderValue};
use ipnet::IpNet;
use std::net::IpAddr;

pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let peer = peer.to_canonical();
    if !is_trusted(peer, trusted) {
        return peer;
    }
    // Every X-Forwarded-For line, in order, each a comma-separated list; read right to
    // left. Each trusted hop passes the question one step further left; a hop that does
    // not parse ends the trustworthy part, leaving the last trusted hop as the client.
    // Hops are split from the raw bytes, so that junk in one cannot hide the others.
    let hops: Vec<Option<IpAddr>> = headers
        .get_all("x-forwarded-for")
        .iter()
        .flat_map(|value: &HeaderValue| value.as_bytes().split(|b| *b == b','))
        .map(|hop| {
            std::str::from_utf8(hop)
                .ok()
                .and_then(|h| parse_hop(h.trim()))
        })
        .collect();
    let mut client = peer;
    for hop in hops.into_iter().rev() {
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

#[cfg(test)]
mod tests {
    use super::*;

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
