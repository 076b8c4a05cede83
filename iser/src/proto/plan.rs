//! Data-movement planning: which RDMA work requests move a SCSI command's data.
//!
//! - SCSI READ (Data-In): RDMA WRITEs from local spans (e.g. pinned cache blocks of a
//!   registered arena) to the initiator's read buffer, the remote address advancing with
//!   the offset; at most `max_sge` local spans and `max_wr_bytes` bytes per request.
//! - SCSI WRITE (Data-Out): the first `immediate` bytes came in the command's Send; RDMA
//!   READs fetch the rest from the initiator's write buffer (offset = immediate) into the
//!   target's destination spans, at most `max_sge` spans and `max_rdma_read` bytes each.
//!
//! Pure functions: they return plain structs for the driver to post.

use super::header::RemoteBuf;

/// One registered local piece of memory: key, address, length. Used both for the source
/// or destination spans given to the planner and for the scatter/gather entries of the
/// planned requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sge {
    /// Local key of the memory region holding the span.
    pub lkey: u32,
    /// Address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
}

/// A local span given to the planner (same shape as a scatter/gather entry).
pub type LocalSpan = Sge;

/// One RDMA WRITE: local entries in order to `remote` (Data-In).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaWrite {
    /// Offset of the first byte in the command's data.
    pub offset: u64,
    /// Remote STag and the address of the first byte (base VA + offset).
    pub remote: RemoteBuf,
    /// Local scatter/gather entries, in data order.
    pub sges: Vec<Sge>,
    /// Total bytes (the sum of the entries).
    pub len: u32,
}

/// One RDMA READ: from `remote` into local entries in order (Data-Out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaRead {
    /// Offset of the first byte in the command's data.
    pub offset: u64,
    /// Remote STag and the address of the first byte (base VA + offset).
    pub remote: RemoteBuf,
    /// Local destination entries, in data order.
    pub sges: Vec<Sge>,
    /// Total bytes (the sum of the entries).
    pub len: u32,
}

/// A transfer that cannot be planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// `max_sge` or the per-request byte limit is 0.
    #[error("planning limits must be non-zero (max_sge {max_sge}, max bytes {max_bytes})")]
    ZeroLimit {
        /// Entries per request.
        max_sge: usize,
        /// Bytes per request.
        max_bytes: u32,
    },
    /// The local spans hold fewer bytes than the transfer needs.
    #[error("local spans hold {have} bytes, the transfer needs {need}")]
    ShortLocal {
        /// Bytes needed (including skipped immediate data).
        need: u64,
        /// Bytes the spans hold.
        have: u64,
    },
    /// A local span runs past the end of the address space.
    #[error("local span at {addr:#x} + {len} overflows")]
    LocalOverflow {
        /// Span address.
        addr: u64,
        /// Span length.
        len: u32,
    },
    /// The remote buffer runs past the end of the address space.
    #[error("remote buffer at {va:#x} + {len} overflows")]
    RemoteOverflow {
        /// Remote base address.
        va: u64,
        /// Transfer length.
        len: u32,
    },
    /// More immediate data than the command transfers.
    #[error("{immediate} immediate bytes for a {len}-byte write")]
    ImmediateTooLong {
        /// Immediate bytes received.
        immediate: u32,
        /// The command's transfer length.
        len: u32,
    },
}

/// One planned request before it gets its direction.
struct Piece {
    offset: u64,
    sges: Vec<Sge>,
    len: u32,
}

/// Splits bytes `skip..skip + len` of the concatenated `spans` into requests of at most
/// `max_sge` entries and `max_bytes` bytes.
fn split(
    spans: &[Sge],
    skip: u32,
    len: u32,
    max_sge: usize,
    max_bytes: u32,
) -> Result<Vec<Piece>, PlanError> {
    if max_sge == 0 || max_bytes == 0 {
        return Err(PlanError::ZeroLimit { max_sge, max_bytes });
    }
    let mut have = 0u64;
    for s in spans {
        if s.addr.checked_add(u64::from(s.len)).is_none() {
            return Err(PlanError::LocalOverflow {
                addr: s.addr,
                len: s.len,
            });
        }
        have += u64::from(s.len);
    }
    let need = u64::from(skip) + u64::from(len);
    if have < need {
        return Err(PlanError::ShortLocal { need, have });
    }
    let mut out = Vec::new();
    let mut cur = Piece {
        offset: u64::from(skip),
        sges: Vec::new(),
        len: 0,
    };
    let mut to_skip = skip;
    let mut left = len;
    for s in spans {
        if left == 0 {
            break;
        }
        // Skip whole or partial spans before the start of the range.
        let cut = to_skip.min(s.len);
        to_skip -= cut;
        let mut addr = s.addr + u64::from(cut);
        let mut avail = s.len - cut;
        while avail > 0 && left > 0 {
            let n = avail.min(left).min(max_bytes - cur.len);
            cur.sges.push(Sge {
                lkey: s.lkey,
                addr,
                len: n,
            });
            cur.len += n;
            addr += u64::from(n);
            avail -= n;
            left -= n;
            if cur.len == max_bytes || cur.sges.len() == max_sge {
                let next = cur.offset + u64::from(cur.len);
                out.push(std::mem::replace(
                    &mut cur,
                    Piece {
                        offset: next,
                        sges: Vec::new(),
                        len: 0,
                    },
                ));
            }
        }
    }
    if cur.len > 0 {
        out.push(cur);
    }
    Ok(out)
}

fn check_remote(remote: RemoteBuf, len: u32) -> Result<(), PlanError> {
    match remote.va.checked_add(u64::from(len)) {
        Some(_) => Ok(()),
        None => Err(PlanError::RemoteOverflow { va: remote.va, len }),
    }
}

fn at(remote: RemoteBuf, offset: u64) -> RemoteBuf {
    RemoteBuf {
        stag: remote.stag,
        va: remote.va + offset,
    }
}

/// RDMA WRITEs that move a SCSI READ's `len` bytes from `spans` (in order, beyond `len`
/// ignored) to the initiator's read buffer `remote`. A zero length plans nothing.
pub fn plan_read(
    len: u32,
    spans: &[Sge],
    remote: RemoteBuf,
    max_sge: usize,
    max_wr_bytes: u32,
) -> Result<Vec<RdmaWrite>, PlanError> {
    check_remote(remote, len)?;
    Ok(split(spans, 0, len, max_sge, max_wr_bytes)?
        .into_iter()
        .map(|p| RdmaWrite {
            offset: p.offset,
            remote: at(remote, p.offset),
            sges: p.sges,
            len: p.len,
        })
        .collect())
}

/// RDMA READs that fetch a SCSI WRITE's data beyond the `immediate` bytes already
/// received, from the initiator's write buffer `remote` into `dest`, the spans holding
/// the command's whole data from offset 0 (the immediate bytes land in the first
/// `immediate` bytes of `dest`; the reads never touch them). Nothing to plan when all the
/// data was immediate. The announced write VA already points past the data sent by Send
/// (Linux ib_iser announces base + unsolicited bytes), so the remote address of the byte
/// at command offset `o` is `remote.va + (o - immediate)`.
pub fn plan_write(
    len: u32,
    immediate: u32,
    dest: &[Sge],
    remote: RemoteBuf,
    max_sge: usize,
    max_rdma_read: u32,
) -> Result<Vec<RdmaRead>, PlanError> {
    if immediate > len {
        return Err(PlanError::ImmediateTooLong { immediate, len });
    }
    check_remote(remote, len - immediate)?;
    Ok(
        split(dest, immediate, len - immediate, max_sge, max_rdma_read)?
            .into_iter()
            .map(|p| RdmaRead {
                offset: p.offset,
                remote: at(remote, p.offset - u64::from(immediate)),
                sges: p.sges,
                len: p.len,
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const R: RemoteBuf = RemoteBuf {
        stag: 0xabcd,
        va: 0x1000_0000,
    };

    fn span(lkey: u32, addr: u64, len: u32) -> Sge {
        Sge { lkey, addr, len }
    }

    #[test]
    fn read_from_cache_blocks() {
        // Three 4 KiB blocks, 2 entries per request, 1 MiB per request.
        let spans = [
            span(1, 0x10_000, 4096),
            span(1, 0x30_000, 4096),
            span(2, 0x50_000, 4096),
        ];
        let w = plan_read(10_000, &spans, R, 2, 1 << 20).unwrap();
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].offset, 0);
        assert_eq!(w[0].remote, R);
        assert_eq!(w[0].len, 8192);
        assert_eq!(w[0].sges, vec![spans[0], spans[1]]);
        assert_eq!(w[1].offset, 8192);
        assert_eq!(w[1].remote.va, R.va + 8192);
        assert_eq!(w[1].sges, vec![span(2, 0x50_000, 10_000 - 8192)]);
    }

    #[test]
    fn byte_limit_splits_a_span() {
        let w = plan_read(10, &[span(7, 100, 10)], R, 4, 4).unwrap();
        let got: Vec<_> = w
            .iter()
            .map(|w| (w.offset, w.len, w.sges[0].addr))
            .collect();
        assert_eq!(got, vec![(0, 4, 100), (4, 4, 104), (8, 2, 108)]);
    }

    #[test]
    fn write_after_immediate_data() {
        let dest = [span(3, 0x8000, 8192), span(3, 0x20_000, 8192)];
        let r = plan_write(16_384, 4096, &dest, R, 1, 4096).unwrap();
        let got: Vec<_> = r
            .iter()
            .map(|r| (r.offset, r.remote.va - R.va, r.len, r.sges[0].addr))
            .collect();
        assert_eq!(
            got,
            vec![
                (4096, 0, 4096, 0x9000),
                (8192, 4096, 4096, 0x20_000),
                (12_288, 8192, 4096, 0x21_000),
            ]
        );
        assert!(
            plan_write(4096, 4096, &dest, R, 1, 4096)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn zero_length_and_errors() {
        assert!(plan_read(0, &[], R, 1, 1).unwrap().is_empty());
        assert!(plan_write(0, 0, &[], R, 1, 1).unwrap().is_empty());
        assert_eq!(
            plan_read(1, &[], R, 0, 1),
            Err(PlanError::ZeroLimit {
                max_sge: 0,
                max_bytes: 1
            })
        );
        assert_eq!(
            plan_read(5, &[span(0, 0, 4)], R, 1, 8),
            Err(PlanError::ShortLocal { need: 5, have: 4 })
        );
        assert_eq!(
            plan_write(5, 6, &[span(0, 0, 8)], R, 1, 8),
            Err(PlanError::ImmediateTooLong {
                immediate: 6,
                len: 5
            })
        );
        let top = RemoteBuf {
            stag: 1,
            va: u64::MAX - 1,
        };
        assert!(matches!(
            plan_read(2, &[span(0, 0, 2)], top, 1, 8),
            Err(PlanError::RemoteOverflow { .. })
        ));
        assert!(matches!(
            plan_read(2, &[span(0, u64::MAX, 2)], R, 1, 8),
            Err(PlanError::LocalOverflow { .. })
        ));
    }

    fn spans() -> impl Strategy<Value = Vec<Sge>> {
        proptest::collection::vec((0u32..4, 0u32..5000), 0..12).prop_map(|v| {
            let mut addr = 0x1_0000u64;
            v.into_iter()
                .map(|(lkey, len)| {
                    let s = span(lkey, addr, len);
                    addr += u64::from(len) + 0x1000; // gaps: spans are not contiguous
                    s
                })
                .collect()
        })
    }

    /// The local bytes `skip..skip+len` of `spans`, as (lkey, addr) per byte.
    fn bytes(spans: &[Sge], skip: u32, len: u32) -> Vec<(u32, u64)> {
        spans
            .iter()
            .flat_map(|s| (0..s.len).map(move |i| (s.lkey, s.addr + u64::from(i))))
            .skip(skip as usize)
            .take(len as usize)
            .collect()
    }

    fn check(
        reqs: &[(u64, RemoteBuf, &[Sge], u32)],
        spans: &[Sge],
        skip: u32,
        len: u32,
        max_sge: usize,
        max_bytes: u32,
    ) -> Result<(), TestCaseError> {
        let mut next = u64::from(skip);
        let mut local = Vec::new();
        for &(offset, remote, sges, n) in reqs {
            prop_assert_eq!(
                offset,
                next,
                "requests are contiguous, in order, no overlap"
            );
            prop_assert_eq!(remote.stag, R.stag);
            // the remote buffer starts where the Send's data ended (`skip`: immediate bytes)
            prop_assert_eq!(remote.va, R.va + offset - u64::from(skip));
            prop_assert!(n > 0 && n <= max_bytes);
            prop_assert!(!sges.is_empty() && sges.len() <= max_sge);
            prop_assert!(sges.iter().all(|s| s.len > 0));
            prop_assert_eq!(
                sges.iter().map(|s| u64::from(s.len)).sum::<u64>(),
                u64::from(n)
            );
            local.extend(bytes(sges, 0, n));
            next += u64::from(n);
        }
        prop_assert_eq!(
            next,
            u64::from(skip) + u64::from(len),
            "the whole range is covered"
        );
        prop_assert_eq!(
            local,
            bytes(spans, skip, len),
            "exactly the right local bytes"
        );
        Ok(())
    }

    proptest! {
        #[test]
        fn read_plan_covers_exactly(spans in spans(), frac in 0.0f64..=1.0,
                                    max_sge in 1usize..5, max_bytes in 1u32..9000) {
            let total: u32 = spans.iter().map(|s| s.len).sum();
            let len = (f64::from(total) * frac) as u32;
            let w = plan_read(len, &spans, R, max_sge, max_bytes).unwrap();
            let reqs: Vec<_> = w.iter().map(|w| (w.offset, w.remote, &w.sges[..], w.len)).collect();
            check(&reqs, &spans, 0, len, max_sge, max_bytes)?;
        }

        #[test]
        fn write_plan_covers_exactly(spans in spans(), frac in 0.0f64..=1.0, imm in 0.0f64..=1.0,
                                     max_sge in 1usize..5, max_bytes in 1u32..9000) {
            let total: u32 = spans.iter().map(|s| s.len).sum();
            let len = (f64::from(total) * frac) as u32;
            let immediate = (f64::from(len) * imm) as u32;
            let r = plan_write(len, immediate, &spans, R, max_sge, max_bytes).unwrap();
            let reqs: Vec<_> = r.iter().map(|r| (r.offset, r.remote, &r.sges[..], r.len)).collect();
            check(&reqs, &spans, immediate, len - immediate, max_sge, max_bytes)?;
        }

        #[test]
        fn short_local_is_refused(spans in spans(), extra in 1u32..100) {
            let total: u32 = spans.iter().map(|s| s.len).sum();
            let short = matches!(
                plan_read(total + extra, &spans, R, 2, 4096),
                Err(PlanError::ShortLocal { .. })
            );
            prop_assert!(short);
        }
    }
}
