//! A report batch as it crosses into a Wasm plugin: the WIT's `report-batch`
//! (`proto/wit/adapter.wit`, which defines the layout), written by the mixer with
//! [`Writer`] and read in place by the guest SDK with [`BatchRef`].
//!
//! A batch is three flat lists, text, bytes and 32-bit words, because the canonical ABI
//! copies a list of numbers or bytes in one piece but lowers a list of records element by
//! element in the host and lifts it again element by element in the plugin; for 500
//! metric instances that cost several times the plugin's own work (docs/wasm.md).

mod read;
pub mod text;
#[cfg(feature = "write")]
mod write;

pub use read::{BatchRef, FieldRef, InstanceRef, Instances, MapRef, StringMapRef, ValueRef};
#[cfg(feature = "write")]
pub use write::{Mark, Packed, Writer};

/// The index of each case of the WIT's `value` variant, a value's first word.
pub mod case {
    /// `string`.
    pub const STRING: u32 = 0;
    /// `int64`.
    pub const INT64: u32 = 1;
    /// `double`.
    pub const DOUBLE: u32 = 2;
    /// `boolean`.
    pub const BOOLEAN: u32 = 3;
    /// `timestamp`.
    pub const TIMESTAMP: u32 = 4;
    /// `duration`.
    pub const DURATION: u32 = 5;
    /// `bytes`.
    pub const BYTES: u32 = 6;
    /// `ip-address`.
    pub const IP_ADDRESS: u32 = 7;
    /// `email-address`.
    pub const EMAIL_ADDRESS: u32 = 8;
    /// `uri`.
    pub const URI: u32 = 9;
    /// `dns-name`.
    pub const DNS_NAME: u32 = 10;
    /// `string-map`.
    pub const STRING_MAP: u32 = 11;
    /// Not a value: a map field's first word, one past the last case of `value`.
    pub const MAP: u32 = 12;
}

#[cfg(all(test, feature = "write"))]
mod tests;
