//! The training-loop workload: what one iteration allocates, moves and frees, over any
//! [`Strategy`] of memory management.
//!
//! One iteration: the host fills an input batch (a host allocation) and moves it to the
//! device; the forward pass produces, per layer, five activations (a large one, a medium one,
//! three smaller ones: 55, 25, 12, 5 and 3 % of the layer's share) and six small tensors
//! (4–64 KiB), each written by a kernel that also reads the previous layer's large activation;
//! whenever the activations resident on the device pass 60 % of its memory, the oldest
//! activations of 1 MiB or more are offloaded to the host (non-blocking). The backward pass
//! walks the layers in reverse: brings offloaded activations back, reads every tensor of the
//! layer with a kernel, and frees them. Last, a 4 KiB loss goes to the host (a blocking move)
//! and the host reads it. The activations of one iteration add up to `factor` × device
//! memory.

use emm_core::DriverError;

/// How one strategy allocates, moves and frees; each buffer is used on one stream.
pub trait Strategy {
    /// A buffer of this strategy.
    type Buf;
    /// Device memory for an activation.
    fn device(&mut self, bytes: usize) -> Result<Self::Buf, String>;
    /// Host memory meant to go to the device (the input batch).
    fn host(&mut self, bytes: usize) -> Result<Self::Buf, String>;
    /// The host writes the whole buffer.
    fn host_fill(&mut self, b: &Self::Buf) -> Result<(), String>;
    /// The host reads the whole buffer.
    fn host_read(&mut self, b: &Self::Buf) -> Result<(), String>;
    /// Moves (or copies) a buffer to the device.
    fn to_device(&mut self, b: Self::Buf) -> Result<Self::Buf, String>;
    /// Moves (or copies) a buffer to the host; `blocking` waits for it.
    fn to_host(&mut self, b: Self::Buf, blocking: bool) -> Result<Self::Buf, String>;
    /// A kernel reads (or writes) the whole buffer.
    fn kernel(&mut self, b: &Self::Buf, write: bool) -> Result<(), String>;
    /// Frees a buffer.
    fn free(&mut self, b: Self::Buf) -> Result<(), String>;
    /// Bytes of a buffer.
    fn size(&self, b: &Self::Buf) -> usize;
}

/// Maps a driver error to the harness's error text.
pub fn e(err: DriverError) -> String {
    err.to_string()
}

/// The shape of the workload.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Device memory in bytes.
    pub device_memory: u64,
    /// Activations per iteration over device memory.
    pub factor: f64,
    /// Layers.
    pub layers: usize,
    /// Iterations.
    pub iterations: usize,
}

const SHARES: [f64; 5] = [0.55, 0.25, 0.12, 0.05, 0.03];
const SMALL: [usize; 6] = [4 << 10, 8 << 10, 16 << 10, 24 << 10, 48 << 10, 64 << 10];
const INPUT: usize = 32 << 20;
const LOSS: usize = 4 << 10;
/// Activations stay on the device up to this fraction of its memory.
const RESIDENT: f64 = 0.75;
/// Only activations this large are offloaded (small tensors stay).
const OFFLOAD_MIN: usize = 1 << 20;

impl Shape {
    /// The byte sizes of layer `l`'s tensors: five activations, then the small ones. Sizes
    /// vary a little from layer to layer (odd byte counts, as real shapes give).
    pub fn layer_sizes(&self, l: usize) -> Vec<usize> {
        let share = self.factor * self.device_memory as f64 / self.layers as f64;
        let wobble = 1.0 + 0.04 * ((l * 7 % 5) as f64 - 2.0);
        let mut v: Vec<usize> = SHARES
            .iter()
            .map(|s| (share * s * wobble) as usize | 1)
            .collect();
        v.extend(SMALL.iter().map(|&n| n - 8 * (l % 3)));
        v
    }
}

/// One tensor of a layer: the buffer and whether it is on the device (`None` once moved out
/// for a move).
type Slot<B> = Option<(B, bool)>;

/// Runs the workload; returns the peak bytes of activations live at once.
pub fn run<S: Strategy>(s: &mut S, shape: &Shape) -> Result<u64, String> {
    let budget = (RESIDENT * shape.device_memory as f64) as usize;
    let mut peak = 0u64;
    for _ in 0..shape.iterations {
        let input = s.host(INPUT)?;
        s.host_fill(&input)?;
        let input = s.to_device(input)?;
        s.kernel(&input, false)?;
        let mut layers: Vec<Vec<Slot<S::Buf>>> = Vec::with_capacity(shape.layers);
        let mut resident = 0usize;
        let mut live = 0u64;
        for l in 0..shape.layers {
            let mut tensors = Vec::new();
            for n in shape.layer_sizes(l) {
                let b = s.device(n)?;
                match layers.last().and_then(|t| t[0].as_ref()) {
                    Some((prev, true)) => s.kernel(prev, false)?,
                    _ => s.kernel(&input, false)?,
                }
                s.kernel(&b, true)?;
                resident += n;
                live += n as u64;
                tensors.push(Some((b, true)));
            }
            layers.push(tensors);
            peak = peak.max(live);
            // Offload the oldest large activations while over the budget (not this layer's).
            'offload: for t in layers.iter_mut().take(l) {
                for slot in t.iter_mut() {
                    if resident <= budget {
                        break 'offload;
                    }
                    let n = match slot {
                        Some((b, true)) if s.size(b) >= OFFLOAD_MIN => s.size(b),
                        _ => continue,
                    };
                    if let Some((b, _)) = slot.take() {
                        *slot = Some((s.to_host(b, false)?, false));
                        resident -= n;
                    }
                }
            }
        }
        s.free(input)?;
        for mut tensors in layers.into_iter().rev() {
            for slot in tensors.iter_mut() {
                if let Some((b, _)) = slot.take_if(|(_, on_device)| !*on_device) {
                    *slot = Some((s.to_device(b)?, true));
                }
            }
            for (b, _) in tensors.into_iter().flatten() {
                s.kernel(&b, false)?;
                s.free(b)?;
            }
        }
        let loss = s.device(LOSS)?;
        s.kernel(&loss, true)?;
        let loss = s.to_host(loss, true)?;
        s.host_read(&loss)?;
        s.free(loss)?;
    }
    Ok(peak)
}
