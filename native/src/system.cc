#include <mutex>
#include <unordered_map>

#include "system.h"

#ifdef VOXSLAB_ALSA
#include <alsa/asoundlib.h>
#endif

#include <cerrno>
#include <chrono>
#include <ctime>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sys/syscall.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <csignal>
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace voxslab {

namespace {

uintptr_t PageFloor(uintptr_t p, size_t page) { return p - (p % page); }

}  // namespace

double MonotonicMs() {
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  return std::chrono::duration<double, std::milli>(now).count();
}

double ThreadCpuMs() {
#if defined(__linux__) || defined(__APPLE__)
  timespec t{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return -1;
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
#else
  return -1;
#endif
}

bool AffinitySupported() {
#if defined(__linux__)
  return true;
#else
  return false;
#endif
}

int PinCallingThread(const std::vector<int>& cpus) {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) return EINVAL;
    CPU_SET(cpu, &set);
  }
  int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  if (rc != 0) return rc;
  // Let the scheduler move us now, so CurrentCpu() reflects the new mask.
  sched_yield();
  return 0;
#else
  (void)cpus;
  return ENOSYS;
#endif
}

std::vector<int> ThreadCpus(std::thread::native_handle_type thread) {
  std::vector<int> out;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(thread, sizeof(set), &set) != 0) return out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  }
#else
  (void)thread;
#endif
  return out;
}

std::vector<int> AllowedCpus() {
#if defined(__linux__)
  return ThreadCpus(pthread_self());
#else
  return {};
#endif
}

int CurrentCpu() {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

int ConfiguredCpus() {
#if defined(_SC_NPROCESSORS_CONF)
  long n = sysconf(_SC_NPROCESSORS_CONF);
  return n > 0 ? static_cast<int>(n) : 1;
#else
  return 1;
#endif
}

size_t PageSize() {
#if defined(__unix__) || defined(__APPLE__)
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? static_cast<size_t>(p) : 4096;
#else
  return 4096;
#endif
}

int64_t ResidentBytes(const uint8_t* data, size_t length) {
  if (length == 0) return 0;
#if defined(__linux__) || defined(__APPLE__)
  const size_t page = PageSize();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t end = begin + length;
  const uintptr_t first = PageFloor(begin, page);
  const size_t pages = (end - first + page - 1) / page;
  // mincore writes one byte per page; query in fixed batches so no heap is needed.
  constexpr size_t kBatch = 4096;
#if defined(__APPLE__)
  char vec[kBatch];
#else
  unsigned char vec[kBatch];
#endif
  int64_t resident = 0;
  for (size_t done = 0; done < pages; done += kBatch) {
    const size_t n = pages - done < kBatch ? pages - done : kBatch;
    const uintptr_t at = first + done * page;
    if (mincore(reinterpret_cast<void*>(at), n * page, vec) != 0) return -errno;
    for (size_t i = 0; i < n; ++i) {
      if ((vec[i] & 1) == 0) continue;
      const uintptr_t lo = at + i * page;
      const uintptr_t hi = lo + page;
      const uintptr_t a = lo < begin ? begin : lo;
      const uintptr_t b = hi > end ? end : hi;
      resident += static_cast<int64_t>(b - a);
    }
  }
  return resident;
#else
  (void)data;
  return -ENOSYS;
#endif
}

void* MapMirror(size_t bytes, int* error) {
#if defined(__linux__)
  const size_t page = PageSize();
  if (bytes == 0 || bytes % page != 0) {
    *error = EINVAL;
    return nullptr;
  }
  const int fd = static_cast<int>(syscall(SYS_memfd_create, "voxslab-capture", 1u /* MFD_CLOEXEC */));
  if (fd < 0) {
    *error = errno;
    return nullptr;
  }
  void* base = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    // Reserve both halves first so the two mappings land back to back.
    base = mmap(nullptr, 2 * bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base != MAP_FAILED) {
      auto* at = static_cast<uint8_t*>(base);
      if (mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED ||
          mmap(at + bytes, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        const int e = errno;
        munmap(base, 2 * bytes);
        base = MAP_FAILED;
        errno = e;
      }
    }
  }
  const int e = errno;
  close(fd);
  if (base == MAP_FAILED) {
    *error = e;
    return nullptr;
  }
  return base;
#else
  (void)bytes;
  *error = ENOSYS;
  return nullptr;
#endif
}

void UnmapMirror(void* base, size_t bytes) {
#if defined(__linux__)
  if (base != nullptr) munmap(base, 2 * bytes);
#else
  (void)base;
  (void)bytes;
#endif
}

// ---- the registry of mirrored mappings ----

namespace {

struct MirrorMap {
  size_t bytes;
  int refs;
};

std::mutex& MirrorMutex() {
  static std::mutex mu;
  return mu;
}

std::unordered_map<uintptr_t, MirrorMap>& Mirrors() {
  static std::unordered_map<uintptr_t, MirrorMap> maps;
  return maps;
}

}  // namespace

void* MirrorCreate(size_t bytes, int* error) {
  void* base = MapMirror(bytes, error);
  if (base != nullptr) {
    std::lock_guard<std::mutex> lock(MirrorMutex());
    Mirrors()[reinterpret_cast<uintptr_t>(base)] = MirrorMap{bytes, 1};
  }
  return base;
}

size_t MirrorAcquire(uintptr_t at) {
  std::lock_guard<std::mutex> lock(MirrorMutex());
  auto it = Mirrors().find(at);
  if (it == Mirrors().end()) return 0;
  it->second.refs++;
  return it->second.bytes;
}

void MirrorDrop(uintptr_t at) {
  std::lock_guard<std::mutex> lock(MirrorMutex());
  auto it = Mirrors().find(at);
  if (it == Mirrors().end()) return;
  if (--it->second.refs == 0) {
    UnmapMirror(reinterpret_cast<void*>(at), it->second.bytes);
    Mirrors().erase(it);
  }
}

namespace {

// mlock or munlock every page that overlaps [data, data + length).
int PageRangeCall(const uint8_t* data, size_t length, bool lock) {
  if (length == 0) return 0;
#if defined(__unix__) || defined(__APPLE__)
  const size_t page = PageSize();
  const uintptr_t first = PageFloor(reinterpret_cast<uintptr_t>(data), page);
  const uintptr_t end = reinterpret_cast<uintptr_t>(data) + length;
  void* at = reinterpret_cast<void*>(first);
  return (lock ? mlock(at, end - first) : munlock(at, end - first)) == 0 ? 0 : errno;
#else
  (void)data;
  (void)lock;
  return ENOSYS;
#endif
}

}  // namespace

int LockRange(const uint8_t* data, size_t length) { return PageRangeCall(data, length, true); }
int UnlockRange(const uint8_t* data, size_t length) { return PageRangeCall(data, length, false); }

int AdviseHugePages(const uint8_t* data, size_t length) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const size_t page = PageSize();
  const uintptr_t first = PageFloor(reinterpret_cast<uintptr_t>(data) + page - 1, page);
  const uintptr_t end = PageFloor(reinterpret_cast<uintptr_t>(data) + length, page);
  if (end <= first) return 0;
  return madvise(reinterpret_cast<void*>(first), end - first, MADV_HUGEPAGE) == 0 ? 0 : errno;
#else
  (void)data;
  (void)length;
  return ENOSYS;
#endif
}

namespace {
#ifdef VOXSLAB_ALSA
int g_alsa_quieted = 0;
extern "C" void QuietAlsa(const char*, int, const char*, int, const char*, ...) { g_alsa_quieted++; }
#endif
}  // namespace

int64_t MallocArenaBytes() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  // mallinfo2 sums every arena; `arena` is what they took from the system (brk and arena maps).
  return static_cast<int64_t>(mallinfo2().arena);
#else
  return -1;
#endif
}

int64_t MallocInUseBytes() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
#else
  return -1;
#endif
}

double SignalHandler(int signo) {
#if defined(__unix__) || defined(__APPLE__)
  struct sigaction action {};
  if (sigaction(signo, nullptr, &action) != 0) return -1;
  const bool info = (action.sa_flags & SA_SIGINFO) != 0;
  if (!info && action.sa_handler == SIG_DFL) return 0;
  if (!info && action.sa_handler == SIG_IGN) return 1;
  const uintptr_t at = info ? reinterpret_cast<uintptr_t>(action.sa_sigaction) : reinterpret_cast<uintptr_t>(action.sa_handler);
  return static_cast<double>(at);
#else
  (void)signo;
  return -1;
#endif
}

bool MallocTrim() {
#ifdef __GLIBC__
  malloc_trim(0);
  return true;
#else
  return false;
#endif
}

bool SetMallocMmapThreshold(int bytes) {
#ifdef __GLIBC__
  return bytes > 0 && mallopt(M_MMAP_THRESHOLD, bytes) == 1;
#else
  (void)bytes;
  return false;
#endif
}

bool QuietAlsaErrors() {
#ifdef VOXSLAB_ALSA
  return snd_lib_error_set_handler(reinterpret_cast<snd_lib_error_handler_t>(&QuietAlsa)) == 0;
#else
  return false;
#endif
}

}  // namespace voxslab
