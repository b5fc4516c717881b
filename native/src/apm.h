// Echo cancellation, high-pass, noise suppression and voice activity from WebRTC's audio
// processing module (the engine PulseAudio's and PipeWire's echo-cancel modules run), when the
// addon was built against it. Plain C++ with no Node-API types.
#pragma once

#include <cstddef>
#include <cstdint>

namespace voxslab {

// The engine works on 10 ms frames of 16 kHz mono float PCM in [-1, 1].
constexpr int kApmRate = 16000;
constexpr int kApmFrame = 160;

struct ApmSettings {
  int echo;        // 0 off; 1..3 cancel the far end's echo with low, moderate, high suppression
  bool highPass;   // remove DC and rumble
  int noise;       // 0 off, 1..4 low, moderate, high, very high
  int voice;       // 0 off, 1..4 voice likelihood very low, low, moderate, high
  bool delayAgnostic;  // estimate the echo delay instead of using the reported one
};

// Bit flags of one processed frame.
constexpr int kApmVoice = 1;
constexpr int kApmEcho = 2;

// True when the addon was linked with the engine.
bool ApmAvailable();

// One engine instance: everything it needs is allocated by ApmCreate and a warm-up pass, so
// ApmProcess on later frames does not grow the heap. One thread at a time per instance.
struct Apm;
// nullptr when unavailable or when the engine refuses the settings; `heapBytes` receives what
// creating and warming it took from the C heap.
Apm* ApmCreate(const ApmSettings& settings, int64_t* heapBytes);
void ApmDestroy(Apm* apm);
// Processes one frame: `far` (may be null) is the signal played at the same device time as
// `near` was captured; `delayMs` the known delay between them beyond that alignment.
// Returns kApm* flags, or a negative engine error code.
int ApmProcess(Apm* apm, const float* near, const float* far, float* out, int delayMs);
// Sets the voice likelihood (1..4) of an engine made with voice detection, between frames; the
// engine keeps its state and allocates nothing. False when it has none or refuses the level.
bool ApmSetVoice(Apm* apm, int voice);

}  // namespace voxslab
