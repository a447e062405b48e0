// Precompiled header of the standard library headers most of the sources include (CMakeLists.txt,
// target_precompile_headers): parsing them took ~3 s of each translation unit's compile time.
// Only system headers belong here, so editing a project header never rebuilds it.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>
