//! Persistent reservation state of one logical unit (SPC-4 5.9): registrations (I_T nexus
//! and reservation key), the persistent reservation (type, holder), the PRgeneration
//! counter and the activate-persist-through-power-loss (APTPL) flag, plus the access rule
//! that decides, for each reservation type, whether a command from a given I_T nexus
//! conflicts (SPC-4 5.9.1 and table 53 "SPC commands that are allowed in the presence of
//! various reservations", SBC-3 table 13).

use crate::nexus::{Ident, PortPair};

/// Persistent reservation types (SPC-4 table 174).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrType {
    WriteExclusive,
    ExclusiveAccess,
    WriteExclusiveRegistrantsOnly,
    ExclusiveAccessRegistrantsOnly,
    WriteExclusiveAllRegistrants,
    ExclusiveAccessAllRegistrants,
}

impl PrType {
    /// Every type, in code order.
    pub const ALL: [PrType; 6] = [
        PrType::WriteExclusive,
        PrType::ExclusiveAccess,
        PrType::WriteExclusiveRegistrantsOnly,
        PrType::ExclusiveAccessRegistrantsOnly,
        PrType::WriteExclusiveAllRegistrants,
        PrType::ExclusiveAccessAllRegistrants,
    ];

    /// The TYPE field value.
    pub const fn code(self) -> u8 {
        match self {
            PrType::WriteExclusive => 1,
            PrType::ExclusiveAccess => 3,
            PrType::WriteExclusiveRegistrantsOnly => 5,
            PrType::ExclusiveAccessRegistrantsOnly => 6,
            PrType::WriteExclusiveAllRegistrants => 7,
            PrType::ExclusiveAccessAllRegistrants => 8,
        }
    }

    /// The type with TYPE field value `code`.
    pub fn from_code(code: u8) -> Option<Self> {
        PrType::ALL.into_iter().find(|t| t.code() == code)
    }

    /// All-registrants types: every registered I_T nexus is a reservation holder.
    pub const fn all_registrants(self) -> bool {
        matches!(
            self,
            PrType::WriteExclusiveAllRegistrants | PrType::ExclusiveAccessAllRegistrants
        )
    }

    /// Registrants-only types.
    pub const fn registrants_only(self) -> bool {
        matches!(
            self,
            PrType::WriteExclusiveRegistrantsOnly | PrType::ExclusiveAccessRegistrantsOnly
        )
    }

    /// Exclusive-access types: reads conflict too.
    pub const fn exclusive_access(self) -> bool {
        matches!(
            self,
            PrType::ExclusiveAccess
                | PrType::ExclusiveAccessRegistrantsOnly
                | PrType::ExclusiveAccessAllRegistrants
        )
    }
}

/// How a command is treated in the presence of a reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Never conflicts with a persistent reservation (INQUIRY, REPORT LUNS, REQUEST SENSE,
    /// TEST UNIT READY, READ CAPACITY, MAINTENANCE IN, PERSISTENT RESERVE IN/OUT).
    Always,
    /// Reads the medium or reports its parameters (READ, VERIFY, MODE SENSE): conflicts
    /// with exclusive-access types.
    Read,
    /// Changes the medium or the logical unit (WRITE, WRITE AND VERIFY, SYNCHRONIZE CACHE,
    /// MODE SELECT): conflicts with every type.
    Write,
}

/// One registration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Registration {
    pub nexus: PortPair,
    pub key: u64,
}

/// The persistent reservation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub ty: PrType,
    /// The holder (for all-registrants types: the nexus that reserved; every registrant
    /// holds the reservation).
    pub holder: PortPair,
}

/// Most registrations kept; beyond, REGISTER fails with INSUFFICIENT REGISTRATION
/// RESOURCES.
pub const MAX_REGISTRATIONS: usize = 1024;

/// The whole persistent reservation state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PrState {
    /// PRgeneration (SPC-4 6.15.2): incremented by every REGISTER, REGISTER AND IGNORE
    /// EXISTING KEY, CLEAR, PREEMPT, PREEMPT AND ABORT and REGISTER AND MOVE that succeeds
    /// (not by RESERVE or RELEASE, nor by a REGISTER that changes nothing).
    pub generation: u32,
    /// APTPL as last set by a REGISTER / REGISTER AND MOVE.
    pub aptpl: bool,
    /// Registrations in the order they were made.
    pub regs: Vec<Registration>,
    pub res: Option<Reservation>,
    /// The I_T nexus holding the SPC-2 (RESERVE / RELEASE) reservation. Not a persistent
    /// reservation: kept here so that the gateways sharing a logical unit share it too,
    /// never restored from an APTPL file.
    pub spc2: Option<PortPair>,
}

impl PrState {
    /// The reservation key `p` is registered with.
    pub fn key_of(&self, p: &impl Ident) -> Option<u64> {
        self.regs.iter().find(|r| p.is(&r.nexus)).map(|r| r.key)
    }

    /// Whether `p` holds the persistent reservation.
    pub fn is_holder(&self, p: &impl Ident) -> bool {
        match &self.res {
            None => false,
            Some(r) if r.ty.all_registrants() => self.key_of(p).is_some(),
            Some(r) => p.is(&r.holder),
        }
    }

    /// Whether a command of class `access` from `p` is allowed by the persistent
    /// reservation (true when there is none).
    pub fn allows(&self, p: &impl Ident, access: Access) -> bool {
        let Some(r) = &self.res else { return true };
        if access == Access::Always || self.is_holder(p) {
            return true;
        }
        let registered = self.key_of(p).is_some();
        match (access, r.ty.exclusive_access()) {
            (Access::Always, _) => true,
            // registrants of RO / AR types have the holder's access
            _ if registered && (r.ty.registrants_only() || r.ty.all_registrants()) => true,
            (Access::Read, false) => true,
            _ => false,
        }
    }

    /// Removes `p`'s registration; releases the reservation when `p` held it (for
    /// all-registrants types, when `p` was the last registrant). Returns whether the
    /// reservation was released and its type.
    pub fn unregister(&mut self, p: &PortPair) -> Option<PrType> {
        let held = self.is_holder(p);
        self.regs.retain(|r| r.nexus != *p);
        let ty = self.res.as_ref().map(|r| r.ty)?;
        let release = if ty.all_registrants() {
            self.regs.is_empty()
        } else {
            held
        };
        if release {
            self.res = None;
            Some(ty)
        } else {
            if ty.all_registrants() && held {
                // another registrant keeps the all-registrants reservation
                if let (Some(r), Some(first)) = (self.res.as_mut(), self.regs.first()) {
                    r.holder = first.nexus.clone();
                }
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pp(i: &str) -> PortPair {
        PortPair {
            initiator: i.into(),
            target: "t".into(),
            rel_port: 0,
        }
    }

    /// SPC-4 table 53 / SBC-3 table 13, for a nexus that does not hold the reservation:
    /// (type, registered?, read allowed?, write allowed?).
    const TABLE: &[(PrType, bool, bool, bool)] = &[
        (PrType::WriteExclusive, false, true, false),
        (PrType::WriteExclusive, true, true, false),
        (PrType::ExclusiveAccess, false, false, false),
        (PrType::ExclusiveAccess, true, false, false),
        (PrType::WriteExclusiveRegistrantsOnly, false, true, false),
        (PrType::WriteExclusiveRegistrantsOnly, true, true, true),
        (PrType::ExclusiveAccessRegistrantsOnly, false, false, false),
        (PrType::ExclusiveAccessRegistrantsOnly, true, true, true),
        (PrType::WriteExclusiveAllRegistrants, false, true, false),
        (PrType::WriteExclusiveAllRegistrants, true, true, true),
        (PrType::ExclusiveAccessAllRegistrants, false, false, false),
        (PrType::ExclusiveAccessAllRegistrants, true, true, true),
    ];

    #[test]
    fn access_table() {
        for &(ty, registered, read, write) in TABLE {
            let mut s = PrState::default();
            s.regs.push(Registration {
                nexus: pp("holder"),
                key: 1,
            });
            if registered {
                s.regs.push(Registration {
                    nexus: pp("other"),
                    key: 2,
                });
            }
            s.res = Some(Reservation {
                ty,
                holder: pp("holder"),
            });
            let o = pp("other");
            assert_eq!(s.allows(&o, Access::Read), read, "{ty:?} reg={registered}");
            assert_eq!(
                s.allows(&o, Access::Write),
                write,
                "{ty:?} reg={registered}"
            );
            assert!(s.allows(&o, Access::Always));
            // the holder may do everything
            for a in [Access::Always, Access::Read, Access::Write] {
                assert!(s.allows(&pp("holder"), a));
            }
        }
    }

    #[test]
    fn type_codes() {
        for t in PrType::ALL {
            assert_eq!(PrType::from_code(t.code()), Some(t));
        }
        for c in [0, 2, 4, 9, 15] {
            assert_eq!(PrType::from_code(c), None);
        }
    }

    #[test]
    fn unregister_releases() {
        let mut s = PrState::default();
        for (n, k) in [("a", 1), ("b", 2)] {
            s.regs.push(Registration {
                nexus: pp(n),
                key: k,
            });
        }
        s.res = Some(Reservation {
            ty: PrType::ExclusiveAccessAllRegistrants,
            holder: pp("a"),
        });
        assert_eq!(s.unregister(&pp("a")), None);
        assert!(s.is_holder(&pp("b")));
        assert_eq!(
            s.unregister(&pp("b")),
            Some(PrType::ExclusiveAccessAllRegistrants)
        );
        assert!(s.res.is_none());
    }
}
