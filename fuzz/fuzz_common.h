// The rule every fuzz target checks: a parser given bad bytes may only refuse them with
// std::runtime_error or std::invalid_argument whose message names the input. Any other
// exception, a message that does not say which file is bad, or a sanitizer report is a bug,
// and aborting here makes libFuzzer save the input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <typeinfo>

namespace combiner::fuzz {

[[noreturn]] inline void bug(const std::string& what) {
  std::fprintf(stderr, "\nFUZZ BUG: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Runs parse; returns true if it succeeded, false if it refused the input the documented way.
// needle: text the error message must contain ("" = any message).
template <class Parse>
bool refuses_cleanly(Parse&& parse, const std::string& needle) {
  std::string message;
  try {
    parse();
    return true;
  } catch (const std::runtime_error& e) {
    message = e.what();
  } catch (const std::invalid_argument& e) {
    message = e.what();
  } catch (const std::exception& e) {
    bug(std::string("undocumented exception type ") + typeid(e).name() + ": " + e.what());
  }
  if (message.find(needle) == std::string::npos)
    bug("error message does not name '" + needle + "': " + message);
  return false;
}

}  // namespace combiner::fuzz
