#include "pool.h"

#include <algorithm>
#include <system_error>

#include "kernels.h"
#include "simd.h"
#include "system.h"

namespace voxslab {

void RowPool::Resize(int n) {
  while (busy_.exchange(true, std::memory_order_acquire)) CpuRelax();
  ResizeHeld(n);
  busy_.store(false, std::memory_order_release);
}

void RowPool::ResizeHeld(int n) {
  if (!helpers_.empty()) {
    stop_.store(true, std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(mu_);
    }
    cv_.notify_all();
    for (auto& t : helpers_) t.join();
    helpers_.clear();
    stop_.store(false, std::memory_order_release);
  }
  // Helpers start from the current generation: a call made before a helper first runs is
  // still seen as new.
  const uint32_t g0 = gen_.load(std::memory_order_acquire);
  for (int i = 1; i < n; ++i) {
    try {
      helpers_.emplace_back([this, g0] { Loop(g0); });
    } catch (const std::system_error&) {
      break;  // the system would start no more threads: a smaller pool, which threads() reports
    }
  }
}

namespace {

// The CPUs the process may run on when the addon loads (before any stage pins its thread).
int LoadBudget() { return std::max(1, static_cast<int>(AllowedCpus().size())); }
const int kBudget = LoadBudget();

// Threads computing now, process-wide: those inside a compute section (a stage's timed work,
// ComputeScope) and those inside a call worth splitting outside one; and of them, those
// splitting a call among helpers. A split call leaves each other computing thread a CPU and
// divides the rest evenly among the splitting ones, instead of running more threads than
// there are CPUs.
std::atomic<int> computing{0};
std::atomic<int> splitting{0};
thread_local bool scoped = false;

}  // namespace

void RowPool::Run(Fn fn, const void* ctx, int64_t rows, int64_t align, int64_t work) {
  const int n = threads();
  if (work < kMinWork || rows < 2 * align) {
    fn(ctx, 0, rows);
    return;
  }
  if (n == 1 || busy_.exchange(true, std::memory_order_acquire)) {
    if (!scoped) computing.fetch_add(1, std::memory_order_seq_cst);
    fn(ctx, 0, rows);
    if (!scoped) computing.fetch_sub(1, std::memory_order_seq_cst);
    return;
  }
  if (!scoped) computing.fetch_add(1, std::memory_order_seq_cst);
  const int split = splitting.fetch_add(1, std::memory_order_seq_cst) + 1;
  const int others = computing.load(std::memory_order_seq_cst) - split;
  const int use = std::min(n, std::max(1, (kBudget - others) / split));
  if (use < n) ++narrowed_;
  if (use == 1) {
    splitting.fetch_sub(1, std::memory_order_seq_cst);
    fn(ctx, 0, rows);
    if (!scoped) computing.fetch_sub(1, std::memory_order_seq_cst);
    busy_.store(false, std::memory_order_release);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  const int64_t units = (rows + align - 1) / align;
  int64_t c = 0;
  for (int64_t done = 0; done < units; ++c) {
    done += c == kMaxChunks - 1 ? units - done : (units - done + 2 * use - 1) / (2 * use);
    bounds_[c + 1] = std::min(rows, done * align);
  }
  chunks_ = c;
  next_.store(0, std::memory_order_relaxed);
  finished_.store(0, std::memory_order_relaxed);
  limit_.store(use - 1, std::memory_order_relaxed);
  const uint32_t g = gen_.load(std::memory_order_relaxed) + 1;
  call_.store(static_cast<uint64_t>(g) << 32, std::memory_order_release);
  // Sequentially consistent with the helper's sleepers_ increment: either this sees the
  // sleeper and wakes it, or the sleeper's predicate sees the new generation.
  gen_.store(g, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }
  Work();
  // Closed: a helper that had not joined by now (asleep, or descheduled) stays out, and this
  // waits only for those that did.
  const int joined = static_cast<int>(call_.fetch_or(kClosed, std::memory_order_acq_rel) & kJoined);
  while (finished_.load(std::memory_order_acquire) != joined) CpuRelax();
  splitting.fetch_sub(1, std::memory_order_seq_cst);
  if (!scoped) computing.fetch_sub(1, std::memory_order_seq_cst);
  busy_.store(false, std::memory_order_release);
}

void RowPool::Work() {
  for (;;) {
    const int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
    if (c >= chunks_) return;
    fn_(ctx_, bounds_[c], bounds_[c + 1]);
  }
}

bool RowPool::Join(uint32_t gen) {
  uint64_t t = call_.load(std::memory_order_acquire);
  while ((t >> 32) == gen && (t & kClosed) == 0 && static_cast<int>(t & kJoined) < limit_.load(std::memory_order_relaxed))
    if (call_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
  return false;
}

void RowPool::Loop(uint32_t seen) {
  bool idle = false;
  for (;;) {
    int spins = idle ? kSpins : 0;
    while (gen_.load(std::memory_order_acquire) == seen) {
      if (stop_.load(std::memory_order_acquire)) return;
      if (++spins < kSpins) {
        CpuRelax();
        continue;
      }
      // Asleep until the next call or the stop: an idle pool takes no CPU from anyone.
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return gen_.load(std::memory_order_seq_cst) != seen || stop_.load(std::memory_order_acquire); });
      }
      sleepers_.fetch_sub(1, std::memory_order_acq_rel);
      spins = 0;
    }
    seen = gen_.load(std::memory_order_acquire);
    // Join the call while it is open and wants more helpers. A call that divides the CPUs
    // with another stage wants fewer: the others sleep at once rather than spin on a CPU
    // another stage is computing on.
    idle = !Join(seen);
    if (idle) continue;
    Work();
    finished_.fetch_add(1, std::memory_order_acq_rel);
  }
}

RowPool& Pool() {
  static thread_local RowPool pool;
  return pool;
}

std::vector<std::vector<int>> RowPool::HelperCpus() {
  std::vector<std::vector<int>> out;
  for (auto& t : helpers_) out.push_back(ThreadCpus(t.native_handle()));
  return out;
}

std::vector<std::vector<int>> ComputeHelperCpus() { return Pool().HelperCpus(); }

void SetComputeThreads(int n) { Pool().Resize(std::max(1, std::min(n, RowPool::kMaxThreads))); }
int ComputeThreads() { return Pool().threads(); }
size_t ComputeNarrowed() { return Pool().narrowed(); }

void ComputeScope(bool on) {
  if (on == scoped) return;
  scoped = on;
  if (on)
    computing.fetch_add(1, std::memory_order_seq_cst);
  else
    computing.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace voxslab
