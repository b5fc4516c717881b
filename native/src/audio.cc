// Audio devices through PortAudio (Debian's libportaudio), driven from its own callback thread:
// the callback moves samples between the device and two single-producer single-consumer rings
// in SharedArrayBuffers (the microphone's channel 0 in, the reply out to every channel), with no
// JS and no allocation in the period path. It then asks the JS thread to run once (a
// thread-safe function, at most one call queued), where the session takes whole periods.
// Counters in the control words are sample counts modulo 2^32; ring lengths are powers of two.
#include "napi_args.h"

#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#ifdef VOXSLAB_PORTAUDIO
#include <portaudio.h>
#endif

namespace voxslab::napi {
namespace {

enum Word : int {
  kMicWrite = 0,   // samples the callback has written to the microphone ring
  kMicRead = 1,    // samples JS has taken from it
  kOutWrite = 2,   // samples JS has written to the output ring
  kOutRead = 3,    // samples the callback has taken from it
  kOverruns = 4,   // microphone samples dropped: the ring was full
  kUnderruns = 5,  // callbacks that found fewer output samples than the device asked for
  kCallbacks = 6,  // callbacks run
  kPending = 7,    // 1 while a call to JS is queued (JS clears it first thing)
  kStatus = 8,     // PortAudio's status flags, or'ed over the stream's life
  kFinished = 9,   // 1 once the stream has finished (stopped, or the device went away)
  kCallbackUs = 10,  // the last callback's monotonic time, microseconds modulo 2^32
  kFrames = 11,      // frames per callback, the last one
  kWords = 16,
};

// How far a device without a clock may run ahead of real time.
constexpr int kAheadMs = 100;

inline int32_t Load(int32_t* w, int i) { return __atomic_load_n(w + i, __ATOMIC_ACQUIRE); }
inline void Store(int32_t* w, int i, int32_t v) { __atomic_store_n(w + i, v, __ATOMIC_RELEASE); }
inline void Add(int32_t* w, int i, int32_t v) { __atomic_fetch_add(w + i, v, __ATOMIC_RELAXED); }

#ifdef VOXSLAB_PORTAUDIO

// Runs the JS wake function on its thread. Through the C calls, not Napi::Function::Call: an
// environment ending inside the call (a worker's process.exit in a period) leaves a termination
// pending, which must end the call quietly; any other exception is the process's uncaught one.
void CallWake(Napi::Env env, Napi::Function fn, void*, void*) {
  if (env == nullptr || fn.IsEmpty()) return;
  napi_value undefined;
  if (napi_get_undefined(env, &undefined) != napi_ok) return;
  if (napi_call_function(env, undefined, fn, 0, nullptr, nullptr) != napi_pending_exception) return;
  napi_value error;
  if (napi_get_and_clear_last_exception(env, &error) == napi_ok) napi_fatal_exception(env, error);
}

using WakeFn = Napi::TypedThreadSafeFunction<void, void, CallWake>;

struct Stream {
  PaStream* pa = nullptr;
  int32_t* control = nullptr;
  float* mic = nullptr;
  uint32_t micMask = 0;
  float* out = nullptr;
  uint32_t outMask = 0;
  napi_env env = nullptr;  // the environment that opened it
  int inChannels = 1;
  int outChannels = 1;
  double rate = 0;
  int64_t frames = 0;  // frames called back so far, and the first callback's time
  std::chrono::steady_clock::time_point start;
  WakeFn wake;
  // The SharedArrayBuffers stay alive while the stream may touch them.
  Napi::Reference<Napi::Value> keep[3];
};

std::mutex g_mutex;
bool g_initialized = false;
PaError g_initError = paNoError;
std::vector<std::unique_ptr<Stream>> g_streams;  // by handle; null once closed

uint32_t NowUs() {
  return static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

void Wake(Stream* s) {
  int32_t expected = 0;
  if (__atomic_compare_exchange_n(s->control + kPending, &expected, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    if (s->wake.NonBlockingCall() != napi_ok) Store(s->control, kPending, 0);
  }
}

int Callback(const void* input, void* output, unsigned long frames, const PaStreamCallbackTimeInfo*, PaStreamCallbackFlags flags, void* user) {
  Stream* s = static_cast<Stream*>(user);
  int32_t* c = s->control;
  const auto n = static_cast<uint32_t>(frames);
  // A device without a clock (a virtual one writing to a file) calls back as fast as it can:
  // it is held to real time, at most kAheadMs ahead of the wall clock, which a device with a
  // clock never gets to.
  const auto now = std::chrono::steady_clock::now();
  if (s->frames == 0) s->start = now;
  const auto due = s->start + std::chrono::microseconds(static_cast<int64_t>(1e6 * static_cast<double>(s->frames) / s->rate));
  if (due - now > std::chrono::milliseconds(kAheadMs)) std::this_thread::sleep_until(due - std::chrono::milliseconds(kAheadMs));
  s->frames += n;
  if (input != nullptr) {
    const float* in = static_cast<const float*>(input);
    uint32_t w = static_cast<uint32_t>(Load(c, kMicWrite));
    const uint32_t r = static_cast<uint32_t>(Load(c, kMicRead));
    uint32_t dropped = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (w - r > s->micMask) {
        dropped++;
        continue;
      }
      s->mic[w & s->micMask] = in[static_cast<size_t>(i) * s->inChannels];
      w++;
    }
    Store(c, kMicWrite, static_cast<int32_t>(w));
    if (dropped > 0) Add(c, kOverruns, static_cast<int32_t>(dropped));
  }
  if (flags != 0) __atomic_fetch_or(c + kStatus, static_cast<int32_t>(flags), __ATOMIC_RELAXED);
  Store(c, kCallbackUs, static_cast<int32_t>(NowUs()));
  Store(c, kFrames, static_cast<int32_t>(n));
  Add(c, kCallbacks, 1);
  Wake(s);
  if (output != nullptr) {
    float* out = static_cast<float*>(output);
    const uint32_t w = static_cast<uint32_t>(Load(c, kOutWrite));
    const uint32_t r = static_cast<uint32_t>(Load(c, kOutRead));
    const uint32_t have = w - r;
    const uint32_t take = have < n ? have : n;
    for (uint32_t i = 0; i < n; ++i) {
      const float v = i < take ? s->out[(r + i) & s->outMask] : 0.0f;
      for (int ch = 0; ch < s->outChannels; ++ch) out[static_cast<size_t>(i) * s->outChannels + ch] = v;
    }
    Store(c, kOutRead, static_cast<int32_t>(r + take));
    if (take < n) Add(c, kUnderruns, 1);
  }
  return paContinue;
}

void Finished(void* user) {
  Stream* s = static_cast<Stream*>(user);
  Store(s->control, kFinished, 1);
  Wake(s);
}

void Silent(const char*) {}

// PortAudio once per process: its device list is fixed from then on. JACK's client library,
// where PortAudio was built with it, prints a screen about a server that is not running while
// PortAudio scans: its message hooks are silenced for the scan (unless VOXSLAB_ALSA_LOG=1) and
// put back after, so an app's own JACK messages are as it set them.
PaError Initialize() {
  if (!g_initialized) {
    using Hook = void (*)(const char*);
    const char* log = std::getenv("VOXSLAB_ALSA_LOG");
    const bool quiet = log == nullptr || std::strcmp(log, "1") != 0;
    Hook* hooks[2] = {static_cast<Hook*>(dlsym(RTLD_DEFAULT, "jack_error_callback")), static_cast<Hook*>(dlsym(RTLD_DEFAULT, "jack_info_callback"))};
    Hook saved[2] = {nullptr, nullptr};
    for (int i = 0; i < 2; ++i) {
      if (hooks[i] == nullptr || !quiet) continue;
      saved[i] = *hooks[i];
      *hooks[i] = Silent;
    }
    g_initError = Pa_Initialize();
    for (int i = 0; i < 2; ++i)
      if (hooks[i] != nullptr && quiet) *hooks[i] = saved[i];
    g_initialized = true;
  }
  return g_initError;
}

[[noreturn]] void ThrowPa(Napi::Env env, const std::string& what, PaError e) {
  std::string text = Pa_GetErrorText(e);
  if (e == paUnanticipatedHostError) {
    const PaHostErrorInfo* h = Pa_GetLastHostErrorInfo();
    if (h != nullptr && h->errorText != nullptr && h->errorText[0] != 0) text += std::string(": ") + h->errorText;
  }
  throw Coded(Napi::Error::New(env, what + ": " + text), "ERR_VOXSLAB_DEVICE", 4);
}

Stream* StreamArg(const Napi::CallbackInfo& info, size_t i, const char* fn) {
  const int64_t h = CountArg(info, i, fn, "handle");
  if (h >= static_cast<int64_t>(g_streams.size()) || g_streams[h] == nullptr) ThrowRange(info.Env(), std::string(fn) + ": no such open stream");
  return g_streams[h].get();
}

// audioDevices(): every device PortAudio sees, with its host API and whether it is the default.
Napi::Value AudioDevices(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ExpectArgs(info, 0, "audioDevices");
  std::lock_guard<std::mutex> lock(g_mutex);
  if (PaError e = Initialize(); e != paNoError) ThrowPa(env, "PortAudio could not start", e);
  const int count = Pa_GetDeviceCount();
  if (count < 0) ThrowPa(env, "PortAudio could not list devices", count);
  const PaHostApiIndex api = Pa_GetDefaultHostApi();
  const PaHostApiInfo* apiInfo = api >= 0 ? Pa_GetHostApiInfo(api) : nullptr;
  Napi::Array out = Napi::Array::New(env, count);
  for (int i = 0; i < count; ++i) {
    const PaDeviceInfo* d = Pa_GetDeviceInfo(i);
    const PaHostApiInfo* h = Pa_GetHostApiInfo(d->hostApi);
    Napi::Object o = Napi::Object::New(env);
    auto num = [&](const char* k, double v) { o.Set(k, Napi::Number::New(env, v)); };
    num("id", i);
    o.Set("name", Napi::String::New(env, d->name));
    o.Set("hostApi", Napi::String::New(env, h != nullptr ? h->name : ""));
    num("inputs", d->maxInputChannels);
    num("outputs", d->maxOutputChannels);
    num("defaultRate", d->defaultSampleRate);
    num("inputLatency", d->defaultLowInputLatency);
    num("outputLatency", d->defaultLowOutputLatency);
    o.Set("defaultInput", Napi::Boolean::New(env, apiInfo != nullptr && apiInfo->defaultInputDevice == i));
    o.Set("defaultOutput", Napi::Boolean::New(env, apiInfo != nullptr && apiInfo->defaultOutputDevice == i));
    out.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

// A SharedArrayBuffer-backed typed array argument: the callback thread reads and writes it, and
// a SharedArrayBuffer cannot be detached under it.
template <typename T>
View<T> SharedArg(const Napi::CallbackInfo& info, size_t i, napi_typedarray_type want, const char* what) {
  View<T> v = TypedArg<T>(info, i, want, "audioOpen", what);
  Napi::Value buffer = info[i].As<Napi::Object>().Get("buffer");
  Napi::Value sab = info.Env().Global().Get("SharedArrayBuffer");
  if (!buffer.IsObject() || !sab.IsFunction() || !buffer.As<Napi::Object>().InstanceOf(sab.As<Napi::Function>())) {
    ThrowType(info.Env(), std::string("audioOpen: ") + what + " must be a view of a SharedArrayBuffer");
  }
  return v;
}

// audioOpen(inputId, outputId, rate, inChannels, outChannels, period, control, mic, out, onWake)
// → handle. Opens (does not start) a duplex stream of float32 samples; mic and out are rings of
// power-of-two lengths.
Napi::Value AudioOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ExpectArgs(info, 10, "audioOpen");
  const int64_t inId = CountArg(info, 0, "audioOpen", "inputId");
  const int64_t outId = CountArg(info, 1, "audioOpen", "outputId");
  const double rate = NumberArg(info, 2, "audioOpen", "rate");
  const int64_t inCh = CountArg(info, 3, "audioOpen", "inChannels");
  const int64_t outCh = CountArg(info, 4, "audioOpen", "outChannels");
  const int64_t period = CountArg(info, 5, "audioOpen", "period");
  View<int32_t> control = SharedArg<int32_t>(info, 6, napi_int32_array, "control");
  View<float> mic = SharedArg<float>(info, 7, napi_float32_array, "mic");
  View<float> out = SharedArg<float>(info, 8, napi_float32_array, "out");
  if (!info[9].IsFunction()) ThrowType(env, "audioOpen: onWake must be a function");
  if (!(rate >= 1000 && rate <= 768000)) ThrowRange(env, "audioOpen: rate must be 1000…768000 Hz");
  if (inCh < 1 || inCh > 64 || outCh < 1 || outCh > 64) ThrowRange(env, "audioOpen: channel counts must be 1…64");
  if (period < 1 || period > 1 << 16) ThrowRange(env, "audioOpen: period must be 1…65536 frames");
  if (control.length < kWords) ThrowRange(env, "audioOpen: control must hold 16 words");
  auto pow2 = [](size_t n) { return n >= 2 && n <= (size_t{1} << 30) && (n & (n - 1)) == 0; };
  if (!pow2(mic.length) || !pow2(out.length)) ThrowRange(env, "audioOpen: the rings' lengths must be powers of two");
  std::lock_guard<std::mutex> lock(g_mutex);
  if (PaError e = Initialize(); e != paNoError) ThrowPa(env, "PortAudio could not start", e);
  const int count = Pa_GetDeviceCount();
  if (inId >= count || outId >= count) ThrowRange(env, "audioOpen: no such device");
  auto s = std::make_unique<Stream>();
  s->control = control.data;
  s->mic = mic.data;
  s->micMask = static_cast<uint32_t>(mic.length - 1);
  s->out = out.data;
  s->outMask = static_cast<uint32_t>(out.length - 1);
  s->inChannels = static_cast<int>(inCh);
  s->outChannels = static_cast<int>(outCh);
  s->rate = rate;
  s->env = env;
  std::memset(control.data, 0, kWords * sizeof(int32_t));
  PaStreamParameters in{};
  in.device = static_cast<PaDeviceIndex>(inId);
  in.channelCount = static_cast<int>(inCh);
  in.sampleFormat = paFloat32;
  in.suggestedLatency = Pa_GetDeviceInfo(in.device)->defaultLowInputLatency;
  PaStreamParameters o{};
  o.device = static_cast<PaDeviceIndex>(outId);
  o.channelCount = static_cast<int>(outCh);
  o.sampleFormat = paFloat32;
  o.suggestedLatency = Pa_GetDeviceInfo(o.device)->defaultLowOutputLatency;
  PaError e = Pa_OpenStream(&s->pa, &in, &o, rate, static_cast<unsigned long>(period), paNoFlag, Callback, s.get());
  if (e != paNoError) ThrowPa(env, "the device could not open", e);
  Pa_SetStreamFinishedCallback(s->pa, Finished);
  s->wake = WakeFn::New(env, info[9].As<Napi::Function>(), "voxslab audio", 0, 1);
  for (int k = 0; k < 3; ++k) s->keep[k] = Napi::Persistent(info[6 + k]);
  g_streams.push_back(std::move(s));
  return Napi::Number::New(env, static_cast<double>(g_streams.size() - 1));
}

Napi::Value AudioStart(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "audioStart");
  std::lock_guard<std::mutex> lock(g_mutex);
  Stream* s = StreamArg(info, 0, "audioStart");
  if (PaError e = Pa_StartStream(s->pa); e != paNoError) ThrowPa(info.Env(), "the device could not start", e);
  return info.Env().Undefined();
}

// audioClose(handle): stops the stream (its callbacks done), closes it and lets the JS thread go.
Napi::Value AudioClose(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "audioClose");
  std::lock_guard<std::mutex> lock(g_mutex);
  Stream* s = StreamArg(info, 0, "audioClose");
  const int64_t h = CountArg(info, 0, "audioClose", "handle");
  PaError e = Pa_IsStreamStopped(s->pa) == 1 ? paNoError : Pa_StopStream(s->pa);
  const PaError closed = Pa_CloseStream(s->pa);
  s->wake.Release();
  g_streams[h].reset();
  if (e == paNoError) e = closed;
  if (e != paNoError) ThrowPa(info.Env(), "the device did not close cleanly", e);
  return info.Env().Undefined();
}

// At an environment's teardown (the process or its worker thread ending with a stream open):
// each stream it opened stops before the buffers its callback writes go away.
void CloseAllOf(napi_env__* env) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& s : g_streams) {
    if (s == nullptr || s->env != env) continue;
    Store(s->control, kFinished, 1);
    if (Pa_IsStreamStopped(s->pa) != 1) Pa_AbortStream(s->pa);
    Pa_CloseStream(s->pa);
    s->wake.Abort();
    s.reset();
  }
}

#else

Napi::Value Unavailable(const Napi::CallbackInfo& info) {
  throw Coded(Napi::Error::New(info.Env(), "this build of the addon has no PortAudio"), "ERR_VOXSLAB_DEVICE", 4);
}

#endif

Napi::Value AudioAvailable(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 0, "audioAvailable");
#ifdef VOXSLAB_PORTAUDIO
  return Napi::Boolean::New(info.Env(), true);
#else
  return Napi::Boolean::New(info.Env(), false);
#endif
}

}  // namespace

void BindAudio(Napi::Env env, Napi::Object exports) {
  Export<AudioAvailable>(env, exports, "audioAvailable");
#ifdef VOXSLAB_PORTAUDIO
  Export<AudioDevices>(env, exports, "audioDevices");
  Export<AudioOpen>(env, exports, "audioOpen");
  Export<AudioStart>(env, exports, "audioStart");
  Export<AudioClose>(env, exports, "audioClose");
  env.AddCleanupHook(CloseAllOf, static_cast<napi_env>(env));
#else
  for (const char* name : {"audioDevices", "audioOpen", "audioStart", "audioClose"}) Export<Unavailable>(env, exports, name);
#endif
  Napi::Object words = Napi::Object::New(env);
  const std::pair<const char*, int> names[] = {{"micWrite", kMicWrite}, {"micRead", kMicRead}, {"outWrite", kOutWrite}, {"outRead", kOutRead},
                                               {"overruns", kOverruns}, {"underruns", kUnderruns}, {"callbacks", kCallbacks}, {"pending", kPending},
                                               {"status", kStatus}, {"finished", kFinished}, {"callbackUs", kCallbackUs}, {"frames", kFrames},
                                               {"count", kWords}};
  for (const auto& [name, word] : names) words.Set(name, Napi::Number::New(env, word));
  exports.Set("audioWords", words);
}

}  // namespace voxslab::napi
