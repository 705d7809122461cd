// A watched launch's buffers from its arguments, the driver's parameter layout and its allocations (kernel_buffers.h).
#include "collectors/launches/kernel_buffers.h"

#include <algorithm>
#include <cstring>

namespace trainscope::launches {

namespace {

void add_note(std::string* note, const std::string& text) {
  if (!note->empty()) *note += "; ";
  *note += text;
}

// A pointer-sized argument that points into device memory.
struct Candidate {
  uint32_t index = 0;
  uint64_t address = 0;
  Allocation allocation;
};

}  // namespace

KernelSignature describe_kernel(std::string_view demangled) {
  KernelSignature kernel;
  kernel.name = std::string(demangled);
  kernel.short_name = kernel_short_name(demangled);
  for (const std::string& type : kernel_parameter_types(demangled))
    kernel.parameters.push_back(describe_parameter(type));
  // The function's own template arguments first, then those of what encloses it (a class template's kernel).
  kernel.has_template_type = first_floating_type(kernel_template_arguments(demangled), &kernel.template_type);
  if (!kernel.has_template_type) {
    const size_t signature = demangled.rfind('(');
    kernel.has_template_type = first_floating_type(demangled.substr(0, signature), &kernel.template_type);
  }
  return kernel;
}

WatchedLaunch watched_launch(const ApiCall& call, const KernelSignature& kernel, CudaQueries& queries,
                             const BufferOptions& options) {
  WatchedLaunch launch;
  launch.short_name = kernel.short_name;
  launch.name = kernel.name;
  launch.stream = call.stream;
  launch.function_handle = call.function_handle;
  if (call.params == nullptr) {
    launch.note = "no kernel arguments were passed to the launch";
    return launch;
  }
  ParamInfo layout[kMaxWatchedParameters];
  uint32_t count = 0;
  if (!queries.param_layout(call.function_handle, layout, kMaxWatchedParameters, &count)) {
    launch.note = "no parameter layout: the driver cannot say (cuFuncGetParamInfo needs CUDA 12.4 or newer)";
    return launch;
  }
  count = std::min(count, kMaxWatchedParameters);
  // The signature types the parameters only when it lists as many as the driver reports.
  const bool typed = kernel.parameters.size() == count;

  Candidate candidates[kMaxWatchedParameters];
  uint32_t candidate_count = 0;
  for (uint32_t i = 0; i < count; ++i) {
    if (layout[i].size != sizeof(uint64_t) || call.params[i] == nullptr) continue;
    if (typed && !kernel.parameters[i].pointer) continue;  // a long or a double that happens to look like an address
    uint64_t address = 0;
    std::memcpy(&address, call.params[i], sizeof(address));
    Allocation allocation;
    if (address == 0 || !queries.allocation_of(address, &allocation) || !allocation.device) continue;
    if (address < allocation.base || address >= allocation.base + allocation.bytes) continue;
    candidates[candidate_count++] = {i, address, allocation};
  }

  for (uint32_t c = 0; c < candidate_count; ++c) {
    const Candidate& buffer = candidates[c];
    const bool output = !(typed && kernel.parameters[buffer.index].to_const);
    const std::string label = std::string(output ? "output[" : "input[") + std::to_string(buffer.index) + "]";
    stats::DType type = stats::DType::kFloat32;
    if (typed && kernel.parameters[buffer.index].to_pointer) {
      add_note(&launch.note, label + " skipped: an array of pointers");
      continue;
    }
    if (typed && kernel.parameters[buffer.index].has_element_type) {
      type = kernel.parameters[buffer.index].element_type;
    } else if (kernel.has_template_type) {
      type = kernel.template_type;
    } else if (options.has_default_type) {
      type = options.default_type;
    } else {
      add_note(&launch.note,
               label + " skipped: its element type is not in the kernel's name (set TRAINSCOPE_KERNEL_DTYPE)");
      continue;
    }
    uint64_t end = buffer.allocation.base + buffer.allocation.bytes;
    for (uint32_t other = 0; other < candidate_count; ++other) {
      const Candidate& next = candidates[other];
      if (next.allocation.base == buffer.allocation.base && next.address > buffer.address)
        end = std::min(end, next.address);
    }
    uint64_t bytes = end - buffer.address;
    if (bytes > options.max_buffer_bytes) {
      add_note(&launch.note, label + " cut to its first " + std::to_string(options.max_buffer_bytes) + " of " +
                                 std::to_string(bytes) + " bytes");
      bytes = options.max_buffer_bytes;
    }
    const uint64_t elements = bytes / stats::dtype_rules(type).size;
    if (elements == 0) continue;
    WatchedBuffer watched;
    watched.tensor.address = reinterpret_cast<const void*>(buffer.address);
    watched.tensor.count = elements;
    watched.tensor.dtype = type;
    watched.label = label;
    watched.output = output;
    launch.buffers.push_back(std::move(watched));
  }
  return launch;
}

}  // namespace trainscope::launches
