//! The peers' figures for `emm bench --report --peers FILES`: the `RESULT` lines of the peers'
//! harness (`cargo xtask hardware --peers DIR`, one thread) and the `THREADS` lines of the bundle's many-threads
//! driver (`xtask/hardware/peers_threads.cu`).

/// A peer's figure read from the peers' harness output (`RESULT …` and `THREADS …` lines).
#[derive(Debug, Clone, PartialEq)]
pub enum PeerFigure {
    /// One thread: ns per op on a workload.
    Single {
        /// The allocator's label, e.g. `C_rmm_pool`.
        label: String,
        /// W1, W2 or W3.
        workload: String,
        /// ns per operation.
        ns_per_op: f64,
    },
    /// Many threads.
    Threads {
        /// The allocator's label, e.g. `rmm_pool`.
        label: String,
        /// W1, W2 or W3.
        workload: String,
        /// Threads at once.
        threads: usize,
        /// Whether they shared one stream.
        shared: bool,
        /// Operations per second, all threads together.
        ops_per_s: f64,
        /// Held at peak over peak live, when measured.
        held_over_live: Option<f64>,
    },
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|t| t.strip_prefix(key)?.strip_prefix('='))
}

/// Parses the peers' output: lines `RESULT <label> <W> … status=ok … ns_per_op=<x>` and
/// `THREADS <label> <W> threads=<n> stream=<own|shared> status=ok ops_per_s=<x>
/// peak_used=<b> peak_live=<b>`; anything else is skipped.
pub fn parse_peers(text: &str) -> Vec<PeerFigure> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut t = line.split_whitespace();
        let (Some(kind), Some(label), Some(w)) = (t.next(), t.next(), t.next()) else {
            continue;
        };
        if field(line, "status") != Some("ok") {
            continue;
        }
        let num = |k| field(line, k).and_then(|v| v.parse::<f64>().ok());
        match kind {
            "RESULT" => {
                if let Some(ns) = num("ns_per_op") {
                    out.push(PeerFigure::Single {
                        label: label.to_string(),
                        workload: w.to_string(),
                        ns_per_op: ns,
                    });
                }
            }
            "THREADS" => {
                if let (Some(n), Some(ops)) = (num("threads"), num("ops_per_s")) {
                    let held = match (num("peak_used"), num("peak_live")) {
                        (Some(u), Some(l)) if l > 0.0 => Some(u / l),
                        _ => None,
                    };
                    out.push(PeerFigure::Threads {
                        label: label.to_string(),
                        workload: w.to_string(),
                        threads: n as usize,
                        shared: field(line, "stream") == Some("shared"),
                        ops_per_s: ops,
                        held_over_live: held,
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// A readable name for a peer's label: `C_rmm_pool` → `RMM pool`, `D_torch_caching` →
/// `PyTorch caching`.
pub(crate) fn peer_name(label: &str) -> String {
    let l = label
        .trim_start_matches(|c: char| {
            c.is_ascii_uppercase() && label.as_bytes().get(1) == Some(&b'_')
        })
        .trim_start_matches('_');
    let l = l
        .replacen("rmm_", "RMM ", 1)
        .replacen("torch_", "PyTorch ", 1);
    l.replace('_', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_lines_parse_and_name() {
        let text = "RESULT C_rmm_pool W1 ops=100468 status=ok runs=3 median_s=0.09 ns_per_op=954.0 t1=1\n\
                    RESULT A_cudaMalloc W3 status=SKIPPED error=\"x\"\n\
                    THREADS rmm_arena W3 threads=8 stream=shared status=ok ops_per_s=2000000 peak_used=300 peak_live=200\n\
                    noise\n";
        let p = parse_peers(text);
        assert_eq!(p.len(), 2);
        assert_eq!(
            p[0],
            PeerFigure::Single {
                label: "C_rmm_pool".into(),
                workload: "W1".into(),
                ns_per_op: 954.0
            }
        );
        assert!(
            matches!(&p[1], PeerFigure::Threads { threads: 8, shared: true, held_over_live: Some(h), .. } if (*h - 1.5).abs() < 1e-9)
        );
        assert_eq!(peer_name("C_rmm_pool"), "RMM pool");
        assert_eq!(peer_name("D_torch_caching"), "PyTorch caching");
        assert_eq!(peer_name("rmm_arena"), "RMM arena");
    }
}
