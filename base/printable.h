// Strings from outside this process (a flight recorder file, a rank on the wire, a report on disk) made safe to print:
// every control character becomes a visible escape, so that a crafted host name cannot drive the reader's terminal.
//
//   printable("node\x1b]0;x\x07")   -> the 20 characters  node\x1b]0;x\x07  (backslash, 'x', '1', 'b', ...)
//   printable_text("a\nb\tc\x1b")  -> "a\nb\tc" then the 4 characters  \x1b : lines and tabs are kept
//   printable_json(dumped)          -> the same JSON, with DEL and the C1 controls as \u007f, \u009b, ...
//
// Escaped: the C0 controls (bytes 0x00-0x1f), DEL (0x7f), the C1 controls (U+0080-U+009F, which some terminals obey
// as escapes) and every byte that is not part of valid UTF-8; each byte as \xHH (lower-case hex). Everything else,
// backslashes and non-ASCII letters included, is kept: escaping an already printable string changes nothing. This is
// the one escaping of such strings: every report, summary and log line that shows one goes through it.
#pragma once

#include <string>
#include <string_view>

namespace trainscope::reports {

// For one-line strings (a host name, a path, a run id): every control character escaped, newlines too.
std::string printable(std::string_view text);

// For multi-line text (a report, a verdict's text): as printable(), but '\n' and '\t' are kept.
std::string printable_text(std::string_view text);

// For JSON text (nlohmann's dump, which escapes the C0 controls itself): DEL and the C1 controls as JSON's \u00XX
// escapes, a byte that is not UTF-8 as \ufffd; the JSON stays valid and means the same.
std::string printable_json(std::string_view json);

}  // namespace trainscope::reports
