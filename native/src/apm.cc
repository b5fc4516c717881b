#include "apm.h"

#include <malloc.h>

#ifdef VOXSLAB_APM
#include <webrtc/modules/audio_processing/include/audio_processing.h>
#endif

namespace voxslab {

#ifdef VOXSLAB_APM

struct Apm {
  webrtc::AudioProcessing* engine;
  ApmSettings settings;
  webrtc::StreamConfig config{kApmRate, 1};
  float silence[kApmFrame] = {};
  float scratch[kApmFrame] = {};
};

bool ApmAvailable() { return true; }

namespace {

int64_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

bool Configure(Apm* a) {
  const ApmSettings& s = a->settings;
  webrtc::AudioProcessing* e = a->engine;
  if (e->echo_cancellation()->Enable(s.echo > 0) != 0) return false;
  if (s.echo > 0) {
    if (e->echo_cancellation()->set_suppression_level(static_cast<webrtc::EchoCancellation::SuppressionLevel>(s.echo - 1)) != 0) return false;
    if (e->echo_cancellation()->enable_drift_compensation(false) != 0) return false;
  }
  if (e->high_pass_filter()->Enable(s.highPass) != 0) return false;
  if (e->noise_suppression()->Enable(s.noise > 0) != 0) return false;
  if (s.noise > 0 && e->noise_suppression()->set_level(static_cast<webrtc::NoiseSuppression::Level>(s.noise - 1)) != 0) return false;
  if (e->voice_detection()->Enable(s.voice > 0) != 0) return false;
  if (s.voice > 0) {
    if (e->voice_detection()->set_likelihood(static_cast<webrtc::VoiceDetection::Likelihood>(s.voice - 1)) != 0) return false;
    if (e->voice_detection()->set_frame_size_ms(10) != 0) return false;
  }
  return true;
}

}  // namespace

Apm* ApmCreate(const ApmSettings& settings, int64_t* heapBytes) {
  const int64_t before = HeapInUse();
  webrtc::Config config;
  // The extended filter (128 ms) covers the room; the delay between the aligned far end and its
  // echo is the one the caller reports, or, when it cannot, the engine's own estimate.
  config.Set<webrtc::ExtendedFilter>(new webrtc::ExtendedFilter(true));
  config.Set<webrtc::DelayAgnostic>(new webrtc::DelayAgnostic(settings.delayAgnostic));
  Apm* a = new Apm();
  a->settings = settings;
  a->engine = webrtc::AudioProcessing::Create(config);
  if (a->engine == nullptr) {
    delete a;
    return nullptr;
  }
  const auto mono = webrtc::AudioProcessing::kMono;
  if (a->engine->Initialize(kApmRate, kApmRate, kApmRate, mono, mono, mono) != 0 || !Configure(a)) {
    ApmDestroy(a);
    return nullptr;
  }
  // Warm-up: the engine sizes its buffers on the first frames of each direction.
  for (int i = 0; i < 4; i++) ApmProcess(a, a->silence, settings.echo > 0 ? a->silence : nullptr, a->scratch, 0);
  a->engine->Initialize();
  if (!Configure(a)) {
    ApmDestroy(a);
    return nullptr;
  }
  for (int i = 0; i < 4; i++) ApmProcess(a, a->silence, settings.echo > 0 ? a->silence : nullptr, a->scratch, 0);
  if (heapBytes != nullptr) *heapBytes = HeapInUse() - before;
  return a;
}

void ApmDestroy(Apm* a) {
  if (a == nullptr) return;
  delete a->engine;
  delete a;
}

int ApmProcess(Apm* a, const float* near, const float* far, float* out, int delayMs) {
  webrtc::AudioProcessing* e = a->engine;
  if (a->settings.echo > 0) {
    const float* f = far != nullptr ? far : a->silence;
    const float* src[1] = {f};
    float* dst[1] = {a->scratch};
    const int r = e->ProcessReverseStream(src, a->config, a->config, dst);
    if (r != 0) return r;
    e->set_stream_delay_ms(delayMs);
  }
  const float* src[1] = {near};
  float* dst[1] = {out};
  const int r = e->ProcessStream(src, a->config, a->config, dst);
  if (r != 0) return r;
  int flags = 0;
  if (a->settings.voice > 0 && e->voice_detection()->stream_has_voice()) flags |= kApmVoice;
  if (a->settings.echo > 0 && e->echo_cancellation()->stream_has_echo()) flags |= kApmEcho;
  return flags;
}

bool ApmSetVoice(Apm* a, int voice) {
  if (a->settings.voice == 0 || voice < 1 || voice > 4) return false;
  if (a->engine->voice_detection()->set_likelihood(static_cast<webrtc::VoiceDetection::Likelihood>(voice - 1)) != 0) return false;
  a->settings.voice = voice;
  return true;
}

#else

struct Apm {};
bool ApmAvailable() { return false; }
Apm* ApmCreate(const ApmSettings&, int64_t* heapBytes) {
  if (heapBytes != nullptr) *heapBytes = 0;
  return nullptr;
}
void ApmDestroy(Apm*) {}
int ApmProcess(Apm*, const float*, const float*, float*, int) { return -1; }
bool ApmSetVoice(Apm*, int) { return false; }

#endif

}  // namespace voxslab
