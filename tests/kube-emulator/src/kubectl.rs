//! Stock kubectl against the emulator, for tests that check a kubeconfig the way a user
//! would: by typing the command.

use std::path::Path;

/// Runs the real kubectl (`$KUBECTL`, else `kubectl` on the `PATH`) with `args` and returns
/// what it printed. Its discovery cache goes to `cache_dir`, not `~/.kube/cache`.
///
/// The error says what failed: kubectl missing (with how to install it), or its exit status,
/// stderr and stdout.
pub async fn kubectl(cache_dir: &Path, args: &[&str]) -> Result<String, String> {
    let program = std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into());
    let output = tokio::process::Command::new(&program)
        .args(args)
        .env("KUBECACHEDIR", cache_dir)
        .output()
        .await
        .map_err(|err| {
            format!(
                "cannot run kubectl ({}): {err}; install it (Debian package `kubectl`) or set \
                 KUBECTL to its path",
                program.to_string_lossy()
            )
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(format!(
            "kubectl {} failed ({}):\n{}{stdout}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(stdout)
}
