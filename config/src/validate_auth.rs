//! Validation of the CHAP parts of a configuration: the `accounts` list
//! (unique, well-formed users and secrets) and the user names that targets
//! and `discovery_auth` refer to.

use crate::auth::check_chap_field;
use crate::model::Account;
use crate::raw::{RawAccount, RawAuth};
use crate::validate::{Ctx, R, item_path};

/// `accounts:`: unique user names, well-formed names and secrets.
pub(crate) fn accounts(ctx: &Ctx<'_>, raw: Vec<RawAccount>) -> R<Vec<Account>> {
    let mut out: Vec<Account> = Vec::new();
    for (i, a) in raw.into_iter().enumerate() {
        let p = format!("accounts[{i}]");
        check_chap_field("a user name", &a.user).map_err(|m| ctx.err(&format!("{p}.user"), m))?;
        check_chap_field("a CHAP secret", &a.password)
            .map_err(|m| ctx.err(&format!("{p}.password"), m))?;
        if let Some(k) = out.iter().position(|o| o.user == a.user) {
            return Err(ctx.err(
                &format!("{p}.user"),
                format!(
                    "duplicate account {:?}, already defined by accounts[{k}]",
                    a.user
                ),
            ));
        }
        out.push(Account {
            user: a.user,
            password: a.password,
        });
    }
    Ok(out)
}

/// `incoming_users` / `outgoing_user` at `base` (a target or `discovery_auth`):
/// every user must be an account, listed once.
pub(crate) fn auth(
    ctx: &Ctx<'_>,
    base: &str,
    a: &RawAuth,
    accounts: &[Account],
) -> R<(Vec<String>, Option<String>)> {
    let known = |path: &str, u: &str| -> R<()> {
        if accounts.iter().any(|x| x.user == u) {
            Ok(())
        } else {
            Err(ctx.err(
                path,
                format!("no account {u:?} (define it under accounts: with a user and password)"),
            ))
        }
    };
    let mut incoming: Vec<String> = Vec::new();
    if let Some(l) = &a.incoming_users {
        let p = format!("{base}.incoming_users");
        for (j, u) in l.items.iter().enumerate() {
            let ip = item_path(&p, l, j);
            known(&ip, u)?;
            if incoming.contains(u) {
                return Err(ctx.err(&ip, format!("user {u:?} is listed twice")));
            }
            incoming.push(u.clone());
        }
    }
    if let Some(u) = &a.outgoing_user {
        known(&format!("{base}.outgoing_user"), u)?;
    }
    Ok((incoming, a.outgoing_user.clone()))
}
