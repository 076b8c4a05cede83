//! tgtadm's per-mode checks before it talks to the daemon: required options, the options
//! each mode and operation allows, and their messages.

use tgtadm_wire::{Mode, Op};

use super::{Args, Fail, fail, mode_name, op_name};

/// The per-mode checks tgtadm makes before it talks to the daemon.
pub(super) fn validate(a: &mut Args) -> Result<(Mode, Op), Fail> {
    let Some(op) = a.op else {
        return Err(fail("specify the operation type"));
    };
    let Some(mode) = a.mode else {
        return Err(fail("specify the mode"));
    };
    let allowed = |a: &Args, set: &str| -> Result<(), Fail> {
        for &c in &a.letters {
            if c != 'd' && !set.contains(c) {
                return Err(fail(format!(
                    "{} mode: option '-{c}' is not allowed/supported",
                    mode_name(mode)
                )));
            }
        }
        Ok(())
    };
    let unsupported = || {
        fail(format!(
            "operation {} not supported in {} mode",
            op_name(op),
            mode_name(mode)
        ))
    };
    let need_tid = |a: &Args| -> Result<(), Fail> {
        match a.tid {
            0 => Err(fail("'tid' cannot be 0")),
            t if t < 0 => Err(fail("'tid' option is necessary")),
            _ => Ok(()),
        }
    };
    let name_value = |a: &Args| -> Result<(), Fail> {
        if a.name.is_none() || a.value.is_none() {
            return Err(fail("update operation requires 'name' and 'value' options"));
        }
        Ok(())
    };
    match mode {
        Mode::System => {
            if op == Op::Update {
                allowed(a, "LmonvC")?;
                name_value(a)?;
            }
        }
        Mode::Target => {
            if op != Op::Show {
                need_tid(a)?;
            }
            match op {
                Op::New => {
                    allowed(a, "LmotTC")?;
                    if a.targetname.is_none() {
                        return Err(fail(
                            "creating new target requires a name, use --targetname",
                        ));
                    }
                }
                Op::Delete => allowed(a, "LmotCF")?,
                Op::Show | Op::Stats => allowed(a, "LmotC")?,
                Op::Bind | Op::Unbind => {
                    allowed(a, "LmotIQBHC")?;
                    if a.address.is_none() && a.iqn.is_none() && a.bus.is_none() {
                        return Err(fail(format!(
                            "{} operation requires initiator-address, initiator-nameor bus",
                            op_name(op)
                        )));
                    }
                }
                Op::Update => {
                    allowed(a, "LmotnvC")?;
                    name_value(a)?;
                }
                _ => return Err(unsupported()),
            }
        }
        Mode::Account => match op {
            Op::New => {
                allowed(a, "LmoupfC")?;
                if a.user.is_none() || a.password.is_none() {
                    return Err(fail("'user' and 'password' options are required"));
                }
            }
            Op::Show => allowed(a, "LmoC")?,
            Op::Delete => {
                allowed(a, "LmouC")?;
                if a.user.is_none() {
                    return Err(fail("'user' option is necessary"));
                }
            }
            Op::Bind | Op::Unbind => {
                allowed(a, "LmotuOC")?;
                if a.user.is_none() {
                    return Err(fail("'user' option is necessary"));
                }
                if a.tid == -1 {
                    a.tid = i64::from(tgtadm_wire::GLOBAL_TID);
                }
            }
            _ => return Err(unsupported()),
        },
        Mode::Device => {
            need_tid(a)?;
            if a.lun == u64::MAX {
                return Err(fail("'lun' option is necessary"));
            }
            match op {
                Op::New => allowed(a, "LmofytlbEYCS")?,
                Op::Delete | Op::Stats => allowed(a, "LmotlC")?,
                Op::Update => allowed(a, "LmofytlPC")?,
                _ => return Err(unsupported()),
            }
        }
        Mode::Portal => match op {
            Op::New | Op::Delete => {
                allowed(a, "LmoCP")?;
                if a.portal_ops.is_none() {
                    return Err(fail("you must specify --param portal=<portal>"));
                }
            }
            Op::Show => allowed(a, "LmoC")?,
            _ => return Err(unsupported()),
        },
        Mode::Lld => match op {
            Op::Start | Op::Stop | Op::Show => allowed(a, "LmoC")?,
            _ => {
                return Err(fail(format!(
                    "option {} not supported in lld mode",
                    op.as_u32()
                )));
            }
        },
        Mode::Session | Mode::Connection => {}
    }
    Ok((mode, op))
}
