//! `Host` and `:authority` values, read the same way by every front end.

/// `host[:port]` without the port. `[v6]:port` and `[v6]` lose their brackets too; a bare IPv6
/// address, whose colons are its own, is left whole.
pub(crate) fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split_once(']').map_or(host, |(ip, _)| ip);
    }
    match host.rsplit_once(':') {
        Some((h, port)) if !h.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_come_off_and_ipv6_addresses_stay_whole() {
        assert_eq!(strip_port("example.com:8080"), "example.com");
        assert_eq!(strip_port("example.com"), "example.com");
        assert_eq!(strip_port("10.0.0.1:80"), "10.0.0.1");
        assert_eq!(strip_port("[::1]:443"), "::1");
        assert_eq!(strip_port("[::1]"), "::1");
        assert_eq!(strip_port("::1"), "::1");
        assert_eq!(strip_port("fd00::7"), "fd00::7");
        // A name with a non-numeric "port" is not a host:port.
        assert_eq!(strip_port("weird:name"), "weird:name");
    }
}
