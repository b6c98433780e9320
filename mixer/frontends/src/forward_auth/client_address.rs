//! Which client a forward-auth call speaks for: `source.ip`.
//!
//! The forwarding headers (`X-Forwarded-For`, `X-Real-IP`) are text the client can write, and
//! nginx passes the client's own headers to its auth subrequest. So the address is the
//! connection's peer unless that peer is a proxy the operator trusts (`--trusted-proxies`,
//! as nginx's `set_real_ip_from` and Envoy's `xff_num_trusted_hops`); only then is the
//! forwarding header read, and from the right: each address a trusted proxy added is
//! believed, and the first one that is not a trusted proxy is the client (nginx's
//! `real_ip_recursive on`). A client cannot move itself past the proxy nearest to us, which
//! appends the address it saw.

use std::net::IpAddr;

use axum::http::HeaderMap;
use ipnet::IpNet;

/// The address ranges of proxies whose forwarding headers are believed. Empty: none are, and
/// `source.ip` is always the peer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Parses `10.0.0.0/8,192.168.1.7,fd00::/8`: CIDR ranges or single addresses, separated by
    /// commas. An empty text trusts no proxy.
    pub fn parse(text: &str) -> Result<TrustedProxies, String> {
        let mut nets = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let net = match part.parse::<IpNet>() {
                Ok(net) => net,
                Err(_) => match part.parse::<IpAddr>() {
                    Ok(ip) => IpNet::from(ip),
                    Err(_) => {
                        return Err(format!(
                            "{part:?} is not an address range such as 10.0.0.0/8 or an address"
                        ));
                    }
                },
            };
            nets.push(net.trunc());
        }
        Ok(TrustedProxies(nets))
    }

    /// Whether `ip` is one of the trusted proxies (an IPv4 address written as IPv6,
    /// `::ffff:a.b.c.d`, as the IPv4 one).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// True when no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Which header a trusted proxy names the client in (nginx's `real_ip_header`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RealIpHeader {
    /// `X-Forwarded-For`, read from the right (nginx `$proxy_add_x_forwarded_for`, Caddy,
    /// Traefik and Envoy append the address they saw).
    #[default]
    XForwardedFor,
    /// `X-Real-IP`, one address, as nginx's `proxy_set_header X-Real-IP $remote_addr` sets it.
    XRealIp,
}

/// How forward-auth finds the client's address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientAddress {
    /// Proxies whose header is believed.
    pub trusted_proxies: TrustedProxies,
    /// The header they name the client in.
    pub header: RealIpHeader,
}

impl ClientAddress {
    /// One line for the log at start: where `source.ip` comes from, so that an operator
    /// can check the proxy writes the header read (a proxy passing on its client's own
    /// header lets the client choose its address).
    pub fn describe(&self) -> String {
        if self.trusted_proxies.is_empty() {
            return "forward-auth: source.ip is the connection's peer; forwarding headers are not read (no --trusted-proxies)".into();
        }
        let proxies: Vec<String> = self
            .trusted_proxies
            .0
            .iter()
            .map(ToString::to_string)
            .collect();
        let header = match self.header {
            RealIpHeader::XForwardedFor => {
                "X-Forwarded-For (the right-most address that is not a trusted proxy)"
            }
            RealIpHeader::XRealIp => "X-Real-IP",
        };
        format!(
            "forward-auth: calls from the trusted proxies {} name the client in {header}; each must write that header itself, never pass on its client's (README: Forward-auth behind a proxy)",
            proxies.join(", ")
        )
    }

    /// The client of a call that came from `peer` with `headers`: `peer` itself unless it is a
    /// trusted proxy; then the address the header gives, walking `X-Forwarded-For` from the
    /// right for as long as each address is a trusted proxy too. An entry that is not an
    /// address (`unknown`, an obfuscated name) stops the walk at the last address believed.
    pub fn resolve(&self, headers: &HeaderMap, peer: IpAddr) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.trusted_proxies.contains(peer) {
            return peer;
        }
        let values = |name: &str| {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect::<Vec<_>>()
        };
        match self.header {
            RealIpHeader::XRealIp => values("x-real-ip")
                .last()
                .and_then(|v| v.trim().parse::<IpAddr>().ok())
                .map_or(peer, |ip| ip.to_canonical()),
            RealIpHeader::XForwardedFor => {
                // Several header lines are one list, in order (RFC 9110 field combination).
                let lines = values("x-forwarded-for");
                let mut client = peer;
                for entry in lines.iter().rev().flat_map(|line| line.rsplit(',')) {
                    if !self.trusted_proxies.contains(client) {
                        break;
                    }
                    match entry.trim().parse::<IpAddr>() {
                        Ok(ip) => client = ip.to_canonical(),
                        Err(_) => break,
                    }
                }
                client
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn the_start_line_names_the_proxies_and_the_header_read() {
        assert!(
            ClientAddress::default()
                .describe()
                .contains("no --trusted-proxies")
        );
        let trusting = |header| ClientAddress {
            trusted_proxies: TrustedProxies::parse("10.0.0.0/8,127.0.0.1").expect("valid"),
            header,
        };
        let xff = trusting(RealIpHeader::XForwardedFor).describe();
        assert!(xff.contains("10.0.0.0/8, 127.0.0.1/32"), "{xff}");
        assert!(xff.contains("in X-Forwarded-For"), "{xff}");
        assert!(
            trusting(RealIpHeader::XRealIp)
                .describe()
                .contains("in X-Real-IP")
        );
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_str(value).expect("a value"));
        }
        h
    }

    fn trusting(list: &str, header: RealIpHeader) -> ClientAddress {
        ClientAddress {
            trusted_proxies: TrustedProxies::parse(list).expect("valid"),
            header,
        }
    }

    #[test]
    fn without_trusted_proxies_the_peer_is_the_client_whatever_the_headers_say() {
        let none = ClientAddress::default();
        let spoofed = headers(&[("x-forwarded-for", "10.57.1.1"), ("x-real-ip", "10.57.1.1")]);
        assert_eq!(none.resolve(&spoofed, ip("203.0.113.9")), ip("203.0.113.9"));
        // A trusted list that does not hold the peer changes nothing either.
        let other = trusting("192.168.0.0/16", RealIpHeader::XForwardedFor);
        assert_eq!(
            other.resolve(&spoofed, ip("203.0.113.9")),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn the_right_most_address_that_is_not_a_trusted_proxy_is_the_client() {
        let t = trusting("127.0.0.1, 10.0.0.0/8", RealIpHeader::XForwardedFor);
        // The client wrote 10.57.1.1 itself; nginx appended the address it saw.
        let h = headers(&[("x-forwarded-for", "10.57.1.1, 198.51.100.4")]);
        assert_eq!(t.resolve(&h, ip("127.0.0.1")), ip("198.51.100.4"));
        // Two trusted hops, then the client.
        let h = headers(&[("x-forwarded-for", "1.1.1.1, 198.51.100.4, 10.1.2.3")]);
        assert_eq!(t.resolve(&h, ip("127.0.0.1")), ip("198.51.100.4"));
        // Every hop trusted: the left-most address.
        let h = headers(&[("x-forwarded-for", "10.9.9.9,10.1.2.3")]);
        assert_eq!(t.resolve(&h, ip("127.0.0.1")), ip("10.9.9.9"));
        // Several header lines read as one list.
        let h = headers(&[
            ("x-forwarded-for", "198.51.100.4"),
            ("x-forwarded-for", "10.1.2.3"),
        ]);
        assert_eq!(t.resolve(&h, ip("127.0.0.1")), ip("198.51.100.4"));
        // No header: the trusted peer itself.
        assert_eq!(
            t.resolve(&HeaderMap::new(), ip("127.0.0.1")),
            ip("127.0.0.1")
        );
        // An entry that is not an address stops at the last one believed.
        let h = headers(&[("x-forwarded-for", "198.51.100.4, unknown, 10.1.2.3")]);
        assert_eq!(t.resolve(&h, ip("127.0.0.1")), ip("10.1.2.3"));
    }

    #[test]
    fn x_real_ip_is_read_only_from_a_trusted_proxy_and_only_when_asked() {
        let t = trusting("127.0.0.1", RealIpHeader::XRealIp);
        let h = headers(&[
            ("x-real-ip", "198.51.100.4"),
            ("x-forwarded-for", "10.57.1.1"),
        ]);
        assert_eq!(t.resolve(&h, ip("127.0.0.1")), ip("198.51.100.4"));
        assert_eq!(t.resolve(&h, ip("192.0.2.1")), ip("192.0.2.1"));
        let bad = headers(&[("x-real-ip", "not an address")]);
        assert_eq!(t.resolve(&bad, ip("127.0.0.1")), ip("127.0.0.1"));
    }

    #[test]
    fn ipv4_written_as_ipv6_is_ipv4() {
        let t = trusting("127.0.0.1", RealIpHeader::XForwardedFor);
        let h = headers(&[("x-forwarded-for", "::ffff:198.51.100.4")]);
        assert_eq!(t.resolve(&h, ip("::ffff:127.0.0.1")), ip("198.51.100.4"));
    }

    #[test]
    fn trusted_lists_parse_ranges_and_addresses_or_say_what_is_wrong() {
        let t = TrustedProxies::parse(" 10.0.0.0/8 ,fd00::/8,192.168.1.7").expect("valid");
        assert!(t.contains(ip("10.200.0.1")) && t.contains(ip("fd00::1")));
        assert!(t.contains(ip("192.168.1.7")) && !t.contains(ip("192.168.1.8")));
        assert!(TrustedProxies::parse("").expect("empty").is_empty());
        // Host bits are dropped, as nginx's set_real_ip_from does.
        assert!(
            TrustedProxies::parse("10.1.2.3/8")
                .expect("valid")
                .contains(ip("10.9.9.9"))
        );
        assert_eq!(
            TrustedProxies::parse("10.0.0.0/8,nginx").expect_err("a name"),
            "\"nginx\" is not an address range such as 10.0.0.0/8 or an address"
        );
    }
}
