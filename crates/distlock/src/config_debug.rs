//! `Debug` for the stores' typed configurations, which hold passwords: every field in the
//! order the struct declares it, a secret only as whether there is one, so that a whole
//! configuration can go into a log.

/// `impl Debug for $config` showing the fields named, in that order. A field marked `: secret`
/// (an `Option`) shows as `Some("***")` or `None`; one marked `: keys` (a map whose values may
/// hold a secret under any name) shows its keys only.
macro_rules! debug_without_secrets {
    ($config:ident { $($field:ident $(: $view:ident)?),* $(,)? }) => {
        impl std::fmt::Debug for $config {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($config))
                    $(.field(
                        stringify!($field),
                        &$crate::config_debug::field_shown!(self.$field $(, $view)?),
                    ))*
                    .finish()
            }
        }
    };
}
pub(crate) use debug_without_secrets;

/// One field's value as `debug_without_secrets` shows it.
macro_rules! field_shown {
    ($value:expr) => {
        $value
    };
    ($value:expr, secret) => {
        $value.as_ref().map(|_| "***")
    };
    ($value:expr, keys) => {
        $value.keys().collect::<Vec<_>>()
    };
}
pub(crate) use field_shown;

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    struct Login {
        user: Option<String>,
        password: Option<String>,
        parameters: BTreeMap<String, String>,
        port: u16,
    }

    debug_without_secrets!(Login {
        user,
        password: secret,
        parameters: keys,
        port
    });

    #[test]
    fn fields_in_order_with_the_secrets_hidden() {
        let login = Login {
            user: Some("app".into()),
            password: Some("hunter2".into()),
            parameters: BTreeMap::from([("token".into(), "s3cret".into())]),
            port: 5432,
        };
        assert_eq!(
            format!("{login:?}"),
            r#"Login { user: Some("app"), password: Some("***"), parameters: ["token"], port: 5432 }"#
        );
        let none = Login {
            password: None,
            ..login
        };
        assert!(format!("{none:?}").contains("password: None"), "{none:?}");
    }
}
