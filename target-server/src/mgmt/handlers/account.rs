//! `--mode account`: CHAP accounts (user → secret) and their bindings to targets or, with
//! `GLOBAL_TID` (no `--tid`), to discovery sessions; `--outgoing` binds the one mutual-CHAP
//! user. Stored in the registry in the shape a CHAP authenticator reads
//! ([`crate::registry::Registry::chap_credentials`]).

use super::target::lookup;
use crate::mgmt::{Ctx, Reply};
use crate::registry::AuthBinding;
use tgtadm_wire::{ErrCode, GLOBAL_TID, Op, Payload, ReqHeader};

/// Accounts at most (tgtd has no fixed limit; this bounds memory).
const MAX_ACCOUNTS: usize = 4096;

pub fn handle(ctx: &Ctx, op: Op, h: &ReqHeader, p: &Payload) -> Reply {
    let reg = &ctx.registry;
    match op {
        Op::New => {
            let user = p.get("user").filter(|u| !u.is_empty());
            let pass = p.get("password").filter(|u| !u.is_empty());
            let (Some(user), Some(pass)) = (user, pass) else {
                return Err(ErrCode::InvalidRequest);
            };
            let mut a = reg.accounts();
            if a.secret(user).is_some() {
                return Err(ErrCode::UserExist);
            }
            if a.users.len() >= MAX_ACCOUNTS {
                return Err(ErrCode::TooManyUser);
            }
            a.users.insert(0, (user.to_string(), pass.to_string()));
            Ok(String::new())
        }
        Op::Delete => {
            let user = p.get("user").ok_or(ErrCode::InvalidRequest)?;
            {
                let mut a = reg.accounts();
                if a.secret(user).is_none() {
                    return Err(ErrCode::NoUser);
                }
                a.users.retain(|(u, _)| u != user);
                unbind_user(&mut a.discovery, user);
            }
            for t in reg.targets() {
                unbind_user(&mut t.mgmt().auth, user);
            }
            Ok(String::new())
        }
        Op::Show => {
            let a = reg.accounts();
            if a.users.is_empty() {
                return Ok(String::new()); // tgtd prints nothing at all then
            }
            let mut out = String::from("Account list:\n");
            for (u, _) in &a.users {
                out.push_str("    ");
                out.push_str(u);
                out.push('\n');
            }
            Ok(out)
        }
        Op::Bind | Op::Unbind => {
            let user = p.get("user").ok_or(ErrCode::InvalidRequest)?;
            let outgoing = h.ac_dir == 1;
            if reg.accounts().secret(user).is_none() {
                return Err(ErrCode::NoUser);
            }
            let apply = |b: &mut AuthBinding| -> Result<(), ErrCode> {
                if op == Op::Bind {
                    bind_user(b, user, outgoing)
                } else if outgoing {
                    if b.outgoing.as_deref() != Some(user) {
                        return Err(ErrCode::NoUser);
                    }
                    b.outgoing = None;
                    Ok(())
                } else {
                    let before = b.incoming.len();
                    b.incoming.retain(|u| u != user);
                    if before == b.incoming.len() {
                        return Err(ErrCode::NoUser);
                    }
                    Ok(())
                }
            };
            if h.tid == GLOBAL_TID {
                apply(&mut reg.accounts().discovery)?;
            } else {
                let t = lookup(ctx, h)?;
                apply(&mut t.mgmt().auth)?;
            }
            Ok(String::new())
        }
        _ => Err(ErrCode::UnsupportedOperation),
    }
}

fn bind_user(b: &mut AuthBinding, user: &str, outgoing: bool) -> Result<(), ErrCode> {
    if outgoing {
        if b.outgoing.is_some() {
            return Err(ErrCode::OutAccountExist);
        }
        b.outgoing = Some(user.to_string());
    } else {
        if b.incoming.iter().any(|u| u == user) {
            return Err(ErrCode::UserExist);
        }
        b.incoming.push(user.to_string());
    }
    Ok(())
}

fn unbind_user(b: &mut AuthBinding, user: &str) {
    b.incoming.retain(|u| u != user);
    if b.outgoing.as_deref() == Some(user) {
        b.outgoing = None;
    }
}
