// Operating-system services: thread pinning, page residency, page locking, a monotonic clock.
// Plain C++ with no Node-API types so it can be unit-built and sanitized on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace voxslab {

// True where pinning and CPU queries are implemented (Linux).
// Milliseconds on a monotonic clock (any origin).
double MonotonicMs();
// CPU time the calling thread has used, in milliseconds; -1 where the OS has no such clock.
double ThreadCpuMs();

bool AffinitySupported();
// Pins the calling thread to the given CPUs; returns 0 or an errno value.
int PinCallingThread(const std::vector<int>& cpus);
// CPUs the calling thread may run on; empty when unsupported.
std::vector<int> AllowedCpus();
// The CPUs a thread of this process may run on (Linux; empty elsewhere or on failure).
std::vector<int> ThreadCpus(std::thread::native_handle_type thread);
// CPU the calling thread is running on now, or -1 when unknown.
int CurrentCpu();
// Number of CPUs the system has configured.
int ConfiguredCpus();

size_t PageSize();
// Bytes of [data, data + length) whose pages are resident; -errno on failure.
int64_t ResidentBytes(const uint8_t* data, size_t length);
// mlock/munlock every page that overlaps [data, data + length); 0 or errno.
int LockRange(const uint8_t* data, size_t length);
int UnlockRange(const uint8_t* data, size_t length);
// Asks for transparent huge pages on the whole pages inside [data, data + length) (Linux
// madvise MADV_HUGEPAGE, before the pages are touched); 0 or errno (ENOSYS elsewhere).
int AdviseHugePages(const uint8_t* data, size_t length);

// A mirrored mapping (Linux: one memfd mapped twice, back to back): [base, base + 2·bytes) reads
// and writes the same `bytes` of memory twice, so a window that runs past the end continues at
// the start. `bytes` must be a multiple of the page size. Null on failure (errno in *error) or
// where it is not implemented (ENOSYS).
void* MapMirror(size_t bytes, int* error);
void UnmapMirror(void* base, size_t bytes);

// The mirrored mappings handed to JavaScript, counted: a mapping lives while its owner holds it
// or any thread has a view of it, and the last reference unmaps it. Any thread; the registry's
// lock is never held while JavaScript runs.
// Maps `bytes` (MapMirror) with the owner's one reference; null on failure.
void* MirrorCreate(size_t bytes, int* error);
// One more reference (a view): the mapping's bytes, or 0 when there is none at `at`.
size_t MirrorAcquire(uintptr_t at);
// One reference back (the owner's release, a view's finalizer).
void MirrorDrop(uintptr_t at);

// The handler installed for signal `signo`: 0 the default, 1 ignored, else its address; -1 for a
// signal number the system refuses or where signal actions cannot be read.
double SignalHandler(int signo);

// Routes alsa-lib's error messages (about sound cards a machine does not have, printed to
// stderr while PortAudio scans) to a no-op; false when the addon was built without ALSA.
bool QuietAlsaErrors();

// Asks the C allocator (glibc) to serve blocks of `bytes` and more from their own mappings, which
// go back to the system when freed instead of staying in malloc's arenas; false where there is
// no such setting. A process-wide choice: the daemon makes it for itself, a library never does.
bool SetMallocMmapThreshold(int bytes);

// What the C allocator (glibc) holds from the system in its arenas, every thread's, outside the
// blocks it maps one by one: the native heap of the runtimes and libraries. -1 where unknown.
int64_t MallocArenaBytes();
// Bytes the C allocator has handed out and not had back (every arena, and its own mappings);
// -1 where unknown.
int64_t MallocInUseBytes();
// Gives the free memory in the C allocator's arenas back to the system (glibc malloc_trim), so
// resident memory shows what is in use; false where there is no such call.
bool MallocTrim();

}  // namespace voxslab
