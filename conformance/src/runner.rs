//! [`check`]: runs the fixed scenarios and the random cases on every core, shrinks the first
//! failure of each check to its shortest sequence, and writes the report.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use emm_core::contract::ManagerFactory;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config as PtConfig, RngAlgorithm, TestRng, TestRunner};

use crate::backend::Backend;
use crate::checks::CheckId;
use crate::config::{mix, Config, Progress};
use crate::coverage::Coverage;
use crate::replay::{save, Regression};
use crate::report::{Failure, Report};
use crate::strategy::{case, scenarios};
use crate::sut::{Finding, SetupError, Sut};
use crate::transition::Op;

/// Most runs spent lowering picks after shrinking.
const PICK_RUNS: usize = 64;

/// One shrunk failure, before it becomes a report entry.
#[derive(Debug, Clone)]
pub struct Found {
    /// The case's index (scenarios first).
    pub case: usize,
    /// The seed of the case's machine.
    pub machine_seed: u64,
    /// The shortest sequence found that still fails the check.
    pub ops: Vec<Op>,
    /// The failure it gives.
    pub finding: Finding,
}

/// Runs `ops` on a fresh machine of `backend` seeded with `machine_seed`.
///
/// # Errors
///
/// The machine or the plugin cannot be had.
pub fn run_case(
    factory: &dyn ManagerFactory,
    backend: &dyn Backend,
    machine_seed: u64,
    ops: &[Op],
) -> Result<Option<Finding>, SetupError> {
    run_case_covered(factory, backend, machine_seed, ops).map(|(f, _)| f)
}

/// As [`run_case`], with what the case exercised.
///
/// # Errors
///
/// The machine or the plugin cannot be had.
pub fn run_case_covered(
    factory: &dyn ManagerFactory,
    backend: &dyn Backend,
    machine_seed: u64,
    ops: &[Op],
) -> Result<(Option<Finding>, Coverage), SetupError> {
    let machine = backend.machine(machine_seed).map_err(SetupError)?;
    match Sut::new(factory, machine, backend.observes()) {
        Ok(sut) => Ok(sut.run_covered(ops)),
        Err(Ok(f)) => Ok((Some(f), Coverage::default())),
        Err(Err(e)) => Err(e),
    }
}

/// What replaying a regression gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The check the file records.
    pub recorded: Option<CheckId>,
    /// The failure the replay gave (`None`: the case passes now).
    pub finding: Option<Finding>,
}

impl Verdict {
    /// Whether the replay failed the check the file records.
    pub fn reproduced(&self) -> bool {
        self.finding.as_ref().map(|f| f.check) == self.recorded && self.recorded.is_some()
    }
}

/// Runs the regression's operations on a machine seeded as the original was.
///
/// # Errors
///
/// The machine or the plugin cannot be had.
pub fn replay(
    factory: &dyn ManagerFactory,
    backend: &dyn Backend,
    r: &Regression,
) -> Result<Verdict, String> {
    let finding = run_case(factory, backend, r.machine_seed, &r.ops).map_err(|e| e.0)?;
    Ok(Verdict {
        recorded: CheckId::from_name(&r.check),
        finding,
    })
}

/// The seed of case `index` of a run seeded with `seed`.
pub fn case_seed(seed: u64, index: usize) -> u64 {
    mix(seed ^ mix(index as u64))
}

fn rng(seed: u64) -> TestRng {
    let mut bytes = [0u8; 32];
    for (i, chunk) in bytes.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&mix(seed.wrapping_add(i as u64)).to_le_bytes());
    }
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

/// Checks the plugin that `factory` makes against every rule of the contract.
///
/// The fixed scenarios run first, then `config.cases` random cases of up to
/// `config.max_ops` operations, `config.threads` at a time. The first failure of each check
/// (lowest case index, so a seed always gives the same report) is shrunk and, when
/// `config.regressions` is set, written there.
pub fn check(factory: &dyn ManagerFactory, config: &Config) -> Report {
    let start = Instant::now();
    let plugin = config
        .plugin
        .clone()
        .unwrap_or_else(|| factory.name().to_string());
    let fixed = scenarios();
    let total = fixed.len() + config.cases;
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let found: Mutex<BTreeMap<CheckId, Found>> = Mutex::new(BTreeMap::new());
    let setup: Mutex<Option<String>> = Mutex::new(None);
    let covered: Mutex<Coverage> = Mutex::new(Coverage::default());
    let backend = &*config.backend;
    let worker = || loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        if index >= total || stop.load(Ordering::Relaxed) {
            break;
        }
        let machine_seed = case_seed(config.seed, index);
        let outcome = crate::sut::guarded(|| match fixed.get(index) {
            Some((_, ops)) => run_fixed(factory, backend, machine_seed, ops, &found, index, config),
            None => run_random(factory, backend, machine_seed, &found, index, config),
        })
        .map(|r| {
            r.map(|c| {
                if let Ok(mut all) = covered.lock() {
                    all.merge(&c);
                }
            })
        })
        .unwrap_or_else(|p| {
            Err(SetupError(format!(
                "case {index} stopped: a panic outside the plugin's calls ({p}); this is a bug \
                 of emm-conformance, please report it with the seed"
            )))
        });
        if let Err(SetupError(e)) = outcome {
            let mut s = setup.lock().unwrap_or_else(|p| p.into_inner());
            s.get_or_insert(e);
            stop.store(true, Ordering::Relaxed);
        }
        let d = done.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(p) = &config.progress {
            let failed = found.lock().map_or(0, |f| f.len());
            p(Progress {
                done: d,
                total,
                failed,
            });
        }
    };
    std::thread::scope(|s| {
        for _ in 0..config.threads.clamp(1, total.max(1)) {
            s.spawn(worker);
        }
    });
    let found = found.into_inner().unwrap_or_else(|p| p.into_inner());
    let error = setup.into_inner().unwrap_or_else(|p| p.into_inner());
    let failures = found
        .into_iter()
        .map(|(id, f)| (id, failure(&plugin, backend, config, f)))
        .collect();
    let coverage = covered.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut report = Report::new(&plugin, backend, config, failures).with_coverage(coverage);
    report.error = error;
    report.passed = report.passed && report.error.is_none();
    report.elapsed_ms = start.elapsed().as_millis() as u64;
    report
}

/// Whether case `index` should shrink a failure of `check`: no lower case has one.
fn claim(found: &Mutex<BTreeMap<CheckId, Found>>, check: CheckId, index: usize) -> bool {
    found
        .lock()
        .is_ok_and(|f| f.get(&check).is_none_or(|g| g.case > index))
}

/// Keeps the shortened failure `(ops, finding)` of case `case` unless an earlier case already
/// failed the same check.
fn keep(
    found: &Mutex<BTreeMap<CheckId, Found>>,
    case: usize,
    machine_seed: u64,
    (ops, finding): (Vec<Op>, Finding),
) {
    let f = Found {
        case,
        machine_seed,
        ops,
        finding,
    };
    if let Ok(mut map) = found.lock() {
        let better = map.get(&f.finding.check).is_none_or(|g| g.case > f.case);
        if better {
            map.insert(f.finding.check, f);
        }
    }
}

fn run_fixed(
    factory: &dyn ManagerFactory,
    backend: &dyn Backend,
    machine_seed: u64,
    ops: &[Op],
    found: &Mutex<BTreeMap<CheckId, Found>>,
    index: usize,
    config: &Config,
) -> Result<Coverage, SetupError> {
    let (finding, coverage) = run_case_covered(factory, backend, machine_seed, ops)?;
    let Some(finding) = finding else {
        return Ok(coverage);
    };
    if claim(found, finding.check, index) {
        let machine = (factory, backend, machine_seed);
        let mut shortening = Shortening::new(machine, ops.to_vec(), finding, config.shrink_runs);
        let stopped = shortening.last_passes().err();
        keep_shrunk(found, index, shortening, stopped)?;
    }
    Ok(coverage)
}

fn run_random(
    factory: &dyn ManagerFactory,
    backend: &dyn Backend,
    machine_seed: u64,
    found: &Mutex<BTreeMap<CheckId, Found>>,
    index: usize,
    config: &Config,
) -> Result<Coverage, SetupError> {
    let mut runner = TestRunner::new_with_rng(PtConfig::default(), rng(machine_seed));
    let Ok(mut tree) = case(config.max_ops).new_tree(&mut runner) else {
        return Ok(Coverage::default());
    };
    let ops = tree.current();
    let (first, coverage) = run_case_covered(factory, backend, machine_seed, &ops)?;
    let Some(first) = first else {
        return Ok(coverage);
    };
    if !claim(found, first.check, index) {
        return Ok(coverage);
    }
    let machine = (factory, backend, machine_seed);
    let mut shortening = Shortening::new(machine, ops, first, config.shrink_runs);
    let stopped = shortening
        .proptest(&mut tree)
        .and_then(|()| shortening.last_passes())
        .err();
    keep_shrunk(found, index, shortening, stopped)?;
    Ok(coverage)
}

/// A failing case being shortened: the shortest sequence found so far that fails the check,
/// and the runs left to spend on shortening it further.
struct Shortening<'a> {
    factory: &'a dyn ManagerFactory,
    backend: &'a dyn Backend,
    machine_seed: u64,
    ops: Vec<Op>,
    finding: Finding,
    runs_left: usize,
}

impl<'a> Shortening<'a> {
    fn new(
        (factory, backend, machine_seed): (&'a dyn ManagerFactory, &'a dyn Backend, u64),
        ops: Vec<Op>,
        finding: Finding,
        runs: usize,
    ) -> Self {
        Shortening {
            factory,
            backend,
            machine_seed,
            ops,
            finding,
            runs_left: runs,
        }
    }

    /// Runs `candidate` (one run of those left) and keeps it when the same check still fails.
    ///
    /// # Errors
    ///
    /// The candidate cannot be set up: on a GPU, a device fault leaves the context unusable,
    /// so no later case can run.
    fn try_candidate(&mut self, candidate: Vec<Op>) -> Result<bool, SetupError> {
        self.runs_left = self.runs_left.saturating_sub(1);
        match run_case(self.factory, self.backend, self.machine_seed, &candidate)? {
            Some(f) if f.check == self.finding.check => {
                self.ops = candidate;
                self.finding = f;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// proptest's shrinking: drop operations, then simplify what is left.
    fn proptest(&mut self, tree: &mut impl ValueTree<Value = Vec<Op>>) -> Result<(), SetupError> {
        if !tree.simplify() {
            return Ok(());
        }
        while self.runs_left > 0 {
            let more = if self.try_candidate(tree.current())? {
                tree.simplify()
            } else {
                tree.complicate()
            };
            if !more {
                break;
            }
        }
        Ok(())
    }

    /// The passes after proptest's shrinking (the only ones for the fixed scenarios): remove
    /// steps with the runs left, then lower picks with [`PICK_RUNS`] more.
    fn last_passes(&mut self) -> Result<(), SetupError> {
        self.remove_steps()?;
        self.runs_left = PICK_RUNS;
        self.small_picks()
    }

    /// Removes one step at a time, from the last.
    fn remove_steps(&mut self) -> Result<(), SetupError> {
        let mut i = self.ops.len();
        while i > 0 && self.runs_left > 0 {
            i -= 1;
            let mut candidate = self.ops.clone();
            candidate.remove(i);
            if self.try_candidate(candidate)? {
                i = i.min(self.ops.len());
            }
        }
        Ok(())
    }

    /// Lowers each pick to the smallest value (0 to 3) that still fails the same check, so that
    /// the shrunk case reads `drop(#1)` rather than `drop(#40213)`.
    fn small_picks(&mut self) -> Result<(), SetupError> {
        for i in 0..self.ops.len() {
            let Some(current) = self.ops[i].pick_mut().map(|p| *p) else {
                continue;
            };
            for small in 0..current.min(4) {
                if self.runs_left == 0 {
                    return Ok(());
                }
                let mut candidate = self.ops.clone();
                if let Some(p) = candidate[i].pick_mut() {
                    *p = small;
                }
                if self.try_candidate(candidate)? {
                    break;
                }
            }
        }
        Ok(())
    }
}

/// Keeps the shortened failure (see [`keep`]); `stopped`, the error that ended the shortening
/// early if one did, ends the run with the failure still reported.
fn keep_shrunk(
    found: &Mutex<BTreeMap<CheckId, Found>>,
    case: usize,
    shortening: Shortening<'_>,
    stopped: Option<SetupError>,
) -> Result<(), SetupError> {
    let check = shortening.finding.check;
    let machine_seed = shortening.machine_seed;
    keep(
        found,
        case,
        machine_seed,
        (shortening.ops, shortening.finding),
    );
    match stopped {
        None => Ok(()),
        Some(SetupError(e)) => Err(SetupError(format!(
            "{e}; this happened while shortening case {case}'s failure of {}, which is reported \
             as far as it was shortened (a device fault leaves a GPU's context unusable, so no \
             later case can run)",
            check.name()
        ))),
    }
}

fn failure(plugin: &str, backend: &dyn Backend, config: &Config, f: Found) -> Failure {
    let regression = Regression {
        emm_conformance: env!("CARGO_PKG_VERSION").to_string(),
        plugin: plugin.to_string(),
        backend: backend.name().to_string(),
        check: f.finding.check.name().to_string(),
        message: f.finding.message.clone(),
        seed: config.seed,
        case: f.case,
        machine_seed: f.machine_seed,
        step: f.finding.step,
        ops: f.ops.clone(),
    };
    let path = config
        .regressions
        .as_ref()
        .map(|dir| save(dir, &regression));
    Failure::new(&regression, path, config)
}
