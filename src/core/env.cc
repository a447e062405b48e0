// core/env.cc: strict parsing of the UNMASK_* environment settings (env.h).
#include "core/env.h"

#include <cstdlib>
#include <string>

#include "unmask/error.h"

namespace unmask {

std::optional<bool> env_switch_opt(const char* name, const char* what) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  const std::string s = v;
  if (s == "0" || s == "1") return s == "1";
  throw Error(name, "='", s, "' is not a switch value: it takes 0 or 1", what ? std::string(" (") + what + ")" : "",
              Hint(std::string("unset it or set ") + name + "=0 or =1"));
}

bool env_switch(const char* name, bool fallback, const char* what) {
  return env_switch_opt(name, what).value_or(fallback);
}

int env_choice(const char* name, std::initializer_list<int> allowed, int fallback, const char* what) {
  const char* v = std::getenv(name);
  if (!v) return fallback;
  const std::string s = v;
  std::string list;
  for (int a : allowed) {
    if (s == std::to_string(a)) return a;
    list += (list.empty() ? "" : ", ") + std::to_string(a);
  }
  throw Error(name, "='", s, "' is not one of its values: ", list, what ? std::string(" (") + what + ")" : "",
              Hint(std::string("unset it or set one of them")));
}

}  // namespace unmask
