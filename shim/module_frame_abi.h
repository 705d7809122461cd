// The packed form of one torch.nn.Module frame, between the Python hooks (python/inject/_trainscope_module_frames.py)
// and the library (shim/module_frames.cc, then the engine: shim/engine/job_thread/engine_module_frames.h).
//
// The hooks make one call per module forward, through ctypes, with everything packed into two flat buffers so that a
// frame costs one foreign call whatever its rows:
//   words (int64 each): [0] kModuleFrameVersion, [1] flags (kModuleFrameRoot), [2] the number of rows, then per row
//     kind (ModuleRowKind), dtype (stats::DType, -1 when none), data (the address of the first element), numel,
//     ndim, device (-1: CPU; else the CUDA device's index), stream (cudaStream_t of the device's current stream; 0
//     on the CPU), then ndim sizes and ndim strides (in elements)
//   labels: each row's label ("weight", "input[0]", "output[1][0]"), NUL-terminated, one after the other.
// The tensors' memory is read (host) or given the statistics kernel (device) before the call returns, so the hooks
// keep no reference to a tensor past their call.
#pragma once

#include <cstdint>

namespace trainscope {

inline constexpr int64_t kModuleFrameVersion = 1;
inline constexpr int64_t kModuleFrameRoot = 1;  // flags: the forward of a root module (the batch ends with it)
// flags: the module's gradients (TRAINSCOPE_WATCH=modules,backward): rows grad_output[i], then grad_input[i]. Never
// with kModuleFrameRoot: a backward frame ends no batch, it belongs to the batch of its forward.
inline constexpr int64_t kModuleFrameBackward = 2;
// flags: no frame, an event: a loss scaler (AMP's GradScaler) skipped the optimizer step because the gradients held
// inf/nan. Zero rows; the name is the scaler's class (the record keeps no string: only GradScaler is hooked). words[3],
// when given, is how many batches ago that step was (0: in the current one): a fused optimizer's skip is read from a
// GPU's found-inf once it is back on the host, without waiting for it, maybe after the next batch began.
inline constexpr int64_t kModuleFrameStepSkipped = 4;
// flags: no frame, an event: a loss scaler (AMP's GradScaler) was made enabled in this process; zero rows. Said once,
// before the gradients it scales: TRAINSCOPE_ON_NONFINITE=abort then waits for a batch's step before stopping on its
// inf/nan.
inline constexpr int64_t kModuleFrameLossScaler = 8;
// flags: the forward of a module in a smaller root's tree than the model's (a loss module called beside the model):
// a frame of the batch in progress, which it neither begins nor ends.
inline constexpr int64_t kModuleFrameBeside = 16;
// flags: no frame, an event: a loss scaler's step was applied (its gradients were finite); zero rows, words[3] as for
// kModuleFrameStepSkipped. Every step of the scaler is told, skipped or applied.
inline constexpr int64_t kModuleFrameStepApplied = 32;
inline constexpr int64_t kModuleRowHead = 7;  // words of a row before its sizes and strides
inline constexpr int64_t kModuleMaxDims = 64;

enum class ModuleRowKind : int64_t {
  kTensor = 0,
  kNone = 1,        // Python's None: "None"
  kNotATensor = 2,  // anything else: "not a tensor"
  kUnreadable = 3,  // a tensor whose elements we cannot read (a dtype we do not know, sparse, meta): says so
};

}  // namespace trainscope

extern "C" {
// Exported by libtrainscope.so for the hooks. Returns 0 when the frame was taken, 1 when this one frame was not (the
// thread is inside one of trainscope's own calls), < 0 when no frame can be (watching off, the engine absent, a
// malformed frame): the hooks then stop calling.
int trainscope_module_frame(const char* name, const char* kind, const char* labels, uint64_t labels_len,
                            const int64_t* words, uint64_t word_count);
// Whether a module with this qualified name and class gets frames (TRAINSCOPE_WATCH=modules:REGEX matches either;
// plain modules: every module): 1 or 0. Asked once per module by the hooks.
int trainscope_module_watched(const char* name, const char* kind);
// Whether the modules' gradients are frames too (TRAINSCOPE_WATCH=modules,backward): 1 or 0. Asked once by the hooks.
int trainscope_module_backward(void);
}
