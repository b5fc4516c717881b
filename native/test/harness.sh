#!/usr/bin/env bash
# The kernel harness (harness.cc) at every instruction-set level: natively for this machine's
# levels, and cross-built for AArch64 under qemu-aarch64 (-cpu max has NEON, dotprod and i8mm);
# the run-time detection on emulated CPUs without i8mm or dotprod; the digests that must agree
# across levels and architectures; planted errors in NEON kernels, which the harness must catch;
# and a cross build of the whole addon for aarch64 through binding.gyp. Needs g++,
# g++-aarch64-linux-gnu and qemu-user; ends with "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
native=$(pwd)
# Node's own headers for the cross build (no download).
if [ -z "${npm_config_nodedir:-}" ] && [ -f /usr/include/node/node.h ]; then export npm_config_nodedir=/usr; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0
fail=0
ok() { echo "ok - $1"; pass=$((pass + 1)); }
bad() { echo "not ok - $1"; fail=$((fail + 1)); }

kernels="cpu gemv gemv_scalar gemv_avx2 gemv_avx512 gemv_neon gemm gemm_int attention ops dsp probes pool system"
flags=(-std=c++17 -O2 -ffp-contract=off -Wall -Wextra -Werror -pthread)

# build COMPILER TREE OUTPUT [flags…]: the harness against TREE's kernel sources.
build() {
  local cxx=$1 tree=$2 exe=$3
  shift 3
  local srcs=()
  for k in $kernels; do srcs+=("$tree/src/$k.cc"); done
  "$cxx" "${flags[@]}" "$@" "$tree/test/harness.cc" "${srcs[@]}" -o "$exe"
}

# run NAME LEVEL COMMAND…: one run, its output kept as $work/NAME.out; passes when the harness
# passes on the level asked for (LEVEL empty: whatever the CPU offers).
run() {
  local name=$1 level=$2
  shift 2
  if [ -n "$level" ]; then
    VOXSLAB_KERNELS=$level "$@" >"$work/$name.out" 2>&1
  else
    env -u VOXSLAB_KERNELS "$@" >"$work/$name.out" 2>&1
  fi
  local code=$?
  grep -E '^not ok' "$work/$name.out" | sed "s/^/  $name: /"
  if [ "$code" -eq 0 ]; then
    ok "$name: $(head -n 1 "$work/$name.out"), $(tail -n 1 "$work/$name.out")"
  else
    bad "$name: exit $code, $(tail -n 1 "$work/$name.out")"
  fi
}

level_of() { sed -nE '1s/^level ([a-z0-9]+).*/\1/p' "$work/$1.out"; }
digest_of() { sed -nE "s/^$2: .*digest ([0-9a-f]+)$/\1/p" "$work/$1.out"; }

# same FAMILY RUN…: the family's outputs have one digest in every run named.
same() {
  local family=$1
  shift
  local first="" d all=""
  for r in "$@"; do
    [ -f "$work/$r.out" ] || continue
    d=$(digest_of "$r" "$family")
    all="$all $r=$d"
    [ -z "$first" ] && first=$d
    if [ -z "$d" ] || [ "$d" != "$first" ]; then
      bad "$family: one digest across$all"
      return
    fi
  done
  ok "$family: the same bits across$all"
}

x86_runs=()
case "$(uname -m)" in
  x86_64)
    if build g++ "$native" "$work/harness-x64"; then
      for level in scalar avx2 avx512; do
        run "x64-$level" "$level" "$work/harness-x64"
        if [ "$(level_of "x64-$level")" = "$level" ]; then x86_runs+=("x64-$level"); else echo "# x64-$level: this CPU stops below $level"; fi
      done
    else
      bad "the harness builds for x86-64"
    fi
    ;;
esac

cross=aarch64-linux-gnu-g++
qemu=qemu-aarch64
if [ "$(uname -m)" = aarch64 ]; then cross=g++ qemu=""; fi
if ! command -v "$cross" >/dev/null || { [ -n "$qemu" ] && ! command -v "$qemu" >/dev/null; }; then
  bad "the AArch64 toolchain and qemu-aarch64 are installed"
else
  # cpu MODEL: how the emulator is told to run one (nothing on an AArch64 host).
  cpu() { [ -n "$qemu" ] && echo "$qemu -cpu $1"; }
  if build "$cross" "$native" "$work/harness-arm64" -static; then
    ok "the harness builds for AArch64"
    for level in scalar neon dotprod i8mm; do run "arm64-$level" "$level" $(cpu max) "$work/harness-arm64"; done
    # Detection: the widest level each emulated CPU has.
    for pair in cortex-a53:neon neoverse-n1:dotprod max:i8mm; do
      model=${pair%%:*} want=${pair#*:}
      if [ -n "$qemu" ]; then
        run "arm64-$model" "" $(cpu "$model") "$work/harness-arm64"
        got=$(level_of "arm64-$model")
        if [ "$got" = "$want" ]; then ok "detection: $model runs $want"; else bad "detection: $model runs '$got', not $want"; fi
      fi
    done
    arm=(arm64-neon arm64-dotprod arm64-i8mm)
    vector=()
    for r in "${x86_runs[@]}"; do [ "$r" != x64-scalar ] && vector+=("$r"); done
    same "activation quantization" "${x86_runs[@]}" arm64-scalar "${arm[@]}"
    same "integer GEMV" x64-avx2 "${arm[@]}"
    same "integer GEMV" x64-scalar arm64-scalar
    same "integer GEMM" "${vector[@]}" "${arm[@]}"
    same "DSP dot product and probes" "${vector[@]}" "${arm[@]}"
    same "ISTFT spectrum" "${x86_runs[@]}" arm64-scalar "${arm[@]}"
    same "resampler" "${vector[@]}" "${arm[@]}"

    # Negative controls: one planted error per copy of the sources; the harness must fail.
    control() {
      local name=$1 file=$2 from=$3 to=$4 level=$5 family=$6
      local tree="$work/$name"
      mkdir -p "$tree" && cp -r "$native/src" "$native/test" "$tree/"
      if ! grep -qF -- "$from" "$tree/src/$file"; then
        bad "control $name: '$from' is no longer in $file"
        return
      fi
      python3 -c 'import sys; p, a, b = sys.argv[1:]; s = open(p).read(); open(p, "w").write(s.replace(a, b, 1))' "$tree/src/$file" "$from" "$to"
      if ! build "$cross" "$tree" "$tree/harness" -static; then
        bad "control $name: builds"
        return
      fi
      VOXSLAB_KERNELS=$level $(cpu max) "$tree/harness" >"$work/$name.out" 2>&1
      local code=$?
      if [ "$code" -eq 1 ] && grep -q "^not ok: $family" "$work/$name.out"; then
        ok "control $name: the harness fails ($(grep -m1 '^not ok' "$work/$name.out"))"
      else
        bad "control $name: a planted error went unseen (exit $code)"
      fi
    }
    control i8mm-operand gemv_neon_int.h "mm[3] = vusmmlaq_s32(mm[3], w23, x23);" "mm[3] = vusmmlaq_s32(mm[3], w23, x01);" \
      i8mm "integer GEMM"
    control neon-nan gemv_neon.cc "vmaxnmq_f32(m, vabsq_f32(" "vmaxq_f32(m, vabsq_f32(" neon "activation quantization"
    control dotprod-lanes gemv_neon_int.h \
      "hi = Dot4(Dot4(z, b.v[1], vld1q_s8(x + 16)), b.v[3], vld1q_s8(x + 48));" \
      "hi = Dot4(Dot4(z, b.v[3], vld1q_s8(x + 16)), b.v[1], vld1q_s8(x + 48));" dotprod "integer GEMV"
  else
    bad "the harness builds for AArch64"
  fi

  # The whole addon through binding.gyp for arm64: it compiles and links, and needs nothing at
  # load time but Node-API and the C and C++ runtimes.
  if [ -n "$qemu" ]; then
    addon="$work/addon"
    mkdir -p "$addon" && cp -r "$native/binding.gyp" "$native/src" "$addon/"
    gyp="$native/../node_modules/.bin/node-gyp"
    # PKG_CONFIG_LIBDIR: the host's ALSA and WebRTC libraries are not arm64's.
    if (cd "$addon" && NODE_PATH="$native/../node_modules" PKG_CONFIG_LIBDIR=/nonexistent CC=aarch64-linux-gnu-gcc CXX="$cross" \
      LINK="$cross" AR=aarch64-linux-gnu-ar "$gyp" rebuild --arch=arm64 -j max >"$work/addon.log" 2>&1); then
      lib="$addon/build/Release/voxslab_native.node"
      extra=$(aarch64-linux-gnu-nm -D --undefined-only "$lib" | awk '{print $NF}' |
        grep -vE '^(napi_|_ITM_|__gmon_start__)|@(GLIBC|GLIBCXX|CXXABI|GCC)_' || true)
      machine=$(aarch64-linux-gnu-readelf -h "$lib" | sed -nE 's/^ *Machine: *//p')
      if [ "$machine" = AArch64 ] && [ -z "$extra" ]; then
        ok "the addon cross-builds for arm64 and links"
      else
        bad "the arm64 addon: machine '$machine', unresolved: $extra"
      fi
    else
      tail -n 20 "$work/addon.log"
      bad "the addon cross-builds for arm64"
    fi
  fi
fi

echo "${pass} passed, ${fail} failed"
[ "$fail" -eq 0 ]
