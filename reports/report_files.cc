#include "reports/report_files.h"

#include <errno.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "base/private_files.h"

namespace trainscope::reports {

bool make_report_directory(const std::string& dir, std::string* error, std::string* notice) {
  const auto fail = [error](std::string why) {
    if (error != nullptr) *error = std::move(why);
    return false;
  };
  if (dir.empty()) return fail("no run directory given");
  const files::PrivateDirectory made = files::make_private_directory(dir.c_str());
  if (made.error == files::kOthersWrite)
    return fail("cannot use the run directory " + dir + ": it belongs to another user (uid " +
                std::to_string(made.owner_uid) + ") and others can write to it");
  if (made.error == files::kNotDirectory || made.error == files::kIsSymlink)
    return fail("cannot use the run directory " + dir + ": " + files::error_text(made.error));
  if (made.error != 0) return fail("cannot create the run directory " + dir + ": " + files::error_text(made.error));
  if (made.old_mode != 0 && notice != nullptr) {
    char mode[16];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(made.old_mode));
    *notice = "made the run directory " + dir + " private: it was mode " + mode + ", open to other users";
  }
  return true;
}

WrittenReport replace_report(const std::string& dir, const std::string& base_name, const std::string& text,
                             const nlohmann::json& json) {
  WrittenReport written;
  const std::string json_text = json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  for (const auto& [extension, content] : {std::pair{".json", &json_text}, std::pair{".txt", &text}}) {
    const std::string file = base_name + extension;
    if (const int error = replace_file(dir + "/" + file, *content); error != 0) {
      written.error = "cannot write " + dir + "/" + file + ": " + files::error_text(error);
      written.unwritten = {file, files::error_text(error), ""};
      return written;
    }
  }
  written.json_path = dir + "/" + base_name + ".json";
  written.text_path = dir + "/" + base_name + ".txt";
  return written;
}

int replace_file(const std::string& path, const std::string& content) {
  return files::replace_file(path.c_str(), content.data(), content.size());
}

int append_file(const std::string& path, const std::string& content) {
  return files::append_file(path.c_str(), content.data(), content.size());
}

WrittenReport write_report(const std::string& dir, const std::string& base_name, const std::string& text,
                           const nlohmann::json& json) {
  WrittenReport written;
  const auto fail = [&](std::string message, std::string_view extension, std::string cause) {
    written.error = std::move(message);
    written.unwritten.report = base_name + std::string(extension);
    written.unwritten.cause = std::move(cause);
    return written;
  };
  if (std::string error; !make_report_directory(dir, &error)) return fail(error, ".json", error);
  const std::string json_text = json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  // Both files are written whole under temporary names first, then published with link(), which never replaces a
  // name: the JSON, then the text. A reader (trainscope report during a hang, a test polling for the report) that
  // sees <base>.txt therefore sees both files complete. The temporaries' names end in neither .txt nor .json.
  static std::atomic<uint64_t> counter{0};
  const std::string temporary = dir + "/." + base_name + "." + std::to_string(::getpid()) + "." +
                                std::to_string(counter.fetch_add(1, std::memory_order_relaxed)) + ".part";
  const std::string text_temporary = temporary + "-text";
  const std::string json_temporary = temporary + "-json";
  // The temporaries are removed on every way out, but only those we created: a name someone else took stays theirs.
  struct Cleanup {
    const std::string& path;
    bool made = false;
    ~Cleanup() {
      if (made) ::unlink(path.c_str());
    }
  } json_cleanup{json_temporary}, text_cleanup{text_temporary};
  if (const int error = files::write_new_file(json_temporary.c_str(), json_text.data(), json_text.size()); error != 0) {
    return fail("cannot write " + json_temporary + ": " + files::error_text(error), ".json", files::error_text(error));
  }
  json_cleanup.made = true;
  if (const int error = files::write_new_file(text_temporary.c_str(), text.data(), text.size()); error != 0) {
    return fail("cannot write " + text_temporary + ": " + files::error_text(error), ".txt", files::error_text(error));
  }
  text_cleanup.made = true;
  for (int attempt = 1; attempt <= 100; ++attempt) {
    const std::string stem = dir + "/" + base_name + (attempt == 1 ? "" : "-" + std::to_string(attempt));
    if (::link(json_temporary.c_str(), (stem + ".json").c_str()) != 0) {
      if (errno == EEXIST) continue;
      const int error = errno;
      return fail("cannot write " + stem + ".json: " + std::strerror(error), ".json", std::strerror(error));
    }
    if (::link(text_temporary.c_str(), (stem + ".txt").c_str()) != 0) {
      const int error = errno;
      ::unlink((stem + ".json").c_str());  // ours, just published: the pair moves to the next name
      if (error == EEXIST) continue;
      return fail("cannot write " + stem + ".txt: " + std::strerror(error), ".txt", std::strerror(error));
    }
    written.text_path = stem + ".txt";
    written.json_path = stem + ".json";
    return written;
  }
  return fail("too many reports named " + base_name + " in " + dir, ".json", "too many reports of that name");
}

}  // namespace trainscope::reports
