// Bindings of the signal processing (dsp.h: resampling, FFTs) and of WebRTC's audio processing
// (apm.h): each engine is an External handle the finalizer frees, apmDestroy at once.
#include "napi_args.h"

#include "apm.h"
#include "dsp.h"

namespace voxslab::napi {
namespace {

// resampleRun(phases, ring, state, input | null, count, out, outAt, limit) → outputs written
Napi::Value ResampleRunValue(const Napi::CallbackInfo& info) {
  const char* fn = "resampleRun";
  ExpectArgs(info, 8, fn);
  auto phases = TypedArg<double>(info, 0, napi_float64_array, fn, "phases");
  auto ring = TypedArg<double>(info, 1, napi_float64_array, fn, "ring");
  auto state = TypedArg<double>(info, 2, napi_float64_array, fn, "state");
  if (state.length < voxslab::kRsSlots) ThrowRange(info.Env(), "resampleRun: state needs 8 slots");
  const double L = state.data[voxslab::kRsUp], M = state.data[voxslab::kRsDown], T = state.data[voxslab::kRsTaps];
  if (!(L >= 1 && M >= 1 && T >= 1) || L * T > static_cast<double>(phases.length) || 2 * T > static_cast<double>(ring.length) ||
      !(state.data[voxslab::kRsPos] >= 0 && state.data[voxslab::kRsPos] < T)) {
    ThrowRange(info.Env(), "resampleRun: state does not match the phase table and ring");
  }
  const bool finishing = info[3].IsNull();
  View<float> input{nullptr, 0};
  if (!finishing) input = TypedArg<float>(info, 3, napi_float32_array, fn, "input");
  const int64_t count = CountArg(info, 4, fn, "count");
  auto out = TypedArg<float>(info, 5, napi_float32_array, fn, "out");
  const int64_t at = CountArg(info, 6, fn, "outAt");
  const int64_t limit = finishing ? CountArg(info, 7, fn, "limit") : 0;
  if (!finishing && static_cast<size_t>(count) > input.length) ThrowRange(info.Env(), "resampleRun: count exceeds the input");
  const int64_t outputs = static_cast<int64_t>(state.data[voxslab::kRsOutputs]);
  const int64_t need = finishing ? (limit > outputs ? limit - outputs : 0) : voxslab::ResampleReady(state.data, count);
  if (static_cast<size_t>(at) > out.length || static_cast<size_t>(need) > out.length - static_cast<size_t>(at)) {
    ThrowRange(info.Env(), "resampleRun: out has room for " + std::to_string(out.length - std::min(out.length, static_cast<size_t>(at))) +
                               " samples after outAt, the call completes " + std::to_string(need));
  }
  if (Overlap(out, phases) || Overlap(out, ring) || Overlap(out, state) || Overlap(ring, phases) || Overlap(ring, state)) {
    ThrowRange(info.Env(), "resampleRun: buffers must not overlap");
  }
  const int64_t n = voxslab::ResampleRun(phases.data, ring.data, state.data, finishing ? nullptr : input.data, count,
                                          out.data + at, limit);
  return Napi::Number::New(info.Env(), static_cast<double>(n));
}

// A complex FFT's factor plan [p0, m0, p1, m1, ...] must multiply out to `points` and its
// largest radix must fit the scratch (2 values per point of a radix).
void CheckFactorPlan(const Napi::CallbackInfo& info, const char* fn, const View<int32_t>& factors, int64_t points,
                     const char* what, const View<double>& scratch) {
  const std::string prefix = std::string(fn) + ": factor plan ";
  int64_t rest = points;
  size_t i = 0;
  int32_t maxP = 2;
  while (rest > 1) {
    if (i + 1 >= factors.length) ThrowRange(info.Env(), prefix + "is incomplete");
    const int32_t p = factors.data[i];
    const int32_t m = factors.data[i + 1];
    if (p < 2 || rest % p != 0 || rest / p != m) ThrowRange(info.Env(), prefix + "does not match " + what);
    maxP = std::max(maxP, p);
    rest = m;
    i += 2;
  }
  if (points == 1 && (factors.length < 2 || factors.data[0] != 1 || factors.data[1] != 1)) {
    ThrowRange(info.Env(), prefix + "does not match " + what);
  }
  if (scratch.length < Mul(info, fn, {2, maxP})) ThrowRange(info.Env(), std::string(fn) + ": scratch is too small for the largest radix");
}

// A boolean argument.

// fft(factors, twiddles, scratch, input, output, n, inverse)
Napi::Value FftValue(const Napi::CallbackInfo& info) {
  const char* fn = "fft";
  ExpectArgs(info, 7, fn);
  auto factors = TypedArg<int32_t>(info, 0, napi_int32_array, fn, "factors");
  auto tw = TypedArg<double>(info, 1, napi_float64_array, fn, "twiddles");
  auto scratch = TypedArg<double>(info, 2, napi_float64_array, fn, "scratch");
  auto in = TypedArg<double>(info, 3, napi_float64_array, fn, "input");
  auto out = TypedArg<double>(info, 4, napi_float64_array, fn, "output");
  const int64_t n = CountArg(info, 5, fn, "n");
  const bool inverse = BoolArg(info, 6, fn, "inverse");
  if (n < 1 || n > (1 << 24)) ThrowRange(info.Env(), "fft: n must be from 1 to 2^24");
  const size_t len = Mul(info, fn, {2, n});
  if (tw.length < len || in.length < len || out.length < len) ThrowRange(info.Env(), "fft: twiddles, input and output need 2·n values");
  CheckFactorPlan(info, fn, factors, n, "n", scratch);
  if (Overlap(in, out) || Overlap(scratch, out) || Overlap(scratch, in)) ThrowRange(info.Env(), "fft: input, output and scratch must not overlap");
  voxslab::FftRun(factors.data, tw.data, scratch.data, in.data, out.data, static_cast<int>(n), inverse);
  return info.Env().Undefined();
}

// rfft(factors, twiddles, scratch, split, work, input, output, n, inverse): plan, twiddles and
// scratch are for the n/2-point complex FFT.
Napi::Value RfftValue(const Napi::CallbackInfo& info) {
  const char* fn = "rfft";
  ExpectArgs(info, 9, fn);
  auto factors = TypedArg<int32_t>(info, 0, napi_int32_array, fn, "factors");
  auto tw = TypedArg<double>(info, 1, napi_float64_array, fn, "twiddles");
  auto scratch = TypedArg<double>(info, 2, napi_float64_array, fn, "scratch");
  auto split = TypedArg<double>(info, 3, napi_float64_array, fn, "split");
  auto work = TypedArg<double>(info, 4, napi_float64_array, fn, "work");
  auto in = TypedArg<double>(info, 5, napi_float64_array, fn, "input");
  auto out = TypedArg<double>(info, 6, napi_float64_array, fn, "output");
  const int64_t n = CountArg(info, 7, fn, "n");
  const bool inverse = BoolArg(info, 8, fn, "inverse");
  if (n < 2 || n % 2 != 0 || n > (1 << 24)) ThrowRange(info.Env(), "rfft: n must be even, from 2 to 2^24");
  const int64_t h = n / 2;
  const size_t bins2 = Mul(info, fn, {2, (h + 1)});
  if (tw.length < Mul(info, fn, {2, h}) || split.length < bins2 || work.length < Mul(info, fn, {2, n})) {
    ThrowRange(info.Env(), "rfft: twiddles need n values, split n + 2, work 2·n");
  }
  const size_t inNeed = inverse ? bins2 : static_cast<size_t>(n);
  const size_t outNeed = inverse ? static_cast<size_t>(n) : bins2;
  if (in.length < inNeed || out.length < outNeed) ThrowRange(info.Env(), "rfft: input or output is too short");
  CheckFactorPlan(info, fn, factors, h, "n/2", scratch);
  if (Overlap(in, out) || Overlap(work, in) || Overlap(work, out) || Overlap(scratch, work)) ThrowRange(info.Env(), "rfft: buffers must not overlap");
  if (inverse) {
    voxslab::RfftInverse(factors.data, tw.data, scratch.data, split.data, work.data, in.data, out.data, static_cast<int>(n));
  } else {
    voxslab::RfftForward(factors.data, tw.data, scratch.data, split.data, work.data, in.data, out.data, static_cast<int>(n));
  }
  return info.Env().Undefined();
}

// polarSpectrum(values, at, bins, spectrum): values[at…at+bins) log-magnitudes and
// values[at+bins…at+2·bins) phases → spectrum[2·bins] (re, im).
Napi::Value PolarSpectrumValue(const Napi::CallbackInfo& info) {
  const char* fn = "polarSpectrum";
  ExpectArgs(info, 4, fn);
  auto values = TypedArg<float>(info, 0, napi_float32_array, fn, "values");
  const int64_t at = CountArg(info, 1, fn, "at");
  const int64_t bins = CountArg(info, 2, fn, "bins");
  auto spectrum = TypedArg<double>(info, 3, napi_float64_array, fn, "spectrum");
  if (bins > (1 << 24)) ThrowRange(info.Env(), "polarSpectrum: bins must be at most 2^24");
  if (static_cast<size_t>(at) > values.length || values.length - static_cast<size_t>(at) < static_cast<size_t>(2 * bins)) {
    ThrowRange(info.Env(), "polarSpectrum: values need 2·bins values after at");
  }
  if (spectrum.length < static_cast<size_t>(2 * bins)) ThrowRange(info.Env(), "polarSpectrum: spectrum needs 2·bins values");
  voxslab::PolarSpectrum(values.data + at, bins, spectrum.data);
  return info.Env().Undefined();
}

// The rings of the ISTFT's overlap-add: a power of two long, both the same length.
int64_t RingMask(const Napi::CallbackInfo& info, const char* fn, const View<double>& acc, const View<double>& envelope) {
  if (acc.length < 2 || (acc.length & (acc.length - 1)) != 0 || envelope.length != acc.length) {
    ThrowRange(info.Env(), std::string(fn) + ": acc and envelope must be rings of the same power-of-two length");
  }
  if (Overlap(acc, envelope)) ThrowRange(info.Env(), std::string(fn) + ": buffers must not overlap");
  return static_cast<int64_t>(acc.length) - 1;
}

// overlapAdd(frame, window, acc, envelope, start, from): frame[j]·window[j] and window[j]² into
// the rings at (start + j) for j from `from` to the frame's length.
Napi::Value OverlapAddValue(const Napi::CallbackInfo& info) {
  const char* fn = "overlapAdd";
  ExpectArgs(info, 6, fn);
  auto frame = TypedArg<double>(info, 0, napi_float64_array, fn, "frame");
  auto window = TypedArg<double>(info, 1, napi_float64_array, fn, "window");
  auto acc = TypedArg<double>(info, 2, napi_float64_array, fn, "acc");
  auto envelope = TypedArg<double>(info, 3, napi_float64_array, fn, "envelope");
  const int64_t start = CountArg(info, 4, fn, "start");
  const int64_t from = CountArg(info, 5, fn, "from");
  const int64_t mask = RingMask(info, fn, acc, envelope);
  if (window.length != frame.length || static_cast<int64_t>(frame.length) > mask + 1) {
    ThrowRange(info.Env(), "overlapAdd: the window must be the frame's length, and the rings at least that long");
  }
  if (Overlap(frame, acc) || Overlap(frame, envelope) || Overlap(window, acc) || Overlap(window, envelope)) {
    ThrowRange(info.Env(), "overlapAdd: buffers must not overlap");
  }
  voxslab::OverlapAdd(frame.data, window.data, acc.data, envelope.data, static_cast<int64_t>(frame.length), start, from, mask);
  return info.Env().Undefined();
}

// overlapEmit(acc, envelope, from, to, floor, out, outAt) → samples written (to − from).
Napi::Value OverlapEmitValue(const Napi::CallbackInfo& info) {
  const char* fn = "overlapEmit";
  ExpectArgs(info, 7, fn);
  auto acc = TypedArg<double>(info, 0, napi_float64_array, fn, "acc");
  auto envelope = TypedArg<double>(info, 1, napi_float64_array, fn, "envelope");
  const int64_t from = CountArg(info, 2, fn, "from");
  const int64_t to = CountArg(info, 3, fn, "to");
  const double floor = NumberArg(info, 4, fn, "floor");
  auto out = TypedArg<float>(info, 5, napi_float32_array, fn, "out");
  const int64_t at = CountArg(info, 6, fn, "outAt");
  const int64_t mask = RingMask(info, fn, acc, envelope);
  const int64_t n = to > from ? to - from : 0;
  if (n > mask + 1) ThrowRange(info.Env(), "overlapEmit: more samples than the rings hold");
  if (static_cast<size_t>(at) > out.length || out.length - static_cast<size_t>(at) < static_cast<size_t>(n)) {
    ThrowRange(info.Env(), "overlapEmit: out has no room for " + std::to_string(n) + " samples after outAt");
  }
  voxslab::OverlapEmit(acc.data, envelope.data, from, from + n, mask, floor, out.data + at);
  return Napi::Number::New(info.Env(), static_cast<double>(n));
}

// Echo cancellation and voice activity (apm.h). A handle is an External that owns one engine;
// the finalizer frees it when the handle is collected, apmDestroy at once.
struct ApmHandle {
  voxslab::Apm* apm;
};

// firstNonFinite(bytes: Uint8Array, type 0 f32 | 1 f16 | 2 bf16) -> index or -1
Napi::Value FirstNonFiniteValue(const Napi::CallbackInfo& info) {
  const char* fn = "firstNonFinite";
  ExpectArgs(info, 2, fn);
  Bytes b = TypedArrayBytes(info, 0, fn);
  const auto type = EnumArg(info, 1, fn, "type", voxslab::WeightType::kBF16, "0 (f32), 1 (f16) or 2 (bf16)");
  const int64_t r = voxslab::FirstNonFinite(b.data, static_cast<int64_t>(b.length) / voxslab::ElemBytes(type), type);
  return Napi::Number::New(info.Env(), static_cast<double>(r));
}

// apmCreate(echo 0 (off)..3 suppression, highPass 0|1, noise 0..4, voice 0..4, delayAgnostic 0|1) -> { handle, heapBytes }
Napi::Value ApmCreateValue(const Napi::CallbackInfo& info) {
  const char* fn = "apmCreate";
  ExpectArgs(info, 5, fn);
  const int64_t echo = CountArg(info, 0, fn, "echo");
  const int64_t agnostic = CountArg(info, 4, fn, "delayAgnostic");
  const int64_t high = CountArg(info, 1, fn, "highPass");
  const int64_t noise = CountArg(info, 2, fn, "noise");
  const int64_t voice = CountArg(info, 3, fn, "voice");
  if (echo > 3) ThrowRange(info.Env(), "apmCreate: echo must be 0 (off) to 3");
  if (high > 1 || agnostic > 1) ThrowRange(info.Env(), "apmCreate: highPass and delayAgnostic must be 0 or 1");
  if (noise > 4 || voice > 4) ThrowRange(info.Env(), "apmCreate: noise and voice must be 0 (off) to 4");
  if (!voxslab::ApmAvailable()) throw Napi::Error::New(info.Env(), "apmCreate: the addon was built without WebRTC audio processing");
  voxslab::ApmSettings s{static_cast<int>(echo), high == 1, static_cast<int>(noise), static_cast<int>(voice), agnostic == 1};
  int64_t heap = 0;
  voxslab::Apm* apm = voxslab::ApmCreate(s, &heap);
  if (apm == nullptr) throw Napi::Error::New(info.Env(), "apmCreate: the audio processing engine refused its settings");
  auto handle = Napi::External<ApmHandle>::New(info.Env(), new ApmHandle{apm}, [](Napi::Env, ApmHandle* h) {
    voxslab::ApmDestroy(h->apm);
    delete h;
  });
  Napi::Object out = Napi::Object::New(info.Env());
  out.Set("handle", handle);
  out.Set("heapBytes", Napi::Number::New(info.Env(), static_cast<double>(heap)));
  return out;
}

ApmHandle* ApmArg(const Napi::CallbackInfo& info, const char* fn) {
  if (!info[0].IsExternal()) ThrowType(info.Env(), std::string(fn) + ": argument 1 must be a handle from apmCreate");
  return info[0].As<Napi::External<ApmHandle>>().Data();
}

Napi::Value ApmDestroyValue(const Napi::CallbackInfo& info) {
  ExpectArgs(info, 1, "apmDestroy");
  ApmHandle* h = ApmArg(info, "apmDestroy");
  voxslab::ApmDestroy(h->apm);
  h->apm = nullptr;
  return info.Env().Undefined();
}

// apmProcess(handle, near, nearAt, far | null, farAt, out, outAt, delayMs) -> flags
// One 10 ms frame at 16 kHz. Flags: 1 voice, 2 echo present.
Napi::Value ApmProcessValue(const Napi::CallbackInfo& info) {
  const char* fn = "apmProcess";
  ExpectArgs(info, 8, fn);
  ApmHandle* h = ApmArg(info, fn);
  if (h->apm == nullptr) throw Napi::Error::New(info.Env(), "apmProcess: the engine was destroyed");
  const int64_t na = CountArg(info, 2, fn, "nearAt");
  const int64_t fa = CountArg(info, 4, fn, "farAt");
  const int64_t oa = CountArg(info, 6, fn, "outAt");
  const int64_t delay = CountArg(info, 7, fn, "delayMs");
  if (na > (int64_t{1} << 40) || fa > (int64_t{1} << 40) || oa > (int64_t{1} << 40)) ThrowRange(info.Env(), "apmProcess: offsets must be below 2^40");
  if (delay > 500) ThrowRange(info.Env(), "apmProcess: delayMs must be at most 500");
  auto near = F32Arg(info, 1, fn, "near", static_cast<size_t>(na + voxslab::kApmFrame));
  const float* far = nullptr;
  if (!info[3].IsNull()) far = F32Arg(info, 3, fn, "far", static_cast<size_t>(fa + voxslab::kApmFrame)).data + fa;
  auto out = F32Arg(info, 5, fn, "out", static_cast<size_t>(oa + voxslab::kApmFrame));
  const int r = voxslab::ApmProcess(h->apm, near.data + na, far, out.data + oa, static_cast<int>(delay));
  return Napi::Number::New(info.Env(), r);
}

// apmSetVoice(handle, voice 1..4): the voice likelihood of an engine made with voice detection.
Napi::Value ApmSetVoiceValue(const Napi::CallbackInfo& info) {
  const char* fn = "apmSetVoice";
  ExpectArgs(info, 2, fn);
  ApmHandle* h = ApmArg(info, fn);
  if (h->apm == nullptr) throw Napi::Error::New(info.Env(), "apmSetVoice: the engine was destroyed");
  const int64_t voice = CountArg(info, 1, fn, "voice");
  if (voice < 1 || voice > 4) ThrowRange(info.Env(), "apmSetVoice: voice must be 1 (very low) to 4 (high)");
  if (!voxslab::ApmSetVoice(h->apm, static_cast<int>(voice))) throw Napi::Error::New(info.Env(), "apmSetVoice: the engine has no voice detection");
  return info.Env().Undefined();
}

}  // namespace

void BindDsp(Napi::Env env, Napi::Object exports) {
  Export<ResampleRunValue>(env, exports, "resampleRun");
  Export<FftValue>(env, exports, "fft");
  Export<RfftValue>(env, exports, "rfft");
  Export<PolarSpectrumValue>(env, exports, "polarSpectrum");
  Export<OverlapAddValue>(env, exports, "overlapAdd");
  Export<OverlapEmitValue>(env, exports, "overlapEmit");
  Export<FirstNonFiniteValue>(env, exports, "firstNonFinite");
  Export<NoArgs<voxslab::ApmAvailable>>(env, exports, "apmAvailable");
  Export<ApmCreateValue>(env, exports, "apmCreate");
  Export<ApmDestroyValue>(env, exports, "apmDestroy");
  Export<ApmProcessValue>(env, exports, "apmProcess");
  Export<ApmSetVoiceValue>(env, exports, "apmSetVoice");
  Napi::Object slots = Napi::Object::New(env);
  const std::pair<const char*, int> names[] = {{"pos", voxslab::kRsPos},   {"inputs", voxslab::kRsInputs}, {"outputs", voxslab::kRsOutputs},
                                               {"up", voxslab::kRsUp},     {"down", voxslab::kRsDown},     {"taps", voxslab::kRsTaps},
                                               {"center", voxslab::kRsCenter}, {"slots", voxslab::kRsSlots}};
  for (const auto& [name, slot] : names) slots.Set(name, Napi::Number::New(env, slot));
  exports.Set("resamplerSlots", slots);
}

}  // namespace voxslab::napi
