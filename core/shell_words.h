#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dslaunch::core {

// Splits `text` into words as a POSIX shell (and Python's shlex.split, which
// DeepSpeed's launcher applies to --launcher_args) would, without expanding
// anything: blanks separate words, '...' is literal, "..." keeps blanks and
// honours \" \\ \$ \` inside, and a backslash outside quotes takes the next
// character as it is. nullopt, with `error` set, for an unterminated quote or
// a trailing backslash. Written here because no library this project links
// has shell quoting without expansion (wordexp(3) expands variables and globs).
std::optional<std::vector<std::string>> split_shell_words(const std::string& text,
                                                          std::string& error);

}  // namespace dslaunch::core
