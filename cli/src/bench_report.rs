//! `emm bench --report DIR`: every measurement of `emm bench` in one folder — `results.jsonl`
//! (one JSON object per line, with a `kind`), `report.md` (tables) and SVG charts: ns per
//! operation per resource and workload beside the peers, throughput against threads, memory
//! held against time, cost against free holes and, on the simulated GPU, the cost of peer
//! registration against the number of devices.

use std::fmt::Write as _;
use std::path::Path;

use emm_bench::harness::BenchResult;
use emm_bench::threads::ThreadsResult;

use super::bench_measure::Timeline;
use super::bench_peers::{peer_name, PeerFigure};
use emm_bench::charts::{BarChart, Legend, LineChart, Panel};

/// Everything one `--report` run measured.
#[derive(Debug, Default)]
pub struct Collected {
    /// Backend and device, for titles.
    pub device: String,
    /// One thread, per resource and workload.
    pub single: Vec<BenchResult>,
    /// Many threads.
    pub threads: Vec<ThreadsResult>,
    /// How the many-threads section ran: its round size and time budget, in a sentence.
    pub threads_plan: String,
    /// The many-threads cells the time budget left out.
    pub threads_skipped: Vec<String>,
    /// Held against time.
    pub timelines: Vec<Timeline>,
    /// (resource, holes, ns per op).
    pub holes: Vec<(String, usize, f64)>,
    /// (resource, workload, devices, virtual ns per op) on the simulated node.
    pub devices: Vec<(String, String, u32, f64)>,
    /// The peers' figures.
    pub peers: Vec<PeerFigure>,
}

fn workloads_of<'a>(names: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut v: Vec<String> = names.cloned().collect();
    v.sort();
    v.dedup();
    v
}

impl Collected {
    fn ns_chart(&self) -> BarChart {
        let groups = workloads_of(self.single.iter().map(|r| &r.workload));
        let mut series: Vec<(String, Vec<Option<f64>>)> = Vec::new();
        let mut push = |name: String, w: &str, v: f64| {
            let k = match series.iter().position(|(n, _)| *n == name) {
                Some(k) => k,
                None => {
                    series.push((name, vec![None; groups.len()]));
                    series.len() - 1
                }
            };
            if let Some(g) = groups.iter().position(|g| g == w) {
                series[k].1[g] = Some(v);
            }
        };
        for r in &self.single {
            push(format!("emm {}", r.resource), &r.workload, r.ns_per_op);
        }
        for p in &self.peers {
            if let PeerFigure::Single {
                label,
                workload,
                ns_per_op,
            } = p
            {
                push(peer_name(label), workload, *ns_per_op);
            }
        }
        BarChart {
            title: format!("ns per operation, one thread ({})", self.device),
            y_label: "ns per operation (log)".into(),
            log_y: true,
            groups,
            series,
        }
    }

    fn threads_chart(&self) -> LineChart {
        let groups = workloads_of(self.threads.iter().map(|r| &r.workload));
        let panels = groups
            .iter()
            .map(|w| {
                let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
                let mut push = |name: String, x: f64, y: f64| match series
                    .iter_mut()
                    .find(|(n, _)| *n == name)
                {
                    Some((_, pts)) => pts.push((x, y)),
                    None => series.push((name, vec![(x, y)])),
                };
                for r in self.threads.iter().filter(|r| &r.workload == w) {
                    let s = if r.shared_stream { "shared" } else { "own" };
                    push(
                        format!("emm {} ({s} stream)", r.resource),
                        r.threads as f64,
                        r.ops_per_s,
                    );
                }
                for p in &self.peers {
                    if let PeerFigure::Threads {
                        label,
                        workload,
                        threads,
                        shared,
                        ops_per_s,
                        ..
                    } = p
                    {
                        if workload == w {
                            let s = if *shared { "shared" } else { "own" };
                            push(
                                format!("{} ({s} stream)", peer_name(label)),
                                *threads as f64,
                                *ops_per_s,
                            );
                        }
                    }
                }
                Panel {
                    title: format!("{w}: throughput against threads ({})", self.device),
                    series,
                }
            })
            .collect();
        LineChart {
            legend: Legend::UpperLeft,
            x_label: "threads at once".into(),
            y_label: "operations per second, all threads".into(),
            log_x: false,
            log_y: false,
            panels,
        }
    }

    fn timeline_chart(&self) -> LineChart {
        let gib = (1u64 << 30) as f64;
        let mut series = Vec::new();
        if let Some(t) = self.timelines.first() {
            series.push((
                "live (requested)".to_string(),
                t.points
                    .iter()
                    .map(|&(o, l, _)| (o as f64, l as f64 / gib))
                    .collect(),
            ));
        }
        for t in &self.timelines {
            series.push((
                format!("held by emm {}", t.resource),
                t.points
                    .iter()
                    .map(|&(o, _, h)| (o as f64, h as f64 / gib))
                    .collect(),
            ));
        }
        let w = self.timelines.first().map_or("", |t| t.workload.as_str());
        LineChart {
            legend: Legend::UpperLeft,
            x_label: "operation".into(),
            y_label: "GiB".into(),
            log_x: false,
            log_y: false,
            panels: vec![Panel {
                title: format!("{w}: memory held against time ({})", self.device),
                series,
            }],
        }
    }

    fn holes_chart(&self) -> LineChart {
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for (r, h, ns) in &self.holes {
            let name = format!("emm {r}");
            match series.iter_mut().find(|(n, _)| *n == name) {
                Some((_, pts)) => pts.push((*h as f64, *ns)),
                None => series.push((name, vec![(*h as f64, *ns)])),
            }
        }
        LineChart {
            legend: Legend::UpperLeft,
            x_label: "free holes of 512 B pinned in the pool (log)".into(),
            y_label: "ns per operation (log)".into(),
            log_x: true,
            log_y: true,
            panels: vec![Panel {
                title: format!("allocate 1 KiB + free against free holes ({})", self.device),
                series,
            }],
        }
    }

    fn devices_chart(&self) -> LineChart {
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for (r, w, d, ns) in &self.devices {
            let name = format!("emm {r} ({w})");
            match series.iter_mut().find(|(n, _)| *n == name) {
                Some((_, pts)) => pts.push((f64::from(*d), *ns)),
                None => series.push((name, vec![(f64::from(*d), *ns)])),
            }
        }
        LineChart {
            legend: Legend::MiddleRight,
            x_label: "devices in the node, every pair peer-enabled".into(),
            y_label: "virtual ns per operation (log)".into(),
            log_x: false,
            log_y: true,
            panels: vec![Panel {
                title: "simulated node: cuMemAlloc pays peer registration".into(),
                series,
            }],
        }
    }

    fn markdown(&self) -> String {
        let mut md = format!("# emm bench report\n\nDevice: {}\n\n", self.device);
        if !self.single.is_empty() {
            md += "## One thread\n\n| resource | workload | ns/op | held/peak live |\n|---|---|---:|---:|\n";
            for r in &self.single {
                let _ = writeln!(
                    md,
                    "| {} | {} | {:.1} | {:.3} |",
                    r.resource,
                    r.workload,
                    r.ns_per_op,
                    r.held_over_live()
                );
            }
            md.push('\n');
        }
        if !self.threads.is_empty() || !self.threads_skipped.is_empty() {
            md += "## Many threads\n\n";
            if !self.threads_plan.is_empty() {
                md += &self.threads_plan;
                md += "\n\n";
            }
            md += "Driver calls and chunk moves (between a thread's cache and the shared pool or another thread's cache) per 1 000 operations of the timed rounds; `-` where not counted.\n\n| resource | workload | stream | threads | ops/s | × 1 thread | held/peak live | driver calls / 1 000 ops | chunk moves / 1 000 ops |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n";
            for r in &self.threads {
                let base = self
                    .threads
                    .iter()
                    .find(|b| {
                        b.threads == 1
                            && b.resource == r.resource
                            && b.workload == r.workload
                            && b.shared_stream == r.shared_stream
                    })
                    .map_or(f64::NAN, |b| r.ops_per_s / b.ops_per_s);
                let per_kop = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {:.0} | {:.2} | {:.3} | {} | {} |",
                    r.resource,
                    r.workload,
                    if r.shared_stream { "shared" } else { "own" },
                    r.threads,
                    r.ops_per_s,
                    base,
                    r.held_over_live(),
                    per_kop(r.driver_calls_per_kop()),
                    per_kop(r.chunk_moves_per_kop())
                );
            }
            md.push('\n');
            if !self.threads_skipped.is_empty() {
                let _ = writeln!(
                    md,
                    "Skipped when the time budget ran out ({}): {}.\n",
                    self.threads_skipped.len(),
                    self.threads_skipped.join(", ")
                );
            }
        }
        if !self.holes.is_empty() {
            md += "## Cost against free holes\n\n| resource | holes | ns/op |\n|---|---:|---:|\n";
            for (r, h, ns) in &self.holes {
                let _ = writeln!(md, "| {r} | {h} | {ns:.1} |");
            }
            md.push('\n');
        }
        if !self.devices.is_empty() {
            md += "## Peer registration on a simulated node\n\n| resource | workload | devices | virtual ns/op |\n|---|---|---:|---:|\n";
            for (r, w, d, ns) in &self.devices {
                let _ = writeln!(md, "| {r} | {w} | {d} | {ns:.0} |");
            }
            md.push('\n');
        }
        md
    }

    /// Writes `results.jsonl`, `report.md` and the charts into `dir` (created if missing).
    ///
    /// # Errors
    ///
    /// The file system's or the chart drawing's error, as text.
    pub fn write(&self, dir: &Path, jsonl: &str) -> Result<Vec<String>, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let put = |name: &str, text: &str| {
            std::fs::write(dir.join(name), text).map_err(|e| format!("{name}: {e}"))
        };
        put("results.jsonl", jsonl)?;
        put("report.md", &self.markdown())?;
        let mut written = vec!["results.jsonl".to_string(), "report.md".to_string()];
        let mut chart = |name: &str, svg: Result<String, String>| -> Result<(), String> {
            put(name, &svg?)?;
            written.push(name.to_string());
            Ok(())
        };
        if !self.single.is_empty() {
            chart("ns_per_op.svg", self.ns_chart().to_svg())?;
        }
        if !self.threads.is_empty() {
            chart("threads.svg", self.threads_chart().to_svg())?;
        }
        if !self.timelines.is_empty() {
            chart("held_over_time.svg", self.timeline_chart().to_svg())?;
        }
        if !self.holes.is_empty() {
            chart("holes.svg", self.holes_chart().to_svg())?;
        }
        if !self.devices.is_empty() {
            chart("devices.svg", self.devices_chart().to_svg())?;
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_peers::parse_peers;

    #[test]
    fn a_report_folder_has_its_tables_and_a_chart_per_measurement() {
        let single = BenchResult {
            resource: "pool".into(),
            workload: "W1".into(),
            ops: 10,
            ns_per_op: 40.0,
            peak_held_bytes: 110,
            peak_live_bytes: 100,
        };
        let threads = |n: usize, ops_per_s: f64| ThreadsResult {
            resource: "sharded".into(),
            workload: "W1".into(),
            threads: n,
            shared_stream: false,
            ops: 10 * n,
            ops_per_s,
            peak_held_bytes: 120,
            peak_live_bytes: 100,
            timed_ops: 30 * n,
            driver_calls: None,
            chunk_moves: None,
        };
        let c = Collected {
            device: "sim test".into(),
            single: vec![single],
            threads: vec![threads(1, 1e6), threads(2, 1.9e6)],
            threads_plan: "20000 operations per thread in each timed round.".into(),
            threads_skipped: vec!["arena W3 by 16 threads (own streams)".into()],
            timelines: vec![Timeline {
                resource: "pool".into(),
                workload: "W1".into(),
                points: vec![(0, 0, 0), (100, 1 << 20, 2 << 20), (200, 0, 2 << 20)],
            }],
            holes: vec![("pool".into(), 1, 20.0), ("pool".into(), 1000, 21.0)],
            devices: vec![
                ("cuda".into(), "W1".into(), 1, 7000.0),
                ("cuda".into(), "W1".into(), 16, 22000.0),
            ],
            peers: parse_peers("RESULT C_rmm_pool W1 status=ok ns_per_op=954.0\n"),
        };
        let dir = std::env::temp_dir().join(format!("emm-report-{}", std::process::id()));
        let files = c.write(&dir, "{}\n").unwrap();
        for f in [
            "results.jsonl",
            "report.md",
            "ns_per_op.svg",
            "threads.svg",
            "held_over_time.svg",
            "holes.svg",
            "devices.svg",
        ] {
            assert!(files.iter().any(|x| x == f), "{f} missing from {files:?}");
            assert!(dir.join(f).is_file());
        }
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(
            md.contains("| sharded | W1 | own | 2 | 1900000 | 1.90 | 1.200 |"),
            "{md}"
        );
        assert!(
            md.contains("20000 operations per thread")
                && md.contains(
                    "Skipped when the time budget ran out (1): arena W3 by 16 threads (own streams)."
                ),
            "{md}"
        );
        let bars = std::fs::read_to_string(dir.join("ns_per_op.svg")).unwrap();
        assert!(bars.contains("RMM pool") && bars.contains("emm pool"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
