{
  "variables": {
    "apm%": "<!(pkg-config --exists webrtc-audio-processing && echo 1 || echo 0)",
    "alsa%": "<!(pkg-config --exists alsa && echo 1 || echo 0)",
    "portaudio%": "<!(pkg-config --exists portaudio-2.0 && echo 1 || echo 0)"
  },
  "targets": [
    {
      "target_name": "voxslab_native",
      "sources": ["src/addon.cc", "src/audio.cc", "src/bind_dsp.cc", "src/bind_kernels.cc", "src/bind_system.cc", "src/apm.cc", "src/attention.cc", "src/cpu.cc", "src/dsp.cc", "src/gemm.cc", "src/gemm_int.cc", "src/gemv.cc", "src/gemv_scalar.cc", "src/ops.cc", "src/pool.cc", "src/probes.cc", "src/system.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions"],
      "cflags_cc": ["-std=c++17", "-O3", "-ffp-contract=off", "-Wall", "-Wextra", "-pthread"],
      "ldflags": ["-pthread"],
      "conditions": [
        ["target_arch=='x64' or target_arch=='ia32'", {
          "sources": ["src/gemv_avx2.cc", "src/gemv_avx512.cc"]
        }],
        ["target_arch=='arm64'", {
          "sources": ["src/gemv_neon.cc"],
          "cflags_cc": ["-march=armv8-a"]
        }],
        ["alsa==1", {
          "defines": ["VOXSLAB_ALSA"],
          "libraries": ["<!@(pkg-config --libs alsa)"]
        }],
        ["portaudio==1", {
          "defines": ["VOXSLAB_PORTAUDIO"],
          "libraries": ["<!@(pkg-config --libs portaudio-2.0)"]
        }],
        ["apm==1", {
          "defines": ["VOXSLAB_APM", "WEBRTC_AUDIO_PROCESSING_ONLY_BUILD", "WEBRTC_POSIX"],
          "include_dirs": ["<!@(pkg-config --variable=includedir webrtc-audio-processing)/webrtc_audio_processing"],
          "libraries": ["<!@(pkg-config --libs webrtc-audio-processing)"]
        }]
      ],
      "xcode_settings": {
        "GCC_ENABLE_CPP_EXCEPTIONS": "YES",
        "CLANG_CXX_LANGUAGE_STANDARD": "c++17"
      },
      "msvs_settings": {
        "VCCLCompilerTool": { "ExceptionHandling": 1 }
      }
    }
  ]
}
