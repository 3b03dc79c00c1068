//! The `wasm-ccm` binary: parse flags, set up logging, run the chosen command.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = wasm_ccm::cli::Cli::parse();
    // The manager reports what it does; the one-shot commands only what went wrong.
    let default_level = if cli.is_run_mode() { "info" } else { "warn" };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match cli.run().await {
        Ok(code) => code,
        // Stdout's reader gone (`| head`): what it wanted was written; end as a writer killed
        // by SIGPIPE is reported (128 + 13), without a message.
        Err(error) if wasm_ccm::cli::is_broken_pipe(&error) => ExitCode::from(141),
        Err(error) => {
            // An error may quote a provider, a registry or a file: one line, no terminal
            // control.
            eprintln!(
                "error: {}",
                wasm_ccm_host::text::escaped(&format!("{error:#}"))
            );
            ExitCode::from(2)
        }
    }
}
