// Kernel names taken apart (kernel_names.h): the demangler's output is walked with a bracket depth, so the commas,
// colons and spaces inside template arguments, lambdas ("{lambda(int)#1}") and "(anonymous namespace)" never split it.
#include "collectors/launches/kernel_names.h"

#include <cxxabi.h>

#include <cstdlib>

namespace trainscope::launches {

namespace {

using stats::DType;

bool is_open(char c) { return c == '<' || c == '(' || c == '{' || c == '['; }
bool is_close(char c) { return c == '>' || c == ')' || c == '}' || c == ']'; }

std::string_view trim(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return text;
}

bool strip_suffix(std::string_view* text, std::string_view suffix) {
  if (text->size() < suffix.size() || text->substr(text->size() - suffix.size()) != suffix) return false;
  text->remove_suffix(suffix.size());
  *text = trim(*text);
  return true;
}

bool strip_prefix(std::string_view* text, std::string_view prefix) {
  if (text->substr(0, prefix.size()) != prefix) return false;
  text->remove_prefix(prefix.size());
  *text = trim(*text);
  return true;
}

// Drops the qualifiers that apply to the thing itself (a const pointer, a restrict pointer, a const member function).
std::string_view strip_own_qualifiers(std::string_view text) {
  text = trim(text);
  while (strip_suffix(&text, "const") || strip_suffix(&text, "volatile") || strip_suffix(&text, "__restrict__") ||
         strip_suffix(&text, "__restrict") || strip_suffix(&text, "restrict")) {
  }
  return text;
}

// The position of the bracket that opens the one closing at `close`, scanning backwards; npos when unbalanced.
size_t matching_open(std::string_view text, size_t close) {
  int depth = 0;
  for (size_t i = close + 1; i-- > 0;) {
    if (is_close(text[i])) {
      ++depth;
    } else if (is_open(text[i])) {
      if (--depth == 0) return i;
      if (depth < 0) return std::string_view::npos;
    }
  }
  return std::string_view::npos;
}

// The signature's parameter list: the '(' ... ')' that ends the name (after the function's own qualifiers).
bool parameter_list(std::string_view demangled, size_t* open, size_t* close) {
  const std::string_view head = strip_own_qualifiers(demangled);
  if (head.empty() || head.back() != ')') return false;
  const size_t at = matching_open(head, head.size() - 1);
  if (at == std::string_view::npos || at == 0) return false;
  *open = at;
  *close = head.size() - 1;
  return true;
}

// The qualified name before the parameter list, and where its own template argument list starts (npos: none).
struct NameParts {
  std::string_view name;  // "void at::native::vectorized_elementwise_kernel<4, ...>"
  size_t template_open = std::string_view::npos;
  bool balanced = true;
};

bool balanced(std::string_view text) {
  int depth = 0;
  for (const char c : text) {
    if (is_open(c)) ++depth;
    if (is_close(c) && --depth < 0) return false;
  }
  return depth == 0;
}

NameParts name_parts(std::string_view demangled) {
  NameParts parts;
  if (!balanced(demangled)) {
    parts.balanced = false;
    return parts;
  }
  size_t open = 0;
  size_t close = 0;
  parts.name = parameter_list(demangled, &open, &close) ? trim(demangled.substr(0, open)) : trim(demangled);
  if (!parts.name.empty() && parts.name.back() == '>') {
    parts.template_open = matching_open(parts.name, parts.name.size() - 1);
    if (parts.template_open == std::string_view::npos) parts.balanced = false;
  }
  return parts;
}

struct NamedType {
  std::string_view spelling;
  DType type;
};

// Spellings as the demangler writes them (int64_t is "long", int8_t "signed char" on Linux).
constexpr NamedType kElementTypes[] = {
    {"float", DType::kFloat32},
    {"double", DType::kFloat64},
    {"c10::Half", DType::kFloat16},
    {"at::Half", DType::kFloat16},
    {"__half", DType::kFloat16},
    {"half", DType::kFloat16},
    {"cutlass::half_t", DType::kFloat16},
    {"c10::BFloat16", DType::kBfloat16},
    {"at::BFloat16", DType::kBfloat16},
    {"__nv_bfloat16", DType::kBfloat16},
    {"nv_bfloat16", DType::kBfloat16},
    {"cutlass::bfloat16_t", DType::kBfloat16},
    {"__nv_fp8_e4m3", DType::kFloat8E4M3},
    {"c10::Float8_e4m3fn", DType::kFloat8E4M3},
    {"at::Float8_e4m3fn", DType::kFloat8E4M3},
    {"cutlass::float_e4m3_t", DType::kFloat8E4M3},
    {"__nv_fp8_e5m2", DType::kFloat8E5M2},
    {"c10::Float8_e5m2", DType::kFloat8E5M2},
    {"at::Float8_e5m2", DType::kFloat8E5M2},
    {"cutlass::float_e5m2_t", DType::kFloat8E5M2},
    // Vector types: their elements, in order (the extent is in bytes, so the count follows).
    {"__half2", DType::kFloat16},
    {"half2", DType::kFloat16},
    {"__nv_bfloat162", DType::kBfloat16},
    {"float2", DType::kFloat32},
    {"float4", DType::kFloat32},
    {"double2", DType::kFloat64},
    {"c10::complex<float>", DType::kFloat32},
    {"c10::complex<double>", DType::kFloat64},
    {"c10::complex<c10::Half>", DType::kFloat16},
    {"signed char", DType::kInt8},
    {"unsigned char", DType::kUint8},
    {"int", DType::kInt32},
    {"unsigned int", DType::kUint32},
    {"unsigned", DType::kUint32},
    {"long", DType::kInt64},
    {"long long", DType::kInt64},
    {"unsigned long", DType::kUint64},
    {"unsigned long long", DType::kUint64},
};

bool is_token_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == ':';
}

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

}  // namespace

std::string demangle(std::string_view symbol) {
  if (symbol.substr(0, 2) != "_Z") return std::string(symbol);
  const std::string mangled(symbol);  // NUL-terminated for the demangler
  int status = 0;
  char* text = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  if (status != 0 || text == nullptr) {
    std::free(text);
    return mangled;
  }
  std::string out(text);
  std::free(text);
  return out;
}

std::string kernel_short_name(std::string_view demangled) {
  const NameParts parts = name_parts(demangled);
  if (!parts.balanced) {
    const size_t cut = demangled.find_first_of("(<");
    return std::string(trim(demangled.substr(0, cut)));
  }
  const std::string_view name =
      parts.template_open != std::string_view::npos ? parts.name.substr(0, parts.template_open) : parts.name;
  // Back to the start of the unqualified name: a "::" or a space (after the return type) outside brackets.
  int depth = 0;
  size_t start = 0;
  for (size_t i = name.size(); i-- > 0;) {
    const char c = name[i];
    if (is_close(c)) {
      ++depth;
    } else if (is_open(c)) {
      --depth;
    } else if (depth == 0 && (c == ' ' || (c == ':' && i > 0 && name[i - 1] == ':'))) {
      start = i + 1;
      break;
    }
  }
  const std::string_view short_name = trim(name.substr(start));
  return std::string(short_name.empty() ? trim(demangled.substr(0, demangled.find_first_of("(<"))) : short_name);
}

std::vector<std::string> kernel_parameter_types(std::string_view demangled) {
  std::vector<std::string> types;
  size_t open = 0;
  size_t close = 0;
  if (!parameter_list(demangled, &open, &close)) return types;
  const std::string_view list = demangled.substr(open + 1, close - open - 1);
  if (trim(list).empty() || trim(list) == "void") return types;
  int depth = 0;
  size_t begin = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i == list.size() || (depth == 0 && list[i] == ',')) {
      types.emplace_back(trim(list.substr(begin, i - begin)));
      begin = i + 1;
    } else if (is_open(list[i])) {
      ++depth;
    } else if (is_close(list[i])) {
      --depth;
    }
  }
  return types;
}

std::string_view kernel_template_arguments(std::string_view demangled) {
  const NameParts parts = name_parts(demangled);
  if (!parts.balanced || parts.template_open == std::string_view::npos) return {};
  return parts.name.substr(parts.template_open + 1, parts.name.size() - parts.template_open - 2);
}

bool element_type_of(std::string_view type, stats::DType* out) {
  type = strip_own_qualifiers(type);
  while (strip_prefix(&type, "const ") || strip_prefix(&type, "volatile ")) {
  }
  for (const NamedType& named : kElementTypes) {
    if (type == named.spelling) {
      *out = named.type;
      return true;
    }
  }
  return false;
}

bool first_floating_type(std::string_view text, stats::DType* out) {
  size_t i = 0;
  while (i < text.size()) {
    if (!is_token_char(text[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && is_token_char(text[end])) ++end;
    DType type;
    if (element_type_of(text.substr(i, end - i), &type) && stats::dtype_rules(type).is_float) {
      *out = type;
      return true;
    }
    i = end;
  }
  return false;
}

ParameterType describe_parameter(std::string_view type) {
  ParameterType out;
  const std::string_view pointer = strip_own_qualifiers(type);
  if (pointer.empty() || pointer.back() != '*') return out;
  out.pointer = true;
  std::string_view pointee = trim(pointer.substr(0, pointer.size() - 1));
  if (strip_prefix(&pointee, "const ") || strip_suffix(&pointee, "const")) out.to_const = true;
  pointee = strip_own_qualifiers(pointee);
  while (strip_prefix(&pointee, "const ") || strip_prefix(&pointee, "volatile ")) out.to_const = true;
  if (!pointee.empty() && pointee.back() == '*') {
    out.to_pointer = true;
    return out;
  }
  out.has_element_type = element_type_of(pointee, &out.element_type);
  return out;
}

bool is_optimizer_kernel_name(std::string_view demangled) {
  // Fused optimizers only: PyTorch's fused=True Adam/AdamW/SGD/Adagrad run multi_tensor_apply_kernel with their own
  // functors (FusedAdamMathFunctor ...); apex's with AdamFunctor, LAMBStage1Functor ..., and its older
  // adam_cuda_kernel. Not multi_tensor_apply_kernel itself: foreach gradient clipping (LpNormFunctor), GradScaler's
  // unscale and every torch._foreach_* op run it too, several times a step, and a batch boundary at each would number
  // batches wrongly. PyTorch's default foreach (not fused) optimizers are therefore not recognised: their functors are
  // the generic foreach ones; batches then come from the collectives' period.
  static constexpr std::string_view kParts[] = {
      "FusedAdamMathFunctor", "FusedSgdMathFunctor", "FusedAdagradMathFunctor", "fused_adam",
      "fused_adamw",          "fused_sgd",           "adam_cuda_kernel",        "AdamFunctor",
      "SGDFunctor",           "NovoGradFunctor",     "AdagradFunctor",          "LAMBStage1Functor",
      "LAMBStage2Functor",    "lamb_cuda_kernel",
  };
  for (const std::string_view part : kParts) {
    if (contains(demangled, part)) return true;
  }
  return false;
}

}  // namespace trainscope::launches
