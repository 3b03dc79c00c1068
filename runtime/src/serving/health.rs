//! Health checks and how `/healthz`, `/readyz` and `/livez` answer.
//!
//! The answers follow the Kubernetes `healthz` package, so kubelet probes and people used
//! to upstream read them the same way: every probe has a built-in `ping` check; `?verbose`
//! lists each check, `?exclude=<name>` skips one, and a failing check's reason is logged but
//! withheld from the body. Controllers add their checks when they start and remove them
//! when they stop (see the example in `serving`).

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::StatusCode;
use tracing::warn;

/// Which endpoints include a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// `/healthz`, the aggregate upstream's manager serves.
    Healthz,
    /// `/readyz`.
    Readyz,
    /// `/livez`.
    Livez,
}

impl Probe {
    pub(super) const ALL: [Probe; 3] = [Probe::Healthz, Probe::Readyz, Probe::Livez];

    /// The endpoint's path segment, also the word in "healthz check passed".
    pub(super) fn name(self) -> &'static str {
        match self {
            Probe::Healthz => "healthz",
            Probe::Readyz => "readyz",
            Probe::Livez => "livez",
        }
    }
}

type CheckFn = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

struct Check {
    name: String,
    probes: Vec<Probe>,
    run: CheckFn,
}

/// Named health checks, shared and cloneable; controllers add theirs when they start and
/// remove them when they stop.
#[derive(Clone, Default)]
pub struct HealthChecks {
    // In the order they were added, which is the order `?verbose` lists them.
    checks: Arc<Mutex<Vec<Check>>>,
}

impl HealthChecks {
    /// Adds `check` to the endpoints in `probes`, or replaces the check of that name.
    /// `ping` is built in and cannot be replaced.
    pub fn add(
        &self,
        name: &str,
        probes: &[Probe],
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        if name == "ping" {
            warn!("health check `ping` is built in; ignoring a second one");
            return;
        }
        let added = Check {
            name: name.to_owned(),
            probes: probes.to_vec(),
            run: Arc::new(check),
        };
        let mut checks = self.checks.lock().unwrap_or_else(PoisonError::into_inner);
        match checks.iter_mut().find(|c| c.name == name) {
            Some(existing) => *existing = added,
            None => checks.push(added),
        }
    }

    /// Removes the check called `name`, if there is one.
    pub fn remove(&self, name: &str) {
        self.checks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|c| c.name != name);
    }

    /// The checks of one endpoint, `ping` first. A snapshot, so a check runs without the lock
    /// held and may itself add or remove checks.
    fn for_probe(&self, probe: Probe) -> Vec<(String, CheckFn)> {
        let ping: CheckFn = Arc::new(|| Ok(()));
        let checks = self.checks.lock().unwrap_or_else(PoisonError::into_inner);
        std::iter::once(("ping".to_owned(), ping))
            .chain(
                checks
                    .iter()
                    .filter(|c| c.probes.contains(&probe))
                    .map(|c| (c.name.clone(), Arc::clone(&c.run))),
            )
            .collect()
    }
}

/// One endpoint's aggregate, as upstream's `handleRootHealth`: `ok` on success, the listing
/// when asked for or on failure, reasons only in the log. `query` is the request's query,
/// pair by pair (`?verbose` is `("verbose", "")`).
pub(super) fn all_checks(
    checks: &HealthChecks,
    probe: Probe,
    query: &[(String, String)],
) -> (StatusCode, String) {
    let verbose = query.iter().any(|(key, _)| key == "verbose");
    let mut excluded: Vec<&str> = query
        .iter()
        .filter(|(key, _)| key == "exclude")
        .map(|(_, value)| value.as_str())
        .collect();
    let mut listing = String::new();
    let mut failures = Vec::new();
    for (name, run) in checks.for_probe(probe) {
        if excluded.contains(&name.as_str()) {
            excluded.retain(|e| *e != name);
            let _ = writeln!(listing, "[+]{name} excluded: ok");
            continue;
        }
        match run() {
            Ok(()) => {
                let _ = writeln!(listing, "[+]{name} ok");
            }
            Err(reason) => {
                let _ = writeln!(listing, "[-]{name} failed: reason withheld");
                failures.push(format!("{name}: {reason}"));
            }
        }
    }
    if !excluded.is_empty() {
        let quoted: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
        let _ = writeln!(
            listing,
            "warn: some health checks cannot be excluded: no matches for {}",
            quoted.join(",")
        );
    }
    let probe = probe.name();
    if !failures.is_empty() {
        warn!(failures = %failures.join("; "), "{probe} check failed");
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{listing}{probe} check failed\n"),
        );
    }
    if verbose {
        (StatusCode::OK, format!("{listing}{probe} check passed\n"))
    } else {
        (StatusCode::OK, "ok".to_owned())
    }
}

/// `/<probe>/<check>`: one check. Nothing here is behind authentication, so unlike upstream
/// the reason is withheld here too and only logged.
pub(super) fn one_check(checks: &HealthChecks, probe: Probe, check: &str) -> (StatusCode, String) {
    let Some((_, run)) = checks
        .for_probe(probe)
        .into_iter()
        .find(|(name, _)| name == check)
    else {
        return (
            StatusCode::NOT_FOUND,
            format!("no {} check named {check:?}\n", probe.name()),
        );
    };
    match run() {
        Ok(()) => (StatusCode::OK, "ok".to_owned()),
        Err(reason) => {
            warn!(check, %reason, "{} check failed", probe.name());
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal server error: reason withheld\n".to_owned(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `?verbose&exclude=a` as the server hands it over.
    fn query(query: &str) -> Vec<(String, String)> {
        query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                (key.to_owned(), value.to_owned())
            })
            .collect()
    }

    fn all(checks: &HealthChecks, probe: Probe, q: &str) -> (StatusCode, String) {
        all_checks(checks, probe, &query(q))
    }

    #[test]
    fn only_ping_is_ok_and_verbose_lists_it() {
        let checks = HealthChecks::default();
        assert_eq!(
            all(&checks, Probe::Healthz, ""),
            (StatusCode::OK, "ok".into())
        );
        assert_eq!(
            all(&checks, Probe::Healthz, "verbose"),
            (StatusCode::OK, "[+]ping ok\nhealthz check passed\n".into())
        );
        assert_eq!(
            all(&checks, Probe::Livez, "verbose=1"),
            (StatusCode::OK, "[+]ping ok\nlivez check passed\n".into())
        );
    }

    #[test]
    fn a_failing_check_fails_the_probe_and_withholds_its_reason() {
        let checks = HealthChecks::default();
        checks.add("cloud-node", &Probe::ALL, || Ok(()));
        checks.add("leaderElection", &[Probe::Healthz], || {
            Err("lease not renewed for 45s".into())
        });
        for q in ["", "verbose"] {
            assert_eq!(
                all(&checks, Probe::Healthz, q),
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "[+]ping ok\n[+]cloud-node ok\n[-]leaderElection failed: reason withheld\nhealthz check failed\n".into()
                ),
                "?{q}"
            );
        }
    }

    #[test]
    fn an_excluded_check_is_skipped_and_unknown_exclusions_are_warned_about() {
        let checks = HealthChecks::default();
        checks.add("leaderElection", &[Probe::Healthz], || {
            Err("lease lost".into())
        });
        checks.add("route", &[Probe::Healthz], || Err("cloud down".into()));

        assert_eq!(
            all(
                &checks,
                Probe::Healthz,
                "exclude=leaderElection&exclude=route"
            ),
            (StatusCode::OK, "ok".into())
        );
        assert_eq!(
            all(
                &checks,
                Probe::Healthz,
                "exclude=leaderElection&exclude=route&exclude=nope&verbose"
            ),
            (
                StatusCode::OK,
                "[+]ping ok\n[+]leaderElection excluded: ok\n[+]route excluded: ok\n\
                 warn: some health checks cannot be excluded: no matches for \"nope\"\n\
                 healthz check passed\n"
                    .into()
            )
        );
        assert_eq!(
            all(&checks, Probe::Healthz, "exclude=route").0,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[test]
    fn a_single_check_runs_only_that_check_of_that_probe() {
        let checks = HealthChecks::default();
        checks.add("service-lb", &Probe::ALL, || Ok(()));
        checks.add("leaderElection", &[Probe::Healthz], || {
            Err("lease lost".into())
        });

        for (probe, name) in [
            (Probe::Healthz, "ping"),
            (Probe::Healthz, "service-lb"),
            (Probe::Readyz, "ping"),
            (Probe::Livez, "service-lb"),
        ] {
            assert_eq!(
                one_check(&checks, probe, name),
                (StatusCode::OK, "ok".into()),
                "{probe:?} {name}"
            );
        }
        let (status, body) = one_check(&checks, Probe::Healthz, "leaderElection");
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!body.contains("lease lost"), "{body}");
        assert_eq!(
            one_check(&checks, Probe::Healthz, "nope").0,
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            one_check(&checks, Probe::Livez, "leaderElection").0,
            StatusCode::NOT_FOUND,
            "not a livez check"
        );

        checks.remove("leaderElection");
        assert_eq!(
            one_check(&checks, Probe::Healthz, "leaderElection").0,
            StatusCode::NOT_FOUND
        );
        assert_eq!(all(&checks, Probe::Healthz, "").0, StatusCode::OK);
    }

    #[test]
    fn a_readyz_only_check_does_not_affect_livez_or_healthz() {
        let checks = HealthChecks::default();
        checks.add("informer-sync", &[Probe::Readyz], || {
            Err("not synced".into())
        });
        assert_eq!(
            all(&checks, Probe::Readyz, ""),
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "[+]ping ok\n[-]informer-sync failed: reason withheld\nreadyz check failed\n"
                    .into()
            )
        );
        assert_eq!(all(&checks, Probe::Livez, "").0, StatusCode::OK);
        assert_eq!(all(&checks, Probe::Healthz, "").0, StatusCode::OK);
    }

    #[test]
    fn adding_a_check_again_replaces_it_in_place() {
        let checks = HealthChecks::default();
        checks.add("a", &[Probe::Healthz], || Err("old".into()));
        checks.add("b", &[Probe::Healthz], || Ok(()));
        checks.add("a", &[Probe::Healthz, Probe::Livez], || Ok(()));
        checks.add("ping", &[Probe::Healthz], || Err("shadowed".into()));
        let healthz: Vec<_> = checks.for_probe(Probe::Healthz);
        let names: Vec<&str> = healthz.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["ping", "a", "b"]);
        assert!(healthz.iter().all(|(_, run)| run().is_ok()));
        let livez: Vec<String> = checks
            .for_probe(Probe::Livez)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(livez, ["ping", "a"]);
    }
}
