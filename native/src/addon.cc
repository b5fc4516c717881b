// The native addon's entry: each domain's bindings (bind_system.cc, bind_dsp.cc,
// bind_kernels.cc) on one exports object. Every argument is type-checked there
// (napi_args.h); the work itself lives in the files the bindings name.
#include "napi_args.h"

namespace {

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  voxslab::napi::BindSystem(env, exports);
  voxslab::napi::BindDsp(env, exports);
  voxslab::napi::BindAudio(env, exports);
  voxslab::napi::BindKernels(env, exports);
  return exports;
}

}  // namespace

NODE_API_MODULE(voxslab_native, Init)
