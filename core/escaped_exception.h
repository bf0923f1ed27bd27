#pragma once

#include <string_view>

namespace dslaunch::core {

// The exit code of a command that ended on an exception nothing handled.
inline constexpr int kEscapedExceptionExit = 70;  // EX_SOFTWARE, sysexits.h

// Call inside `catch (...)` around a binary's main: prints one line on stderr
// naming the program and the exception (out of memory, or what() said) and
// returns kEscapedExceptionExit, so that no input ends in an abort. Any
// exception reaching it is a bug or an exhausted resource: checks of bad input
// report it before this.
int report_escaped_exception(std::string_view program) noexcept;

}  // namespace dslaunch::core
