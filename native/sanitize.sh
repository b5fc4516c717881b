#!/usr/bin/env bash
# Builds the addon with AddressSanitizer and UndefinedBehaviorSanitizer (native/build-sanitize/)
# and runs the native, kernel, DSP and model-block tests against it (VOXSLAB_ADDON points the
# facade at that build). Any sanitizer report fails the run.
#   native/sanitize.sh            the full set
#   native/sanitize.sh --short    the native and kernel tests only (what CI runs)
#   native/sanitize.sh --valgrind also the kernel tests under valgrind's memcheck (AVX2 path:
#                                 valgrind does not decode AVX-512), with the normal build
set -uo pipefail
cd "$(dirname "$0")/.."

short=0
grind=0
for a in "$@"; do
  case "$a" in
    --short) short=1 ;;
    --valgrind) grind=1 ;;
    *) echo "sanitize: unknown argument $a" >&2; exit 2 ;;
  esac
done

out=native/build-sanitize
mkdir -p "$out"
nodedir=${npm_config_nodedir:-/usr}
napi=$(node -p "require('node-addon-api').include_dir")
defines=(-DNAPI_VERSION=8 -DNAPI_CPP_EXCEPTIONS -DNODE_ADDON_API_DISABLE_DEPRECATED)
libs=()
if pkg-config --exists webrtc-audio-processing; then
  defines+=(-DVOXSLAB_APM $(pkg-config --cflags webrtc-audio-processing) "-I$(pkg-config --variable=includedir webrtc-audio-processing)/webrtc_audio_processing")
  libs+=($(pkg-config --libs webrtc-audio-processing))
fi
if pkg-config --exists alsa; then
  defines+=(-DVOXSLAB_ALSA)
  libs+=($(pkg-config --libs alsa))
fi
flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -ffp-contract=off -fPIC -pthread -Wall -Wextra
  -fsanitize=address,undefined -fno-sanitize-recover=undefined)

echo "sanitize: building $out/voxslab_native.node"
objs=()
pids=()
for src in native/src/*.cc; do
  obj="$out/$(basename "$src" .cc).o"
  objs+=("$obj")
  g++ "${flags[@]}" "${defines[@]}" -I"$nodedir/include/node" -I"$napi" -c "$src" -o "$obj" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { echo "sanitize: compile failed"; exit 1; }; done
g++ "${flags[@]}" -shared -o "$out/voxslab_native.node" "${objs[@]}" "${libs[@]}" || { echo "sanitize: link failed"; exit 1; }

# Tests that spawn espeak-ng are left out: the preloaded ASan runtime hangs it.
tests=(dist/test/native/native.test.js dist/test/model/kernels.test.js dist/test/model/conv.test.js dist/test/model/attention.test.js)
if [ "$short" -eq 0 ]; then
  tests+=(dist/test/dsp/signal.test.js dist/test/dsp/wav.test.js dist/test/model/isa.test.js
    dist/test/model/encoder.test.js dist/test/model/backbone.test.js dist/test/model/depthformer.test.js
    dist/test/model/detokenizer.test.js dist/test/model/checkpoint.test.js dist/test/pipeline/ring.test.js)
fi

status=0
log=$(mktemp)
for t in "${tests[@]}"; do
  # Node itself is not instrumented: the runtime comes first, leaks at exit are Node's. The
  # instrumented kernels run several times slower, so tap's per-file timeout is lifted.
  if LD_PRELOAD="$(g++ -print-file-name=libasan.so)" TAP_TIMEOUT=0 \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:halt_on_error=1:exitcode=86 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=87 \
    VOXSLAB_ADDON="$PWD/$out/voxslab_native.node" TAP=1 node "$t" >"$log" 2>&1 \
    && ! grep -qE "ERROR: AddressSanitizer|runtime error:" "$log" && ! grep -qE "^\s*not ok " "$log"; then
    echo "sanitize: ok   $t"
  else
    echo "sanitize: FAIL $t"
    grep -E -A20 "ERROR: AddressSanitizer|runtime error:|^\s*not ok " "$log" | head -60
    status=1
  fi
done

if [ "$grind" -eq 1 ]; then
  if ! command -v valgrind >/dev/null; then echo "sanitize: valgrind is not installed"; exit 1; fi
  if VOXSLAB_KERNELS=avx2 TAP=1 TAP_TIMEOUT=0 valgrind --error-exitcode=88 --undef-value-errors=no --trace-children=no \
    node dist/test/model/kernels.test.js >"$log" 2>&1 && ! grep -qE "^\s*not ok " "$log"; then
    echo "sanitize: ok   valgrind kernels"
  else
    echo "sanitize: FAIL valgrind kernels"
    grep -E -B2 -A20 "Invalid (read|write)|^\s*not ok " "$log" | head -60
    status=1
  fi
fi
rm -f "$log"
exit "$status"
