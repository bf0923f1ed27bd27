#pragma once

#include <string>
#include <string_view>

namespace dslaunch::spec {

// `text` made safe to print on a terminal as part of one message line: C0
// controls, DEL and the C1 controls are written as escapes ("\n", "\t",
// "\x1b", "\u009b"), as are the bidirectional overrides and isolates
// (U+202A-U+202E, U+2066-U+2069) and bytes that are not valid UTF-8
// ("\xff"). Everything else, printable UTF-8 included, is kept as it is.
// Used wherever text from a job spec is echoed in an error, since the spec
// may come from someone else.
std::string terminal_safe(std::string_view text);

}  // namespace dslaunch::spec
