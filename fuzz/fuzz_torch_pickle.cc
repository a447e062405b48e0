// fuzz/fuzz_torch_pickle.cc: libFuzzer target for the torch.save reader (src/io/torch_pickle.h).
//
// Arbitrary bytes go to parse_torch_checkpoint. Two shapes of input, chosen by the first byte:
//   * odd:  the rest is the whole file (exercises the zip directory reader);
//   * even: the rest is data.pkl, wrapped here in a valid STORED zip next to a 64-byte storage
//           entry "f/data/0" (exercises the pickle machine and the tensor views).
// A malformed image must end in an unmask::Error (never a crash, leak, hang or UB); every tensor
// returned must lie in readable memory, which ASan checks by touching its first and last byte.
//
//   clang++ -std=c++20 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
//       fuzz/fuzz_torch_pickle.cc src/io/torch_pickle.cc src/core/tensor.cc src/ops/device_memory.cc -o /tmp/fuzz_torch_pickle
//   /tmp/fuzz_torch_pickle -max_total_time=60 fuzz/corpus_torch_pickle   (or fuzz/run_fuzzers.sh)
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "io/torch_pickle.h"
#include "unmask/error.h"

namespace {

void put(std::string& s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s.push_back(char((v >> (8 * i)) & 0xff));
}

std::string stored_zip(const std::string& pkl) {
  const std::string storage(64, '\x01');
  const std::pair<std::string, const std::string*> entries[] = {{"f/data.pkl", &pkl}, {"f/data/0", &storage}};
  std::string out, central;
  for (const auto& [name, data] : entries) {
    const uint64_t offset = out.size();
    put(out, 0x04034b50, 4);
    put(out, 20, 2);
    put(out, 0, 2);
    put(out, 0, 2);
    put(out, 0, 8);
    put(out, data->size(), 4);
    put(out, data->size(), 4);
    put(out, name.size(), 2);
    put(out, 0, 2);
    out += name + *data;
    put(central, 0x02014b50, 4);
    put(central, 20, 2);
    put(central, 20, 2);
    put(central, 0, 2);
    put(central, 0, 2);
    put(central, 0, 8);
    put(central, data->size(), 4);
    put(central, data->size(), 4);
    put(central, name.size(), 2);
    put(central, 0, 8);
    put(central, 0, 4);
    put(central, offset, 4);
    central += name;
  }
  const uint64_t cd = out.size();
  out += central;
  put(out, 0x06054b50, 4);
  put(out, 0, 4);
  put(out, 2, 2);
  put(out, 2, 2);
  put(out, central.size(), 4);
  put(out, cd, 4);
  put(out, 0, 2);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string image = (data[0] & 1) ? std::string(reinterpret_cast<const char*>(data + 1), size - 1)
                                    : stored_zip(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  // An exactly-sized heap block so ASan flags a read one byte past the end.
  std::shared_ptr<uint8_t> bytes(new uint8_t[image.size() ? image.size() : 1], std::default_delete<uint8_t[]>());
  if (!image.empty()) std::memcpy(bytes.get(), image.data(), image.size());
  try {
    const auto ck = unmask::io::parse_torch_checkpoint(bytes, image.size(), "fuzz-input");
    volatile uint8_t sink = 0;
    for (const auto& t : ck.tensors) {
      if (t.tensor.nbytes() == 0) continue;
      const auto* p = static_cast<const uint8_t*>(t.tensor.raw());
      sink = sink + p[0] + p[t.tensor.nbytes() - 1];
    }
    for (const auto& o : ck.other) sink = sink + uint8_t(o.size());
    (void)sink;
    (void)unmask::io::torch_state_dict(ck);
  } catch (const unmask::Error&) {
    // Expected for malformed input; anything else escaping (std::bad_alloc, out_of_range) is a bug.
  }
  return 0;
}
