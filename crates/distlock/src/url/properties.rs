//! Property tests of the URL helpers every store's parser stands on: no input makes them panic,
//! and no password, in the user-info or a parameter, survives [`redact`] however it is written.

use proptest::prelude::*;

use super::{
    Scheme, after_hosts, around_hosts, authority, for_driver, memory_store, parse_duration,
    percent_decode, redact, split_parameters, sqlite_path, with_hosts,
};

/// Strings made of the pieces URLs are made of, so that the parsers' branches are reached (an
/// arbitrary string rarely has a `://`).
fn url_like() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("redis://".to_string()),
        Just("redis-sentinel://".to_string()),
        Just("etcd://".to_string()),
        Just("zk://".to_string()),
        Just("postgres://".to_string()),
        Just("sqlite:".to_string()),
        Just("memory:".to_string()),
        Just("@".to_string()),
        Just(":".to_string()),
        Just("/".to_string()),
        Just("?".to_string()),
        Just("&".to_string()),
        Just("=".to_string()),
        Just("#".to_string()),
        Just(",".to_string()),
        Just("%".to_string()),
        Just("%4".to_string()),
        Just("%zz".to_string()),
        Just("[::1]".to_string()),
        Just("é".to_string()),
        "[a-z0-9.]{0,6}",
    ];
    proptest::collection::vec(piece, 0..14).prop_map(|pieces| pieces.concat())
}

/// A password: anything but what ends the user-info in every reading (`@`), and long enough
/// that it cannot occur in the rest of the URL by chance.
fn password() -> impl Strategy<Value = String> {
    "[A-Za-z0-9!$'()*+,;=:/?#%~._-]{12,24}"
        .prop_filter("a 12-character run of the URL's own text", |p| {
            !p.contains('@') && p.chars().filter(|c| c.is_ascii_alphanumeric()).count() >= 8
        })
}

proptest! {
    #[test]
    fn no_url_makes_a_parser_panic(url in prop_oneof![url_like(), any::<String>()]) {
        let _ = Scheme::of(&url);
        let _ = redact(&url);
        let _ = for_driver(&url);
        let _ = authority(&url, "redis", "redis://host");
        let _ = with_hosts(&url, "127.0.0.1:1");
        let _ = split_parameters(&url);
        let _ = sqlite_path(&url);
        let _ = memory_store(&url);
        let _ = around_hosts(&url);
        let _ = after_hosts(&url);
        let _ = percent_decode(&url);
        let _ = parse_duration(&url);
    }

    #[test]
    fn a_user_info_password_never_shows(
        scheme in prop_oneof![Just("redis"), Just("postgres"), Just("mysql"), Just("etcd"), Just("zk")],
        user in "[a-z]{1,8}",
        password in password(),
        rest in "(/[a-z]{0,6})?(\\?[a-z]{1,5}=[a-z0-9]{0,5})?",
    ) {
        let url = format!("{scheme}://{user}:{password}@127.0.0.1:1{rest}");
        let shown = redact(&url);
        prop_assert!(!shown.contains(&password), "{} shows {}", shown, password);
    }

    #[test]
    fn a_parameter_password_never_shows(
        name in prop_oneof![
            Just("password"), Just("sentinel_password"), Just("pass"), Just("sslpassword"),
            Just("Password"), Just("token"),
        ],
        password in "[A-Za-z0-9]{12,24}",
        before in "([a-z]{1,5}=[a-z0-9]{0,5}&)?",
    ) {
        let url = format!("redis://127.0.0.1:1/0?{before}{name}={password}");
        let shown = redact(&url);
        prop_assert!(!shown.contains(&password), "{} shows {}", shown, password);
    }
}
