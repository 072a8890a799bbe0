// ScopedEnv: sets an environment variable for the lifetime of the object, then restores its previous value
// (or unsets it). Tests that read MESHCOMM_* variables use it so they leave the process environment as found.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace meshcomm::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace meshcomm::test
