//! Target `client_ip`: the client address behind trusted proxies, from the peer and the
//! `X-Forwarded-For` headers. Input: a byte choosing the peer (a few fixed addresses, or
//! the next 16 bytes as an IPv6 address), a byte choosing the trusted networks, then the
//! header values separated by newlines. Checks, beside no panic: an untrusted peer is the
//! client whatever the headers say; the answer is canonical (no IPv4-mapped IPv6); and it
//! is the rightmost untrusted hop, or the leftmost trusted one when the walk from the right
//! meets an unreadable hop or the start of the list first.

use hyper::header::{HeaderMap, HeaderValue};
use ipnet::IpNet;
use rl_gateway::fuzzing::{client_ip, is_trusted};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

const PEERS: [&str; 6] = [
    "10.0.0.1",
    "192.0.2.7",
    "127.0.0.1",
    "::1",
    "::ffff:10.0.0.2",
    "fd00::1",
];

const TRUSTED: [&[&str]; 5] = [
    &[],
    &["10.0.0.0/8"],
    &["10.0.0.0/8", "127.0.0.0/8", "::1/128"],
    &["0.0.0.0/0", "::/0"],
    &["fc00::/7", "192.168.0.0/16", "::ffff:10.0.0.0/104"],
];

/// A hop as a reader of the header would understand it: an address, or an address with a
/// port, canonical.
fn read_hop(hop: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(hop).ok()?.trim();
    let ip = text
        .parse::<IpAddr>()
        .or_else(|_| text.parse::<SocketAddr>().map(|s| s.ip()))
        .ok()?;
    Some(ip.to_canonical())
}

pub fn fuzz(data: &[u8]) {
    let [peer_choice, trusted_choice, rest @ ..] = data else {
        return;
    };
    let (peer, rest) = match PEERS.get(usize::from(*peer_choice)) {
        Some(peer) => match peer.parse::<IpAddr>() {
            Ok(peer) => (peer, rest),
            Err(_) => return,
        },
        None => match rest.split_first_chunk::<16>() {
            Some((bytes, rest)) => (IpAddr::V6(Ipv6Addr::from(*bytes)), rest),
            None => return,
        },
    };
    let trusted_set = TRUSTED[usize::from(*trusted_choice) % TRUSTED.len()];
    let trusted: Vec<IpNet> = trusted_set.iter().filter_map(|n| n.parse().ok()).collect();
    let mut headers = HeaderMap::new();
    let mut hops: Vec<&[u8]> = Vec::new();
    for value in rest.split(|&b| b == b'\n') {
        if let Ok(header) = HeaderValue::from_bytes(value) {
            headers.append("x-forwarded-for", header);
            hops.extend(value.split(|&b| b == b','));
        }
    }
    let client = client_ip(peer, &headers, &trusted);
    assert_eq!(client, client.to_canonical(), "not canonical");
    let peer = peer.to_canonical();
    if !is_trusted(peer, &trusted) {
        assert_eq!(client, peer, "an untrusted peer chose the client");
        return;
    }
    // Read from the right: trusted hops are proxies, the first untrusted one is the
    // client, and an unreadable one stops the walk at the proxy to its right.
    let read: Vec<Option<IpAddr>> = hops.iter().map(|h| read_hop(h)).collect();
    let stop = read
        .iter()
        .rposition(|hop| hop.is_none_or(|ip| !is_trusted(ip, &trusted)));
    let expected = match stop {
        Some(at) => match read[at] {
            Some(untrusted) => untrusted,
            None => read.get(at + 1).copied().flatten().unwrap_or(peer),
        },
        None => read.first().copied().flatten().unwrap_or(peer),
    };
    assert_eq!(
        client, expected,
        "peer {peer}, hops {hops:?}, trusted {trusted_set:?}"
    );
}
