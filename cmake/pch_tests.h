// Precompiled header of the unit tests: the standard headers plus GoogleTest and nlohmann-json,
// which nearly every test file includes (CMakeLists.txt, target_precompile_headers).
#pragma once
#include "pch_std.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
