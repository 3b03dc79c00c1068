//! Log lines, written by the host to its log tagged with the provider's name and version.
//!
//! Use the macros: `wasm_ccm_sdk::info!("created {}", id)`.

use crate::bindings::wasm_ccm::provider::host;
pub use crate::bindings::wasm_ccm::provider::host::LogLevel as Level;

/// Write `message` at `level`.
pub fn write(level: Level, message: &str) {
    host::log(level, message);
}

/// Log at debug level, `format!`-style.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Debug, &format!($($arg)*)) };
}

/// Log at info level, `format!`-style.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Info, &format!($($arg)*)) };
}

/// Log at warn level, `format!`-style.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Warn, &format!($($arg)*)) };
}

/// Log at error level, `format!`-style.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Error, &format!($($arg)*)) };
}
