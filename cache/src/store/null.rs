//! The null store (tgtd's `--bstype null`): no storage at all, the floor of every
//! benchmark. Reads return zeros, writes are acknowledged and dropped, flushes, discards and
//! zeroing succeed. Its size is fixed at 1 TiB, as tgtd's null LUN reports (`Size: 1099512
//! MB`); the path is only a name (tgtadm shows it back). Nothing it does blocks, so an
//! event thread reads it at once ([`ReadEngine::Immediate`]); a GET LBA STATUS sees it all
//! mapped (it cannot tell, like a block device).

use std::io;

use super::{BackingError, Caps, OpenRequest, ReadEngine, Store};

/// The size of every null store: 1 TiB, tgtd's.
pub const NULL_SIZE: u64 = 1 << 40;

/// Nothing, of [`NULL_SIZE`] bytes.
#[derive(Debug)]
pub struct NullStore {
    readonly: bool,
}

/// A null store; `req.path` and `req.bsopts` are not looked at (tgtd ignores them too).
pub fn open(req: &OpenRequest<'_>) -> Result<Box<dyn Store>, BackingError> {
    Ok(Box::new(NullStore {
        readonly: req.options.readonly,
    }))
}

impl Store for NullStore {
    fn caps(&self) -> Caps {
        Caps {
            direct: false,
            discard: true,
            readonly: self.readonly,
            resizable: false,
            zeroes: true,
            durable_writes: false,
            shared: false,
        }
    }

    fn measure(&self) -> io::Result<u64> {
        Ok(NULL_SIZE)
    }

    fn read_at(&self, buf: &mut [u8], _offset: u64) -> io::Result<()> {
        buf.fill(0);
        Ok(())
    }

    fn write_at(&self, _data: &[u8], _offset: u64, _durable: bool) -> io::Result<()> {
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn discard(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }

    fn write_zeroes(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }

    fn read_engine(&self) -> ReadEngine {
        ReadEngine::Immediate
    }
}
