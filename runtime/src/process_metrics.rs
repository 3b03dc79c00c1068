//! The process metrics every Prometheus client library exports (`process_*`, read from
//! `/proc/self` at each scrape) and `wasm_ccm_build_info`, so the dashboards and alerts
//! written for other controller-managers (memory, CPU, restarts, open files) work unchanged.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

/// Register the process collector and the build info.
pub fn register(registry: &mut Registry) {
    registry.register_collector(Box::new(ProcessCollector));
    let build_info = Family::<Vec<(String, String)>, Gauge>::default();
    build_info
        .get_or_create(&vec![(
            "version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        )])
        .set(1);
    registry.register(
        "wasm_ccm_build_info",
        "A metric with a constant '1' value labelled by the version wasm-ccm was built from",
        build_info,
    );
}

/// Reads `/proc/self` on every scrape; reports nothing it cannot read.
#[derive(Debug)]
struct ProcessCollector;

/// What `/proc/self/stat` says, in Prometheus units.
struct Stat {
    cpu_seconds: f64,
    start_time_seconds: f64,
    virtual_bytes: f64,
    resident_bytes: f64,
}

/// Clock ticks per second (`USER_HZ`) and page size of Linux on every architecture the
/// manager is built for.
const TICKS_PER_SECOND: f64 = 100.0;
const PAGE_SIZE: f64 = 4096.0;

fn read_stat() -> Option<Stat> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the parenthesised command name, which may itself contain spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // Field numbers as in proc(5), minus the two before the name's end.
    let field = |number: usize| fields.get(number - 3)?.parse::<f64>().ok();
    let boot_time = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("btime ")?.trim().parse::<f64>().ok())?;
    Some(Stat {
        cpu_seconds: (field(14)? + field(15)?) / TICKS_PER_SECOND,
        start_time_seconds: boot_time + field(22)? / TICKS_PER_SECOND,
        virtual_bytes: field(23)?,
        resident_bytes: field(24)? * PAGE_SIZE,
    })
}

fn open_fds() -> Option<i64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    i64::try_from(entries.count()).ok()
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(stat) = read_stat() {
            let cpu = ConstCounter::new(stat.cpu_seconds);
            cpu.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                cpu.metric_type(),
            )?)?;
            for (name, help, value) in [
                (
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds",
                    stat.start_time_seconds,
                ),
                (
                    "process_virtual_memory_bytes",
                    "Virtual memory size in bytes",
                    stat.virtual_bytes,
                ),
                (
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes",
                    stat.resident_bytes,
                ),
            ] {
                let gauge = ConstGauge::new(value);
                gauge.encode(encoder.encode_descriptor(
                    name,
                    help,
                    None,
                    gauge.metric_type(),
                )?)?;
            }
        }
        if let Some(fds) = open_fds() {
            let gauge = ConstGauge::new(fds);
            gauge.encode(encoder.encode_descriptor(
                "process_open_fds",
                "Number of open file descriptors",
                None,
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    fn now_seconds() -> f64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    }

    #[test]
    fn the_process_reports_its_memory_cpu_start_and_files() {
        // Use some CPU first: the kernel counts it in 10 ms ticks.
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(50) {
            std::hint::black_box(spin.elapsed());
        }
        let mut registry = Registry::default();
        register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|line| line.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
                .parse()
                .unwrap()
        };
        assert!(value("process_resident_memory_bytes") > 1e6);
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        assert!(value("process_cpu_seconds_total") > 0.0);
        let started = value("process_start_time_seconds");
        assert!(
            started <= now_seconds() && started > now_seconds() - 3600.0,
            "{started}"
        );
        assert!(value("process_open_fds") >= 3.0);
        assert!(
            text.contains("wasm_ccm_build_info{version=\"0.1.0\"} 1"),
            "{text}"
        );
    }
}
