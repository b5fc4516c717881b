// Helper threads that split a kernel's output rows with the calling thread. Internal to the
// addon; plain C++.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace voxslab {

// Each row is computed exactly as on one thread, so results do not depend on the thread count.
// Every JS thread has its own pool (a pipeline stage's helpers are its own: two stages computing
// at once never share or resize one); a reentrant call that finds the pool busy runs alone.
class RowPool {
 public:
  using Fn = void (*)(const void* ctx, int64_t r0, int64_t r1);
  static constexpr int kMaxThreads = 8;

  ~RowPool() { Resize(1); }

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Split calls that used fewer threads than the pool has because other pools were computing.
  size_t narrowed() const { return narrowed_; }

  // The CPUs each helper may run on (Linux; empty lists elsewhere). Only the owning thread calls it.
  std::vector<std::vector<int>> HelperCpus();

  // Only the owning thread resizes; holding `busy_` meanwhile keeps a Run from starting on a
  // pool whose helpers are being replaced (such a Run computes alone).
  void Resize(int n);

  // fn(ctx, r0, r1) over [0, rows), in contiguous parts aligned to `align` rows, which the
  // calling thread and the helpers take in turn as each finishes one, so a thread slowed by the
  // machine or woken late leaves its share to the others. Each part is 1/(2n) of the rows left
  // for n threads: long first parts keep each thread's stream long, short last ones let the
  // threads end together. n is the pool's threads, at most the process's CPUs over the pools
  // computing at once. `work` is the call's multiply-adds, below kMinWork it runs on the
  // calling thread alone.
  void Run(Fn fn, const void* ctx, int64_t rows, int64_t align, int64_t work);

 private:
  static constexpr int64_t kMinWork = 1 << 16;  // multiply-adds below which a split costs more than it saves
  // Pauses a helper spins for the next call (a fraction of a millisecond: a step's layers
  // follow each other closer than that) before it sleeps.
  static constexpr int kSpins = 1 << 14;

  // Parts of one call at most (the last takes all that is left): more than a model's rows need.
  static constexpr int kMaxChunks = 128;
  void ResizeHeld(int n);
  void Loop(uint32_t seen);
  // Joins call `gen` if it is still open and wants another helper.
  bool Join(uint32_t gen);
  // Takes the current call's parts until none is left.
  void Work();

  std::vector<std::thread> helpers_;
  std::atomic<uint32_t> gen_{0};
  // The current call: its generation (high half), closed bit and helpers joined (low bits);
  // helpers it wants at most (written before the call is published), and those finished.
  static constexpr uint64_t kClosed = 1u << 31;
  static constexpr uint64_t kJoined = kClosed - 1;
  std::atomic<uint64_t> call_{0};
  std::atomic<int> limit_{0};
  std::atomic<int> finished_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> busy_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  Fn fn_ = nullptr;
  const void* ctx_ = nullptr;
  // The current call: its rows in `chunks_` parts, part c rows [bounds_[c], bounds_[c + 1]);
  // `next_` the next part to take.
  int64_t chunks_ = 0;
  int64_t bounds_[kMaxChunks + 1] = {};
  std::atomic<int64_t> next_{0};
  size_t narrowed_ = 0;  // only the owning thread runs calls
};

// The calling thread's pool.
RowPool& Pool();

}  // namespace voxslab
