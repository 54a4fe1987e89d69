// The peers driven by many threads at once, as `emm bench --threads` drives emm's resources:
// each of N threads replays its own copy of an op list (the peers' gen_ops files), on its own
// non-blocking stream ("own") or all on the legacy default stream ("shared").
//
// Protocol (the same as emm_bench::threads): threads start together at a barrier;
// one untimed warm-up round; three timed rounds (each thread replays its list enough times to
// reach ROUND_OPS operations, default a million), wall clock from the first thread's start to
// the last thread's end plus a device synchronize, median round -> operations per second, all threads together; then one
// round reading cudaMemGetInfo after every allocation (every 16th on W3, as the peers' single-
// thread harness does) for peak memory held, with peak live bytes summed over the threads by
// an atomic counter.
//
// Built twice on the GPU machine by run.sh: -DWITH_RMM (RMM pool, arena) and -DWITH_TORCH
// (PyTorch's CUDACachingAllocator), with the flags of the peers' run_all.sh.
// usage: peers_threads <allocator> <opsdir> <W> <threads,...> <own|shared>...
// output: THREADS <label> <W> threads=<n> stream=<own|shared> status=ok ops_per_s=<x>
//         peak_used=<bytes> peak_live=<bytes>
#include "workload.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>
#include <thread>

#ifdef WITH_RMM
#include <rmm/aligned.hpp>
#include <rmm/cuda_device.hpp>
#include <rmm/mr/arena_memory_resource.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#include <cuda/stream>
#endif
#ifdef WITH_TORCH
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

using namespace anchors;

// One allocator behind two functions, the stream passed per call.
struct Alloc {
  std::function<void*(size_t, cudaStream_t)> alloc;
  std::function<void(void*, size_t, cudaStream_t)> free;
};

struct Meter {
  size_t base_free = 0;
  std::atomic<size_t> live{0}, peak_live{0}, peak_used{0};
  size_t poll_every = 1;
};

static void fetch_max(std::atomic<size_t>& a, size_t v)
{
  size_t cur = a.load(std::memory_order_relaxed);
  while (v > cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {}
}

static void replay(Alloc& a, const Ops& ops, cudaStream_t s, Meter* m)
{
  std::vector<Slot> live;
  live.reserve(ops.max_live + 1);
  size_t na = 0;
  for (int64_t x : ops.v) {
    if (x > 0) {
      size_t n = static_cast<size_t>(x);
      void* p  = a.alloc(n, s);
      if (p == nullptr) throw std::runtime_error("allocation returned null");
      live.push_back(Slot{p, n});
      if (m) {
        fetch_max(m->peak_live, m->live.fetch_add(n) + n);
        if ((++na % m->poll_every) == 0) fetch_max(m->peak_used, dev_used(m->base_free));
      }
    } else {
      size_t j = static_cast<size_t>(-x - 1);
      Slot sl  = live[j];
      live[j]  = live.back();
      live.pop_back();
      if (m) m->live.fetch_sub(sl.n);
      a.free(sl.p, sl.n, s);
    }
  }
}

// A one-use barrier (C++17: the peers' build flags; std::barrier is C++20).
class Barrier {
 public:
  explicit Barrier(size_t n) : left_(n) {}
  void arrive_and_wait()
  {
    std::unique_lock<std::mutex> l(m_);
    if (--left_ == 0) {
      cv_.notify_all();
    } else {
      cv_.wait(l, [this] { return left_ == 0; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  size_t left_;
};

// One round: every thread replays `repeat` times; returns wall seconds from the first thread's
// start to the last one's end (each thread times itself) plus a device synchronize.
static double round_of(Alloc& a, const Ops& ops, const std::vector<cudaStream_t>& streams,
                       int repeat, Meter* m)
{
  int dev = 0;
  ANCHOR_CUDA(cudaGetDevice(&dev));
  Barrier sync(streams.size());
  std::vector<std::thread> ts;
  std::vector<std::string> errors(streams.size());
  std::vector<double> start(streams.size()), end(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    ts.emplace_back([&, i] {
      cudaSetDevice(dev);
      sync.arrive_and_wait();
      start[i] = now_s();
      try {
        for (int r = 0; r < repeat; ++r) replay(a, ops, streams[i], m);
      } catch (std::exception const& e) {
        errors[i] = e.what();
      }
      end[i] = now_s();
    });
  }
  for (auto& t : ts) t.join();
  double t0 = now_s();
  ANCHOR_CUDA(cudaDeviceSynchronize());
  double synced = now_s() - t0;
  for (auto& e : errors)
    if (!e.empty()) throw std::runtime_error(e);
  return *std::max_element(end.begin(), end.end()) - *std::min_element(start.begin(), start.end()) +
         synced;
}

// One cell: throughput on one allocator, then memory held on a fresh one (so that what it
// holds comes from the measured round alone), as emm_bench::threads does.
template <class Make>
static void bench(const std::string& label, Make make, const Ops& ops, int threads, bool shared,
                  size_t round_ops)
{
  std::vector<cudaStream_t> streams(threads, nullptr);
  if (!shared)
    for (auto& s : streams) ANCHOR_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int repeat = std::max<int>(1, static_cast<int>(round_ops / ops.v.size()));
  const char* mode = shared ? "shared" : "own";
  try {
    std::vector<double> t;
    {
      auto h = make();
      double warm = round_of(h->a, ops, streams, repeat, nullptr);
      // A slow allocator (a contended lock at 16 threads) gets one timed round, not three.
      int rounds = warm > 20.0 ? 1 : 3;
      for (int k = 0; k < rounds; ++k) t.push_back(round_of(h->a, ops, streams, repeat, nullptr));
    }
    std::sort(t.begin(), t.end());
    Meter m;
    ANCHOR_CUDA(cudaDeviceSynchronize());
    size_t total = 0;
    ANCHOR_CUDA(cudaMemGetInfo(&m.base_free, &total));
    m.poll_every = ops.name == "W3" ? 16 : 1;
    {
      auto h = make();
      round_of(h->a, ops, streams, 1, &m);
    }
    double ops_per_s = double(ops.v.size()) * threads * repeat / t[t.size() / 2];
    std::printf("THREADS %s %s threads=%d stream=%s status=ok ops_per_s=%.0f peak_used=%zu peak_live=%zu\n",
                label.c_str(), ops.name.c_str(), threads, mode, ops_per_s, m.peak_used.load(),
                m.peak_live.load());
  } catch (std::exception const& e) {
    std::printf("THREADS %s %s threads=%d stream=%s status=FAILED error=\"%s\"\n", label.c_str(),
                ops.name.c_str(), threads, mode, e.what());
  }
  std::fflush(stdout);
  if (!shared)
    for (auto& s : streams) cudaStreamDestroy(s);
}

static std::vector<int> parse_list(const std::string& s)
{
  std::vector<int> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(std::stoi(item));
  return v;
}

// Runs every (threads, stream mode) cell with fresh allocators made by `make`. Cells whose
// threads together would need more than 60 % of the device's memory live are skipped (W2 by
// 16 threads needs 72 GB), as emm bench skips them.
template <class Make>
static void cells(const std::string& label, const Ops& ops, const std::vector<int>& threads,
                  const std::vector<bool>& modes, Make make)
{
  size_t fr = 0, total = 0;
  ANCHOR_CUDA(cudaMemGetInfo(&fr, &total));
  // Peak live bytes of one copy of the list (sizes kept with the same swap-remove).
  std::vector<size_t> sizes;
  size_t peak = 0, live = 0;
  for (int64_t x : ops.v) {
    if (x > 0) {
      sizes.push_back(size_t(x));
      live += size_t(x);
      peak = std::max(peak, live);
    } else {
      size_t j = size_t(-x - 1);
      live -= sizes[j];
      sizes[j] = sizes.back();
      sizes.pop_back();
    }
  }
  const char* env = std::getenv("ROUND_OPS");
  size_t round_ops = env ? std::strtoull(env, nullptr, 10) : 1000000;
  for (bool shared : modes) {
    for (int n : threads) {
      if (double(peak) * n > 0.6 * double(total)) {
        std::fprintf(stderr, "%s %s by %d threads skipped: passes 60%% of the device\n",
                     label.c_str(), ops.name.c_str(), n);
        continue;
      }
      bench(label, make, ops, n, shared, round_ops);
    }
  }
}

#ifdef WITH_RMM
template <class MR>
struct RmmHolder {
  MR mr;
  Alloc a;
  template <class... Args>
  explicit RmmHolder(Args&&... args) : mr(std::forward<Args>(args)...)
  {
    a.alloc = [this](size_t n, cudaStream_t s) {
      return mr.allocate(cuda::stream_ref{s}, n, rmm::CUDA_ALLOCATION_ALIGNMENT);
    };
    a.free = [this](void* p, size_t n, cudaStream_t s) {
      mr.deallocate(cuda::stream_ref{s}, p, n, rmm::CUDA_ALLOCATION_ALIGNMENT);
    };
  }
};
#endif

#ifdef WITH_TORCH
namespace cca = c10::cuda::CUDACachingAllocator;
struct TorchHolder {
  Alloc a;
  TorchHolder()
  {
    a.alloc = [](size_t n, cudaStream_t s) { return cca::raw_alloc_with_stream(n, s); };
    a.free  = [](void* p, size_t, cudaStream_t) { cca::raw_delete(p); };
  }
  ~TorchHolder()
  {
    cudaDeviceSynchronize();
    cca::emptyCache();
  }
};
#endif

int main(int argc, char** argv)
{
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s <allocator> <opsdir> <W> <threads,...> <own|shared>...\n", argv[0]);
    return 2;
  }
  std::string which = argv[1];
  std::vector<bool> modes;
  for (int i = 5; i < argc; ++i) modes.push_back(std::string(argv[i]) == "shared");
  try {
    ANCHOR_CUDA(cudaFree(nullptr));
    Ops ops = load_ops(argv[2], argv[3]);
    std::vector<int> threads = parse_list(argv[4]);
#ifdef WITH_RMM
    if (which == "rmm_pool") {
      using H = RmmHolder<rmm::mr::pool_memory_resource>;
      cells(which, ops, threads, modes, [] {
        return std::make_unique<H>(rmm::mr::cuda_memory_resource{},
                                   rmm::percent_of_free_device_memory(50));
      });
      return 0;
    }
    if (which == "rmm_arena") {
      using H = RmmHolder<rmm::mr::arena_memory_resource>;
      cells(which, ops, threads, modes,
            [] { return std::make_unique<H>(rmm::mr::cuda_memory_resource{}); });
      return 0;
    }
#endif
#ifdef WITH_TORCH
    if (which == "torch_caching") {
      cca::init(static_cast<int>(c10::cuda::device_count()));
      cells(which, ops, threads, modes, [] { return std::make_unique<TorchHolder>(); });
      return 0;
    }
#endif
#ifdef WITH_HOST_MALLOC
    // A self-test of this driver without a GPU: host malloc behind the same calls.
    if (which == "host_malloc") {
      struct H {
        Alloc a{[](size_t n, cudaStream_t) { return std::malloc(n); },
                [](void* p, size_t, cudaStream_t) { std::free(p); }};
      };
      cells(which, ops, threads, modes, [] { return std::make_unique<H>(); });
      return 0;
    }
#endif
    std::fprintf(stderr, "unknown allocator %s (built without it?)\n", which.c_str());
    return 2;
  } catch (std::exception const& e) {
    std::printf("THREADS %s setup status=FAILED error=\"%s\"\n", which.c_str(), e.what());
    return 1;
  }
}
