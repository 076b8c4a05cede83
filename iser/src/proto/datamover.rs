//! Glue to the RDMA datamover mode of `iscsi_proto::Connection` (RFC 7145 §7): the iSER
//! login keys answered through `iscsi_proto::conn::TransportKeys` (so `iscsi-proto` needs
//! no iSER knowledge and the keys are negotiated in one place, [`super::keys`]), and the
//! conversions between the iSER header's buffers and the connection's opaque ones.
//!
//! The driver makes a connection with `Connection::set_rdma_transport(Box::new(keys))`,
//! hands each received Send to `rx_pdu` with [`ControlHeader::remote_bufs`], posts what
//! `pop_rdma_tx` gives in order (a `Pdu` behind [`ControlHeader::NONE`]'s header, a `Put`
//! as RDMA WRITEs, a `Get` as RDMA READs answered with `data_arrived`), and feeds
//! `Credits::grant` to `set_window_limit`.

use super::header::{ControlHeader, RemoteBuf};
use super::keys::{IserLimits, IserNegotiator, IserParams};
use iscsi_proto::conn::{RdmaLimits, TransportKeys};
use std::sync::{Arc, OnceLock};

/// The iSER keys of one login, as the connection's [`TransportKeys`].
#[derive(Debug)]
pub struct IserLoginKeys {
    neg: IserNegotiator,
    done: Arc<OnceLock<IserParams>>,
}

/// Where the driver finds the negotiated [`IserParams`] once the login completed.
#[derive(Debug, Clone, Default)]
pub struct IserParamsHandle(Arc<OnceLock<IserParams>>);

impl IserParamsHandle {
    /// The parameters, once the login completed with `RDMAExtensions=Yes`.
    pub fn get(&self) -> Option<IserParams> {
        self.0.get().copied()
    }
}

impl IserLoginKeys {
    /// Keys negotiated against `limits`, and the handle that will hold the outcome.
    pub fn new(limits: IserLimits) -> (IserLoginKeys, IserParamsHandle) {
        let done = Arc::new(OnceLock::new());
        (
            IserLoginKeys {
                neg: IserNegotiator::new(limits),
                done: done.clone(),
            },
            IserParamsHandle(done),
        )
    }
}

impl TransportKeys for IserLoginKeys {
    fn respond(&mut self, key: &str, value: &str) -> Result<Option<String>, String> {
        self.neg.respond(key, value).map_err(|e| e.to_string())
    }

    fn declarations(&mut self) -> Vec<(String, String)> {
        self.neg.declarations()
    }

    fn finish(&mut self, discovery: bool) -> Result<RdmaLimits, String> {
        let p = if discovery {
            // RDMAExtensions is irrelevant in discovery sessions (RFC 7145 §6.3): Linux
            // does not send it; its Text PDUs still travel by Send behind iSER headers
            self.neg.params()
        } else {
            self.neg.finish().map_err(|e| e.to_string())?
        };
        let _ = self.done.set(p);
        Ok(RdmaLimits {
            max_send_data: p.max_send_data_segment(true),
            max_recv_data: p.target_recv_data_segment_length,
        })
    }
}

impl ControlHeader {
    /// The buffers this header announces, as the connection takes them.
    pub fn remote_bufs(&self) -> iscsi_proto::conn::RemoteBufs {
        iscsi_proto::conn::RemoteBufs {
            write: self.write.map(Into::into),
            read: self.read.map(Into::into),
        }
    }
}

impl From<RemoteBuf> for iscsi_proto::conn::RemoteBuf {
    fn from(b: RemoteBuf) -> Self {
        iscsi_proto::conn::RemoteBuf {
            stag: b.stag,
            va: b.va,
        }
    }
}

impl From<iscsi_proto::conn::RemoteBuf> for RemoteBuf {
    fn from(b: iscsi_proto::conn::RemoteBuf) -> Self {
        RemoteBuf {
            stag: b.stag,
            va: b.va,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_keys_through_the_hook() {
        let (mut k, h) = IserLoginKeys::new(IserLimits::default());
        assert_eq!(k.respond("MaxBurstLength", "262144"), Ok(None));
        assert_eq!(
            k.respond("RDMAExtensions", "Yes"),
            Ok(Some("Yes".to_string()))
        );
        assert_eq!(
            k.respond("InitiatorRecvDataSegmentLength", "262144"),
            Ok(Some("8192".to_string()))
        );
        assert!(k.respond("RDMAExtensions", "Yes").is_err(), "duplicate");
        assert!(h.get().is_none());
        let l = k.finish(false).unwrap();
        assert_eq!(
            l,
            RdmaLimits {
                max_send_data: 128,
                max_recv_data: 8192
            }
        );
        assert!(h.get().is_some_and(|p| p.rdma_extensions));
    }

    #[test]
    fn finish_without_rdma_extensions_fails() {
        let (mut k, h) = IserLoginKeys::new(IserLimits::default());
        assert!(k.finish(false).is_err());
        assert!(h.get().is_none());
    }

    #[test]
    fn discovery_needs_no_rdma_extensions() {
        let (mut k, h) = IserLoginKeys::new(IserLimits::default());
        let l = k.finish(true).expect("discovery logins complete");
        assert_eq!(l.max_send_data, 128);
        assert!(h.get().is_some_and(|p| !p.rdma_extensions));
    }

    #[test]
    fn buffers_round_trip() {
        let w = RemoteBuf {
            stag: 7,
            va: 0x1000,
        };
        let hdr = ControlHeader {
            write: Some(w),
            read: None,
        };
        let b = hdr.remote_bufs();
        assert_eq!(b.read, None);
        assert_eq!(b.write.map(RemoteBuf::from), Some(w));
    }
}
