//! Which URLs and addresses a webhook endpoint may name: the URL rule.
//! An address is classed by the IANA special-purpose registries (and the
//! IPv4 an IPv6 address carries); a URL is parsed by the WHATWG rules, so
//! the host checked is the host connected to. Pure: the addresses a name
//! resolves to, and whether an address is the host's own, are asked by the
//! caller (`webhooks::send`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What an address is, as far as the URL rule cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// Anything not below: may be sent to.
    Public,
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16.
    Private,
    /// 100.64.0.0/10 (carrier-grade NAT).
    SharedAddressSpace,
    /// 169.254.0.0/16 (where cloud metadata services answer), fe80::/10.
    LinkLocal,
    /// fc00::/7, and the deprecated site-local fec0::/10.
    UniqueLocal,
    /// 224.0.0.0/4, ff00::/8.
    Multicast,
    /// 0.0.0.0, ::.
    Unspecified,
    /// 0.0.0.0/8 ("this network") and 240.0.0.0/4 (reserved, broadcast
    /// included); IPv6 outside the global unicast 2000::/3.
    Reserved,
    /// The IANA special-purpose registries' other ranges that are not
    /// globally reachable: 192.0.0.0/24 (IETF protocol assignments, but
    /// for the anycast .9 and .10), 198.18.0.0/15 (benchmarking),
    /// 192.88.99.0/24 (the deprecated 6to4 relay), 100::/64 (discard only),
    /// 2001::/23 (IETF protocol assignments, Teredo included, but for its
    /// global blocks), 5f00::/16 (SRv6 SIDs), 64:ff9b:1::/48 (local-use
    /// IPv4/IPv6 translation).
    SpecialPurpose,
    /// 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32,
    /// 3fff::/20: for examples. An endpoint may name one (the book's do),
    /// and nothing is ever sent to it.
    Documentation,
    /// An address of the host the ledger runs on (found by asking the
    /// host, not by range: a public address of its own interface too).
    ThisHost,
}

impl AddressClass {
    pub fn as_str(self) -> &'static str {
        match self {
            AddressClass::Public => "public",
            AddressClass::Loopback => "loopback",
            AddressClass::Private => "private",
            AddressClass::SharedAddressSpace => "shared address space (100.64.0.0/10)",
            AddressClass::LinkLocal => "link-local",
            AddressClass::UniqueLocal => "unique-local",
            AddressClass::Multicast => "multicast",
            AddressClass::Unspecified => "unspecified",
            AddressClass::Reserved => "reserved",
            AddressClass::SpecialPurpose => "special-purpose",
            AddressClass::Documentation => "documentation",
            AddressClass::ThisHost => "this host",
        }
    }

    /// The class with its article, for messages ("a loopback address").
    pub fn described(self) -> &'static str {
        match self {
            AddressClass::Public => "a public address",
            AddressClass::Loopback => "a loopback address",
            AddressClass::Private => "a private address",
            AddressClass::SharedAddressSpace => "a shared address space (100.64.0.0/10) address",
            AddressClass::LinkLocal => "a link-local address",
            AddressClass::UniqueLocal => "a unique-local address",
            AddressClass::Multicast => "a multicast address",
            AddressClass::Unspecified => "an unspecified address",
            AddressClass::Reserved => "a reserved address",
            AddressClass::SpecialPurpose => {
                "a special-purpose address (not globally reachable, IANA)"
            }
            AddressClass::Documentation => "a documentation address",
            AddressClass::ThisHost => "an address of the ledger's own host",
        }
    }

    /// Whether an operator's `--webhooks-allow-private` lets it through:
    /// the ranges of one's own network, never an address no web server
    /// answers at (multicast, unspecified, reserved).
    pub fn private(self) -> bool {
        matches!(
            self,
            AddressClass::Loopback
                | AddressClass::Private
                | AddressClass::SharedAddressSpace
                | AddressClass::LinkLocal
                | AddressClass::UniqueLocal
                | AddressClass::ThisHost
        )
    }
}

/// The class of an IPv4 address.
pub fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    let [a, b, c, d] = ip.octets();
    if ip.is_unspecified() {
        AddressClass::Unspecified
    } else if ip.is_loopback() {
        AddressClass::Loopback
    } else if ip.is_private() {
        AddressClass::Private
    } else if a == 100 && (64..128).contains(&b) {
        AddressClass::SharedAddressSpace
    } else if ip.is_link_local() {
        AddressClass::LinkLocal
    } else if ip.is_multicast() {
        AddressClass::Multicast
    } else if a == 0 || a >= 240 {
        AddressClass::Reserved
    } else if (a, b, c) == (192, 0, 2) || (a, b, c) == (198, 51, 100) || (a, b, c) == (203, 0, 113)
    {
        AddressClass::Documentation
    } else if ((a, b, c) == (192, 0, 0) && d != 9 && d != 10)
        || (a == 198 && (b == 18 || b == 19))
        || (a, b, c) == (192, 88, 99)
    {
        AddressClass::SpecialPurpose
    } else {
        AddressClass::Public
    }
}

/// The class of an address. An IPv6 address that carries an IPv4 one
/// (IPv4-mapped `::ffff:a.b.c.d`, the deprecated IPv4-compatible
/// `::a.b.c.d`, NAT64's `64:ff9b::a.b.c.d`) is the class of that IPv4
/// address: `::ffff:127.0.0.1` is loopback.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    let s = ip.segments();
    if ip.is_unspecified() {
        return AddressClass::Unspecified;
    }
    if ip.is_loopback() {
        return AddressClass::Loopback;
    }
    let embedded = |s: &[u16; 8]| Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    // ::ffff:a.b.c.d (mapped), ::a.b.c.d (compatible), ::ffff:0:a.b.c.d
    // (translated), 64:ff9b::a.b.c.d (NAT64).
    if (s[..5] == [0; 5] && (s[5] == 0xffff || s[5] == 0))
        || (s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0)
        || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
    {
        return classify_v4(embedded(&s));
    }
    // 64:ff9b:1::/48, local-use translation: this network's own IPv4.
    if s[..3] == [0x64, 0xff9b, 1] {
        return match classify_v4(embedded(&s)) {
            AddressClass::Public => AddressClass::Private,
            class => class,
        };
    }
    // 2002::/16, 6to4: the IPv4 address in its next 32 bits.
    if s[0] == 0x2002 {
        let v4 = Ipv4Addr::from((u32::from(s[1]) << 16) | u32::from(s[2]));
        return classify_v4(v4);
    }
    match s[0] {
        x if x & 0xff00 == 0xff00 => AddressClass::Multicast,
        x if x & 0xffc0 == 0xfe80 => AddressClass::LinkLocal,
        x if x & 0xfe00 == 0xfc00 || x & 0xffc0 == 0xfec0 => AddressClass::UniqueLocal,
        0x0100 if s[1..4] == [0, 0, 0] => AddressClass::SpecialPurpose,
        0x2001 if s[1] == 0x0db8 => AddressClass::Documentation,
        0x3fff if s[1] < 0x1000 => AddressClass::Documentation,
        0x2001 if s[1] < 0x0200 && !global_ietf_block(&s) => AddressClass::SpecialPurpose,
        0x5f00 => AddressClass::SpecialPurpose,
        x if x & 0xe000 == 0x2000 => AddressClass::Public,
        _ => AddressClass::Reserved,
    }
}

/// The blocks of 2001::/23 the IPv6 registry marks globally reachable:
/// 2001:1::1 and ::2 (anycast), 2001:3::/32 (AMT), 2001:4:112::/48
/// (AS112), 2001:20::/28 to 2001:3f::/28 (ORCHIDv2, drone remote ID).
fn global_ietf_block(s: &[u16; 8]) -> bool {
    (s[1] == 1 && s[2..7] == [0; 5] && (s[7] == 1 || s[7] == 2))
        || s[1] == 3
        || (s[1] == 4 && s[2] == 0x0112)
        || (0x20..0x40).contains(&s[1])
}

/// Why a URL or an address may not be sent to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("the url is not a valid absolute URL: {0}")]
    Unparsable(String),
    #[error("the url must be at most {MAX_URL_LEN} characters")]
    TooLong,
    #[error("the url's scheme must be http or https, not {0}")]
    Scheme(String),
    #[error("the url must not carry a user name or password")]
    UserInfo,
    #[error("the url must name a host")]
    NoHost,
    #[error(
        "{address} is {}; webhooks are not sent into the ledger's own network unless the operator allows private targets (--webhooks-allow-private)",
        class.described()
    )]
    PrivateAddress {
        address: IpAddr,
        class: AddressClass,
    },
    #[error("{address} is {}, which no receiver answers at", class.described())]
    Unroutable {
        address: IpAddr,
        class: AddressClass,
    },
}

/// Longest URL an endpoint may have.
pub const MAX_URL_LEN: usize = 2048;

/// Whether `address` may be sent to.
pub fn check_address(address: IpAddr, allow_private: bool) -> Result<(), UrlError> {
    match classify(address) {
        AddressClass::Public => Ok(()),
        class if class.private() && allow_private => Ok(()),
        class if class.private() => Err(UrlError::PrivateAddress { address, class }),
        class => Err(UrlError::Unroutable { address, class }),
    }
}

/// Where an endpoint's URL points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// An address written in the URL: checked here, once and for all.
    Address(IpAddr),
    /// A name: each address it resolves to is checked when it is resolved,
    /// at registration and again before every connection.
    Name(String),
}

/// An endpoint URL that passed the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The URL as normalised by the WHATWG rules (`http://0x7f.1/` is
    /// `http://127.0.0.1/`: the host checked is the host connected to).
    pub url: String,
    pub https: bool,
    pub host: Host,
    pub port: u16,
    /// Path and query, as sent in the request line.
    pub path_and_query: String,
}

/// The URL rule: absolute, http or https, no user name or password, a host;
/// a host written as an address must be one that may be sent to (a name is
/// checked once resolved, [`check_address`]).
pub fn parse_url(raw: &str, allow_private: bool) -> Result<Target, UrlError> {
    if raw.len() > MAX_URL_LEN {
        return Err(UrlError::TooLong);
    }
    let url = url::Url::parse(raw).map_err(|e| UrlError::Unparsable(e.to_string()))?;
    let https = match url.scheme() {
        "http" => false,
        "https" => true,
        other => return Err(UrlError::Scheme(other.to_owned())),
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlError::UserInfo);
    }
    let host = match url.host() {
        None => return Err(UrlError::NoHost),
        Some(url::Host::Ipv4(v4)) => Host::Address(IpAddr::V4(v4)),
        Some(url::Host::Ipv6(v6)) => Host::Address(IpAddr::V6(v6)),
        Some(url::Host::Domain("")) => return Err(UrlError::NoHost),
        Some(url::Host::Domain(d)) => Host::Name(d.to_owned()),
    };
    if let Host::Address(address) = host {
        // A documentation address may be registered (examples name one);
        // nothing is ever sent to it (the sender checks every address).
        match check_address(address, allow_private) {
            Err(UrlError::Unroutable {
                class: AddressClass::Documentation,
                ..
            }) => {}
            checked => checked?,
        }
    }
    let port = url
        .port_or_known_default()
        .unwrap_or(if https { 443 } else { 80 });
    let path_and_query = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    Ok(Target {
        url: url.to_string(),
        https,
        host,
        port,
        path_and_query,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_url_rule_refuses_other_schemes_user_info_and_hostless_urls() {
        let refused = |u: &str| parse_url(u, true).unwrap_err();
        assert!(matches!(refused("ftp://example.com/"), UrlError::Scheme(s) if s == "ftp"));
        assert!(matches!(refused("file:///etc/passwd"), UrlError::Scheme(_)));
        assert_eq!(refused("http://user:pw@example.com/"), UrlError::UserInfo);
        assert_eq!(refused("http://user@example.com/"), UrlError::UserInfo);
        assert!(matches!(refused("/relative"), UrlError::Unparsable(_)));
        assert!(matches!(refused("not a url"), UrlError::Unparsable(_)));
        let long = format!("http://example.com/{}", "a".repeat(MAX_URL_LEN));
        assert_eq!(refused(&long), UrlError::TooLong);
    }

    #[test]
    fn a_url_is_normalised_and_split_for_sending() {
        let t = parse_url("HTTPS://Hooks.Example.com/in?x=1#frag", false).unwrap();
        assert!(t.https);
        assert_eq!(t.host, Host::Name("hooks.example.com".into()));
        assert_eq!(t.port, 443);
        assert_eq!(t.path_and_query, "/in?x=1");
        let t = parse_url("http://203.0.113.9:8080", false).unwrap();
        assert_eq!(t.host, Host::Address("203.0.113.9".parse().unwrap()));
        assert_eq!((t.port, t.path_and_query.as_str()), (8080, "/"));
    }

    #[test]
    fn loopback_and_private_addresses_are_refused_unless_allowed() {
        for url in [
            "http://127.0.0.1:9/",
            "http://[::1]/",
            "http://10.1.2.3/",
            "http://172.16.0.1/",
            "http://172.31.255.255/",
            "http://192.168.1.1/",
            "http://100.64.0.1/",
            "http://169.254.169.254/latest/meta-data",
            "http://[fe80::1]/",
            "http://[fd00::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:10.0.0.1]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            // Spellings the WHATWG parser reads as 127.0.0.1.
            "http://2130706433/",
            "http://0x7f.1/",
            "http://127.1/",
        ] {
            assert!(
                matches!(parse_url(url, false), Err(UrlError::PrivateAddress { .. })),
                "{url}: {:?}",
                parse_url(url, false)
            );
            assert!(parse_url(url, true).is_ok(), "{url}");
        }
    }

    #[test]
    fn addresses_nobody_answers_at_are_refused_even_when_private_ones_are_allowed() {
        for url in [
            "http://0.0.0.0/",
            "http://[::]/",
            "http://224.0.0.1/",
            "http://[ff02::1]/",
            "http://255.255.255.255/",
            "http://[::ffff:0.0.0.0]/",
            "http://0.1.2.3/",
        ] {
            assert!(
                matches!(parse_url(url, true), Err(UrlError::Unroutable { .. })),
                "{url}: {:?}",
                parse_url(url, true)
            );
        }
    }

    #[test]
    fn the_edges_of_the_private_ranges_are_public() {
        for ip in [
            "172.15.255.255",
            "172.32.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "11.0.0.0",
            "9.255.255.255",
            "192.169.0.0",
            "223.255.255.255",
            "192.0.0.9",
            "192.0.0.10",
            "192.0.1.0",
            "198.17.255.255",
            "198.20.0.0",
            "2000::1",
            "2a00:1450::1",
            "3ffe::1",
            "2001:4:112::1",
            "2001:1::1",
            "2001:200::1",
            "2002:808:808::1",
            "64:ff9b::808:808",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(classify(ip), AddressClass::Public, "{ip}");
        }
    }

    #[test]
    fn the_registries_non_global_ranges_are_never_sent_to_even_when_private_ones_are_allowed() {
        for (ip, class) in [
            ("192.0.0.1", AddressClass::SpecialPurpose),
            ("192.0.0.255", AddressClass::SpecialPurpose),
            ("198.18.0.1", AddressClass::SpecialPurpose),
            ("198.19.255.255", AddressClass::SpecialPurpose),
            ("192.88.99.1", AddressClass::SpecialPurpose),
            ("100::1", AddressClass::SpecialPurpose),
            ("2001::1", AddressClass::SpecialPurpose),
            ("2001:2::1", AddressClass::SpecialPurpose),
            ("5f00::1", AddressClass::SpecialPurpose),
            ("192.0.2.1", AddressClass::Documentation),
            ("198.51.100.7", AddressClass::Documentation),
            ("203.0.113.10", AddressClass::Documentation),
            ("2001:db8::1", AddressClass::Documentation),
            ("3fff::1", AddressClass::Documentation),
            ("fbff::1", AddressClass::Reserved),
            ("4000::1", AddressClass::Reserved),
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(classify(ip), class, "{ip}");
            assert!(
                matches!(check_address(ip, true), Err(UrlError::Unroutable { .. })),
                "{ip}"
            );
        }
    }

    #[test]
    fn ipv6_forms_of_this_networks_ipv4_addresses_are_judged_as_those() {
        for (ip, class) in [
            // NAT64 local-use: this network's own translation.
            ("64:ff9b:1::a00:1", AddressClass::Private),
            ("64:ff9b:1::808:808", AddressClass::Private),
            ("64:ff9b:1::7f00:1", AddressClass::Loopback),
            // 6to4 of private and loopback IPv4.
            ("2002:a00:1::1", AddressClass::Private),
            ("2002:7f00:1::1", AddressClass::Loopback),
            ("2002:a9fe:a9fe::1", AddressClass::LinkLocal),
            // IPv4-translated (::ffff:0:a.b.c.d).
            ("::ffff:0:7f00:1", AddressClass::Loopback),
            ("::ffff:0:a00:1", AddressClass::Private),
            ("::ffff:0:c612:1", AddressClass::SpecialPurpose),
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(classify(ip), class, "{ip}");
            assert!(check_address(ip, false).is_err(), "{ip}");
        }
    }

    #[test]
    fn a_documentation_address_may_be_registered_and_is_never_sent_to() {
        for url in [
            "http://203.0.113.10/hook",
            "http://[2001:db8::7]/hook",
            "http://192.0.2.1/",
        ] {
            assert!(parse_url(url, false).is_ok(), "{url}");
        }
        for url in [
            "http://198.18.0.1/",
            "http://192.0.0.8/",
            "http://[64:ff9b:1::a00:1]/",
            "http://[2002:a00:1::1]/",
        ] {
            assert!(parse_url(url, false).is_err(), "{url}");
        }
    }

    proptest! {
        #[test]
        fn an_ipv6_form_of_an_ipv4_address_is_judged_as_that_address(bits in any::<u32>()) {
            let v4 = Ipv4Addr::from(bits);
            let class = classify_v4(v4);
            prop_assert_eq!(classify(IpAddr::V6(v4.to_ipv6_mapped())), class);
            let [a, b, c, d] = bits.to_be_bytes();
            let nat64 = Ipv6Addr::new(
                0x64, 0xff9b, 0, 0, 0, 0,
                u16::from_be_bytes([a, b]),
                u16::from_be_bytes([c, d]),
            );
            prop_assert_eq!(classify(IpAddr::V6(nat64)), class);
        }

        #[test]
        fn every_address_of_a_private_range_is_refused_unless_allowed(
            range in 0usize..6,
            low in any::<u32>(),
        ) {
            // (network, prefix length) of the ranges the rule names.
            let (net, len): (u32, u32) = [
                (0x0a00_0000, 8), (0xac10_0000, 12), (0xc0a8_0000, 16),
                (0x6440_0000, 10), (0x7f00_0000, 8), (0xa9fe_0000, 16),
            ][range];
            let ip = IpAddr::V4(Ipv4Addr::from(net | (low >> len)));
            prop_assert!(
                matches!(check_address(ip, false), Err(UrlError::PrivateAddress { .. })),
                "{} {:?}",
                ip,
                classify(ip)
            );
            prop_assert_eq!(check_address(ip, true), Ok(()));
        }
    }
}
