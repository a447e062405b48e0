// unmask/device.h: where a tensor's memory lives and where an op runs.
#pragma once
#include <cstdint>
#include <string_view>

namespace unmask {

/// The backends. Every op front-end switches on this (src/ops/*.cc); an op a backend
/// does not implement throws Unsupported naming the op, device and dtype.
enum class Device : uint8_t { cpu, cuda };

constexpr std::string_view device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

}  // namespace unmask
