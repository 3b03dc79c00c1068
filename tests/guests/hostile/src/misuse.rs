//! Misuse of WASI resources that the host refuses with an error rather than a wasm trap, so
//! tests can check the call's failure still says what went wrong.

use wasip2::cli::stdout::get_stdout;

/// Drops stdout's stream while a pollable made from it is alive: the host refuses the drop
/// (the stream has a child), which fails the call.
pub fn orphan_pollable() -> ! {
    let stream = get_stdout();
    let pollable = stream.subscribe();
    drop(stream);
    drop(pollable);
    unreachable!("the host let a stream be dropped before its pollable")
}
