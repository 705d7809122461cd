// `trainscope stats FILE --dtype T [--offset BYTES] [--count N] [--json]`: the frame-report figures of a raw dump.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/stats.h"
#include "reports/frame_report.h"
#include "tools/commands.h"

namespace trainscope::tools {
namespace {

constexpr const char* kUsage =
    "usage: trainscope stats FILE --dtype T [--offset BYTES] [--count N] [--json]\n"
    "  FILE            a raw tensor dump: the elements' bytes, little-endian, nothing else\n"
    "  --dtype T       fp64 fp32 fp16 bf16 e4m3 e5m2 int8 uint8 int32 uint32 int64 uint64, or a PyTorch / NCCL\n"
    "                  spelling (float32, half, bfloat16, float8_e4m3fn, ncclFloat16, ...)\n"
    "  --offset BYTES  skip this many bytes first (default 0)\n"
    "  --count N       read N elements (default: all the rest, which must be a whole number of elements)\n"
    "  --json          print a JSON object instead of text\n"
    "Text: one frame-report row (abs min, abs max, file), then the counts. NaN anywhere makes abs min/max nan.\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "trainscope stats: %s\n", message.c_str());
  return 2;
}

bool parse_u64(const char* text, std::uint64_t* out) {
  if (text[0] < '0' || text[0] > '9') return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = value;
  return true;
}

// JSON has no inf or NaN: finite values are numbers, the others the strings "inf", "-inf" and "nan".
nlohmann::json json_value(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

// Read-only view of a whole file; mmap so that a dump of many GB costs no copy and no buffer.
class MappedFile {
 public:
  ~MappedFile() {
    if (data_ != nullptr) munmap(data_, size_);
  }
  // False with `error` saying why (base/errors.h).
  bool open(const char* path, std::string* error) {
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      *error = std::string("cannot open '") + path + "': " + std::strerror(errno);
      return false;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      const int stat_error = errno;
      close(fd);
      *error = std::string("cannot stat '") + path + "': " + std::strerror(stat_error);
      return false;
    }
    if (!S_ISREG(st.st_mode)) {
      close(fd);
      *error = std::string("'") + path + "' is not a regular file";
      return false;
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
    if (size_ > 0) {
      void* data = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (data == MAP_FAILED) {
        const int map_error = errno;
        close(fd);
        *error = std::string("cannot map '") + path + "': " + std::strerror(map_error);
        return false;
      }
      data_ = data;
      madvise(data_, size_, MADV_SEQUENTIAL);
    }
    close(fd);
    return true;
  }
  const unsigned char* data() const { return static_cast<const unsigned char*>(data_); }
  std::uint64_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace

int cmd_stats(int argc, char** argv) {
  const char* path = nullptr;
  const char* dtype_text = nullptr;
  std::uint64_t offset = 0;
  std::uint64_t count = 0;
  bool count_given = false;
  bool as_json = false;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    if (std::strcmp(arg, "--help") == 0 || std::strcmp(arg, "-h") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (std::strcmp(arg, "--json") == 0) {
      as_json = true;
    } else if (std::strcmp(arg, "--dtype") == 0) {
      if (i + 1 >= argc)
        return usage_error(std::string("--dtype needs a value; accepted: ") + stats::dtype_spellings());
      dtype_text = argv[++i];
    } else if (std::strcmp(arg, "--offset") == 0) {
      if (i + 1 >= argc || !parse_u64(argv[i + 1], &offset)) {
        return usage_error("--offset needs a whole number of bytes");
      }
      ++i;
    } else if (std::strcmp(arg, "--count") == 0) {
      if (i + 1 >= argc || !parse_u64(argv[i + 1], &count)) {
        return usage_error("--count needs a whole number of elements");
      }
      count_given = true;
      ++i;
    } else if (arg[0] == '-' && arg[1] != '\0') {
      return usage_error(std::string("unknown option '") + arg + "'\n" + kUsage);
    } else if (path == nullptr) {
      path = arg;
    } else {
      return usage_error(std::string("one FILE only; also got '") + arg + "'");
    }
  }
  if (path == nullptr) return usage_error(std::string("missing FILE\n") + kUsage);
  if (dtype_text == nullptr) {
    return usage_error(std::string("missing --dtype; accepted: ") + stats::dtype_spellings());
  }
  const std::optional<stats::DType> dtype = stats::parse_dtype(dtype_text);
  if (!dtype) {
    return usage_error(std::string("unknown dtype '") + dtype_text + "'; accepted: " + stats::dtype_spellings());
  }
  const std::uint64_t element_size = stats::dtype_size(*dtype);

  MappedFile file;
  if (std::string error; !file.open(path, &error)) return usage_error(error);
  if (offset > file.size()) {
    return usage_error("--offset " + std::to_string(offset) + " is past the end of '" + path + "' (" +
                       std::to_string(file.size()) + " bytes)");
  }
  const std::uint64_t available = file.size() - offset;
  if (count_given) {
    if (count > available / element_size) {
      return usage_error("--count " + std::to_string(count) + " " + stats::dtype_name(*dtype) + " elements (" +
                         std::to_string(element_size) + " bytes each) from offset " + std::to_string(offset) +
                         " go past the end of '" + path + "' (" + std::to_string(file.size()) + " bytes)");
    }
  } else {
    if (available % element_size != 0) {
      return usage_error("'" + std::string(path) + "' holds " + std::to_string(available) + " bytes from offset " +
                         std::to_string(offset) + ", not a whole number of " + stats::dtype_name(*dtype) +
                         " elements (" + std::to_string(element_size) + " bytes each); give --count or --offset");
    }
    count = available / element_size;
  }

  const stats::TensorStats result =
      stats::compute_stats_host(count == 0 ? nullptr : file.data() + offset, count, *dtype);

  if (as_json) {
    nlohmann::json out;
    out["file"] = path;
    out["dtype"] = stats::dtype_name(*dtype);
    out["count"] = result.count;
    // No element, no magnitude: null, not the identities inf and -inf. Likewise when every element is inf/nan.
    const bool any = result.count > 0;
    const bool any_finite = result.finite_count() > 0;
    out["abs_min"] = any ? json_value(result.abs_min) : nlohmann::json(nullptr);
    out["abs_max"] = any ? json_value(result.abs_max) : nlohmann::json(nullptr);
    out["finite_abs_min"] = any_finite ? json_value(result.finite_abs_min) : nlohmann::json(nullptr);
    out["finite_abs_max"] = any_finite ? json_value(result.finite_abs_max) : nlohmann::json(nullptr);
    out["nan"] = result.nan_count;
    out["pos_inf"] = result.pos_inf_count;
    out["neg_inf"] = result.neg_inf_count;
    out["first_nonfinite"] =
        result.first_nonfinite < 0 ? nlohmann::json(nullptr) : nlohmann::json(result.first_nonfinite);
    char checksum[19];
    std::snprintf(checksum, sizeof checksum, "0x%016llx", static_cast<unsigned long long>(result.checksum));
    out["checksum"] = checksum;
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  // The row a frame report prints for this tensor ("empty" when it has no element).
  std::printf("%s", reports::format_frame_row(reports::FrameRow::tensor(path, result)).c_str());
  std::printf("elements: %llu %s\n", static_cast<unsigned long long>(result.count), stats::dtype_name(*dtype));
  const std::string first = result.first_nonfinite < 0 ? std::string("none") : std::to_string(result.first_nonfinite);
  std::printf("nan: %llu  +inf: %llu  -inf: %llu  first non-finite: %s\n",
              static_cast<unsigned long long>(result.nan_count), static_cast<unsigned long long>(result.pos_inf_count),
              static_cast<unsigned long long>(result.neg_inf_count), first.c_str());
  if (result.finite_count() > 0) {
    std::printf("finite abs min: %s  finite abs max: %s\n", stats::format_abs_value(result.finite_abs_min).c_str(),
                stats::format_abs_value(result.finite_abs_max).c_str());
  } else {
    std::printf("finite abs min: none  finite abs max: none (no finite element)\n");
  }
  std::printf("checksum: 0x%016llx\n", static_cast<unsigned long long>(result.checksum));
  return 0;
}

}  // namespace trainscope::tools
