//! The Data-In payload type handed to `iscsi_proto::Connection`: either small emulated
//! command data (INQUIRY, MODE SENSE…) or an O_DIRECT buffer filled by a backing-store read.
//! Cheap to clone; the connection sends straight from it with writev.

use std::sync::Arc;

use cache::AlignedBuf;

#[derive(Clone, Debug)]
pub enum Payload {
    Bytes(Arc<Vec<u8>>),
    Block(Arc<AlignedBuf>),
}

impl Payload {
    fn bytes_of(&self) -> &[u8] {
        match self {
            Payload::Bytes(v) => v.as_slice(),
            Payload::Block(b) => b.as_slice(),
        }
    }
}

impl iscsi_proto::DataBuf for Payload {
    fn len(&self) -> usize {
        self.bytes_of().len()
    }
    fn chunk(&self, offset: usize) -> &[u8] {
        self.bytes_of().get(offset..).unwrap_or(&[])
    }
}

impl Payload {
    pub fn bytes(v: Vec<u8>) -> Self {
        Payload::Bytes(Arc::new(v))
    }
}
