//! Who runs this process, as lock records and key files name them.

/// The name of the user running this process: `$USER`, else `$LOGNAME`, else the name the
/// password database gives its real uid (a service or container often sets neither
/// variable); `None` when nothing names it.
pub fn current_user() -> Option<String> {
    user_named_by(|v| std::env::var(v).ok())
}

/// [`current_user`] with the environment's variables given by `var`.
fn user_named_by(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| var(v).filter(|u| !u.is_empty()))
        .or_else(|| uzers::get_current_username().map(|n| n.to_string_lossy().into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without `$USER` and `$LOGNAME` (a service, a container) the owner came out empty, and key
    /// files recorded "unknown": the password database names the uid.
    #[test]
    fn the_user_is_named_without_the_environment() {
        let from_passwd = uzers::get_current_username().map(|n| n.to_string_lossy().into_owned());
        assert!(from_passwd.is_some(), "the test's uid has no name");
        assert_eq!(user_named_by(|_| None), from_passwd);
        assert_eq!(user_named_by(|_| Some(String::new())), from_passwd);
        let env = |v: &str| (v == "LOGNAME").then(|| "logname".to_string());
        assert_eq!(user_named_by(env).as_deref(), Some("logname"));
        let env = |v: &str| Some(v.to_lowercase());
        assert_eq!(user_named_by(env).as_deref(), Some("user"));
    }
}
