#include "pool.h"

#include <algorithm>
#include <chrono>
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

void RowPool::Run(Fn fn, const void* ctx, int64_t rows, int64_t align, int64_t work) {
  const int n = threads();
  if (n == 1 || work < kMinWork || rows < 2 * align || busy_.exchange(true, std::memory_order_acquire)) {
    fn(ctx, 0, rows);
    return;
  }
  fn_ = fn;
  ctx_ = ctx;
  const int64_t units = (rows + align - 1) / align;
  int64_t c = 0;
  for (int64_t done = 0; done < units; ++c) {
    done += c == kMaxChunks - 1 ? units - done : (units - done + 2 * n - 1) / (2 * n);
    bounds_[c + 1] = std::min(rows, done * align);
  }
  chunks_ = c;
  next_.store(0, std::memory_order_relaxed);
  pending_.store(n - 1, std::memory_order_relaxed);
  gen_.fetch_add(1, std::memory_order_release);
  if (sleepers_.load(std::memory_order_acquire) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }
  Work();
  while (pending_.load(std::memory_order_acquire) != 0) CpuRelax();
  busy_.store(false, std::memory_order_release);
}

void RowPool::Work() {
  for (;;) {
    const int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
    if (c >= chunks_) return;
    fn_(ctx_, bounds_[c], bounds_[c + 1]);
  }
}

void RowPool::Loop(uint32_t seen) {
  for (;;) {
    int spins = 0;
    while (gen_.load(std::memory_order_acquire) == seen) {
      if (stop_.load(std::memory_order_acquire)) return;
      if (++spins < 1 << 14) {
        CpuRelax();
        continue;
      }
      sleepers_.fetch_add(1, std::memory_order_acq_rel);
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(1),
                     [&] { return gen_.load(std::memory_order_acquire) != seen || stop_.load(std::memory_order_acquire); });
      }
      sleepers_.fetch_sub(1, std::memory_order_acq_rel);
      spins = 0;
    }
    seen = gen_.load(std::memory_order_acquire);
    Work();
    pending_.fetch_sub(1, std::memory_order_acq_rel);
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

}  // namespace voxslab
