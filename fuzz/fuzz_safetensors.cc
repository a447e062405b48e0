// fuzz/fuzz_safetensors.cc: libFuzzer target for the safetensors reader.
//
// Feeds arbitrary bytes to SafeTensorsFile::parse. A malformed image must end in an
// unmask::Error; a valid one must yield tensors whose every byte range lies inside the input,
// which ASan checks by touching the first and last byte of each tensor.
//
//   clang++ -std=c++20 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
//       fuzz/fuzz_safetensors.cc src/io/*.cc src/core/tensor.cc src/ops/device_memory.cc -o /tmp/fuzz_safetensors
//   /tmp/fuzz_safetensors -max_total_time=60 fuzz/corpus_safetensors   (or fuzz/run_fuzzers.sh)
#include <cstdint>
#include <cstring>
#include <memory>

#include "io/safetensors.h"
#include "unmask/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Copy into an exactly-sized heap block so ASan flags a read one byte past the end.
  std::shared_ptr<uint8_t> bytes(new uint8_t[size ? size : 1], std::default_delete<uint8_t[]>());
  if (size) std::memcpy(bytes.get(), data, size);
  try {
    auto f = unmask::io::SafeTensorsFile::parse(bytes, size, "fuzz-input");
    volatile uint8_t sink = 0;
    for (const auto& info : f.tensors()) {
      unmask::Tensor t = f.tensor(info.name);
      if (t.nbytes() == 0) continue;
      const auto* p = static_cast<const uint8_t*>(t.raw());
      sink = sink + p[0] + p[t.nbytes() - 1];
    }
    for (const auto& [k, v] : f.metadata()) sink = sink + uint8_t(k.size() + v.size());
    (void)sink;
  } catch (const unmask::Error&) {
    // Expected for malformed input; anything else escaping (std::bad_alloc, json errors) is a bug.
  }
  return 0;
}
